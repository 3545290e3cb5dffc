package grpcretry

import (
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound/internal/observe"
	"github.com/rebound-go/rebound/serviceconfig"
)

// methodEntry is what every call of one method on one target starts from,
// resolved once rather than on each call: the method config, its
// per-attempt timeout, its strategy and its statistics. A target is made
// anew when the resolver delivers a new config, and its entries with it.
type methodEntry struct {
	name    string
	mc      *serviceconfig.MethodConfig
	timeout time.Duration
	policy  *policyEntry                   // nil unless mc retries or hedges and c is enabled
	stats   atomic.Pointer[observe.Method] // made at the first call that ends
	// plain: a call needs nothing of mc but its plain retry policy (see
	// policyEntry.plain): no timeout, per call or per attempt, no call
	// options. Client.unary goes straight to Client.retried.
	plain bool
	// native says whether grpc-go has a retryPolicy for the method on the
	// target's conn (see Client.nativeConflict).
	native atomic.Int32
	// bare: a call needs nothing at all, neither a policy, nor anything
	// of mc, nor the throttle's count of calls without a policy, nor the
	// client's rate limit or adaptive throttle: Client.unary invokes it.
	bare bool
}

// maxMethods bounds the entries one target keeps: a conn that calls more
// methods resolves the others on each call.
const maxMethods = 1024

// method returns the entry of name on t.
func (c *Client) method(t *target, name string) *methodEntry {
	if m := t.lastMethod.Load(); m != nil && m.name == name {
		return m
	}
	if v, ok := t.methods.Load(name); ok {
		m := v.(*methodEntry)
		t.lastMethod.Store(m)
		return m
	}
	m := c.newMethodEntry(t, name)
	if t.nmethods.Load() >= maxMethods {
		return m
	}
	if v, loaded := t.methods.LoadOrStore(name, m); loaded {
		m = v.(*methodEntry)
	} else {
		t.nmethods.Add(1)
	}
	t.lastMethod.Store(m)
	return m
}

func (c *Client) newMethodEntry(t *target, name string) *methodEntry {
	mc := t.cfg.MethodConfig(name)
	m := &methodEntry{name: name, mc: mc, timeout: c.opts.Timeout(mc)}
	if !c.opts.Disabled && mc != nil && (mc.RetryPolicy != nil || mc.HedgingPolicy != nil) {
		m.policy = c.policy(t, mc)
		m.plain = m.policy.plain && m.timeout == 0 && noSettings(mc)
	}
	m.bare = m.policy == nil && (mc == nil || noSettings(mc)) &&
		(t.cfg.RetryThrottling == nil || c.opts.Disabled) && c.opts.RateLimit == nil && c.opts.AdaptiveThrottle == nil
	return m
}

// succeeded records a call of m that succeeded at its first attempt, with
// nothing else to tell: what [Client.record] records for it.
func (c *Client) succeeded(m *methodEntry) { c.stats(m).Succeeded() }

// stats returns the handle of m's statistics.
func (c *Client) stats(m *methodEntry) *observe.Method {
	s := m.stats.Load()
	if s == nil {
		h := c.rec.Method(m.name)
		s = &h
		m.stats.Store(s)
	}
	return s
}

// noSettings reports whether mc sets nothing that callSettings applies:
// no timeout, waitForReady or message limits.
func noSettings(mc *serviceconfig.MethodConfig) bool {
	return mc.Timeout == 0 && mc.WaitForReady == nil && mc.MaxRequestMessageBytes == nil && mc.MaxResponseMessageBytes == nil
}
