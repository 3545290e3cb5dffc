package grpcretry

import (
	"context"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/adaptive"
	"github.com/rebound-go/rebound/internal/observe"
	"github.com/rebound-go/rebound/internal/ratelimit"
	"github.com/rebound-go/rebound/internal/replay"
	"github.com/rebound-go/rebound/serviceconfig"
)

// Client holds the retry state of the connections it is installed on: the
// service config, the options, and the throttle of each server name. Make
// one with [New] and install it with [Client.DialOptions], or use
// [DialOptions]. A Client is safe for concurrent use and may be installed on
// many ClientConns.
type Client struct {
	cfg  *serviceconfig.Config
	opts options

	last     atomic.Pointer[target] // the target of the latest call
	targets  sync.Map               // weak.Pointer[grpc.ClientConn] -> *target, until the conn is collected
	resolved sync.Map               // target string -> weak.Pointer[resolved], the resolvers' configs

	configErrors atomic.Uint64 // service configs from resolvers that were rejected

	buffers replay.Pool // bytes kept for replay, against WithBufferLimits

	rec    *observe.Recorder // statistics, metrics and decision logs
	tracer *observe.Tracer   // nil without WithTracerProvider
	clock  rebound.Clock     // the options' clock, or the real one
	epoch  time.Time         // with the real clock, the base of now's readings
}

// target is the retry state of one ClientConn under one service config.
// It holds the conn weakly, so that a conn the application has closed and
// dropped is collected, and its target with it. When the conn's resolver
// delivers a new config, the conn gets a new target; calls in flight keep
// the one they started with, and so their policy.
type target struct {
	cc       weak.Pointer[grpc.ClientConn]
	cfg      *serviceconfig.Config // the config in force when the target was made
	src      *resolved             // where a new config comes from; nil: cfg is the Client's, for good
	settled  atomic.Bool           // calls need not wait for src's resolver (see Client.await)
	uri      string                // the canonical target, for metrics and logs
	throttle *rebound.Throttle     // nil without retryThrottling
	err      error                 // why the throttle could not be made
	gate     *adaptive.Gate        // the adaptive throttle; nil without WithAdaptiveThrottle
	limit    *ratelimit.Gate       // the adaptive rate limit; nil without WithAdaptiveRateLimit
	policies sync.Map              // *serviceconfig.MethodConfig -> *policyEntry

	methods    sync.Map                    // full method name -> *methodEntry
	nmethods   atomic.Int32                // entries in methods, up to maxMethods
	lastMethod atomic.Pointer[methodEntry] // the entry of the latest call

	// statsHeaders: callStats has handed a hedged attempt on this conn
	// its response headers, so it is installed and hands them all.
	statsHeaders atomic.Bool
}

// policyEntry is the strategy of one method config on one target: retry or
// hedge is set (or err).
type policyEntry struct {
	retry    *rebound.Retrier
	hedge    *rebound.Hedger
	once     *rebound.Retrier // with hedge: for a call whose request does not fit the buffer
	budget   rebound.Budget   // what retry and hedge spend (the throttle, WithBudget's); nil for none
	err      error
	adaptive sync.Map // full method name -> *adaptiveMethod, with WithAdaptiveHedging

	// plain: retry's first attempt needs nothing around it. The client
	// neither traces, nor meters, nor limits the rate, nor gates attempts
	// adaptively, and no call budget counts calls in flight: a call's
	// first attempt is then made before the retry loop (see
	// Client.retried).
	plain bool
}

// New returns a Client for cfg, or an error naming the first invalid option.
// A nil cfg configures no policy: calls are made once.
func New(cfg *serviceconfig.Config, opts ...Option) (*Client, error) {
	o := buildOptions(opts)
	if o.Err != nil {
		return nil, o.Err
	}
	if cfg == nil {
		cfg = &serviceconfig.Config{}
	}
	rec, err := observe.New(o.MeterProvider, o.Logger, "github.com/rebound-go/rebound/grpcretry", observe.GRPC)
	if err != nil {
		return nil, fmt.Errorf("grpcretry: WithMeterProvider: %w", err)
	}
	clock := o.Clock
	if clock == nil {
		clock = rebound.RealClock()
	}
	tracer := observe.NewTracer(o.TracerProvider, "github.com/rebound-go/rebound/grpcretry", observe.SystemGRPC)
	c := &Client{cfg: cfg, opts: o, rec: rec, tracer: tracer, clock: clock}
	c.buffers.Limits = o.buffers
	if o.Clock == nil {
		c.epoch = time.Now()
	}
	return c, nil
}

// Stats returns a snapshot of the retry statistics of every method that a
// policy governed (gRFC A6 "Retry and Hedging Statistics"), by full method
// name. It is safe for concurrent use.
func (c *Client) Stats() rebound.Stats { return c.rec.Stats() }

// installed maps each ClientConn that has made a call through a Client to
// that Client, for StatsOf, until the conn is collected.
var installed sync.Map // weak.Pointer[grpc.ClientConn] -> *Client

// StatsOf returns the retry statistics of the Client installed on cc, by
// [DialOptions] or [Client.DialOptions]: what [Client.Stats] returns, for
// the conns made with the one-liner. A Client installed on several conns
// counts the calls of all of them. Before the first call through cc, or
// for a conn without rebound, the result is empty. It is safe for
// concurrent use.
func StatsOf(cc *grpc.ClientConn) rebound.Stats {
	if v, ok := installed.Load(weak.Make(cc)); ok {
		return v.(*Client).Stats()
	}
	return rebound.Stats{}
}

// DialOptions installs rebound's retries on a ClientConn in one line:
//
//	conn, err := grpc.NewClient(target, append(grpcretry.DialOptions(cfg), creds)...)
//
// It returns what [Client.DialOptions] returns for a [Client] of cfg. An
// invalid option does not panic: grpc.NewClient fails with an error that
// ends with the option's own, as [New] returns it:
//
//	grpc: the provided default service config is invalid: error parsing config for policy "grpcretry.DialOptions": invalid option, not a service config: grpcretry: WithMaxAttemptsCap: n must be >= 1, got 0
//
// grpc-go frames it as its default service config, the only error of
// grpc.NewClient that a dial option can carry. Should a later
// grpc.WithDefaultServiceConfig hide that error, every call fails with
// codes.Internal and the option's error. [New] returns the error alone.
func DialOptions(cfg *serviceconfig.Config, opts ...Option) []grpc.DialOption {
	c, err := New(cfg, opts...)
	if err != nil {
		fail := status.Error(codes.Internal, err.Error())
		return []grpc.DialOption{
			failNewClient("invalid option, not a service config: " + err.Error()),
			grpc.WithDisableRetry(),
			grpc.WithChainUnaryInterceptor(func(context.Context, string, any, any, *grpc.ClientConn, grpc.UnaryInvoker, ...grpc.CallOption) error {
				return fail
			}),
			grpc.WithChainStreamInterceptor(func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, grpc.Streamer, ...grpc.CallOption) (grpc.ClientStream, error) {
				return nil, fail
			}),
		}
	}
	return c.DialOptions()
}

// DialOptions returns c's interceptors, the resolver wrappers that take
// the service config a name resolver delivers (see [WithResolver]), and,
// when c's config hedges a method or c records metrics or traces, a stats
// handler: it commits a hedged unary call to the attempt whose response
// headers arrive first (A6), and counts transparent retries (and notes
// them on the attempt's span). Installed by hand, without it, the
// interceptors learn of a unary attempt's headers only when the attempt
// ends; so do they for a hedgingPolicy that only a resolver delivers, as
// the handler costs every call some fifteen allocations: hedge a method in
// c's config to have it installed.
//
// A config from the resolver of the conn's target (a DNS TXT record, say)
// replaces c's config, which is the default until one arrives, as with
// grpc.WithDefaultServiceConfig; grpc.WithDisableServiceConfig keeps c's.
// Calls started after an update run under the new config; calls in flight
// keep their policy. An invalid config changes nothing (see
// [Client.ResolverConfigErrors]). Conns of one Client that resolve the
// same target share the resolver's config.
//
// grpc-go's own retries stay on, but grpc-go never sees a retryPolicy
// from c or from a wrapped resolver: rebound hands it only the fields it
// acts on and rebound does not, so a call is retried in one place. A
// method for which a retryPolicy reaches grpc-go another way (a
// grpc.WithDefaultServiceConfig of the application's, before or after
// these options) is not retried twice over: the calls that rebound would
// retry or hedge fail with codes.Internal, naming the conflict and the
// fix (see the package doc). On an xds target grpc-go goes on applying
// the routes' retry policies.
//
// When the config has loadBalancingConfig, loadBalancingPolicy or
// healthCheckConfig, DialOptions also hands those fields, and only those,
// to grpc-go with grpc.WithDefaultServiceConfig: a config naming
// rebound_distinct sends hedges to distinct backends with no further
// option, and grpc.NewClient rejects a policy it does not know. A
// grpc.WithDefaultServiceConfig placed after these options replaces them.
func (c *Client) DialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(c.StreamClientInterceptor()),
	}
	opts = append(opts, c.resolverOptions()...)
	if c.opts.MeterProvider != nil || c.tracer != nil || c.hedges() {
		opts = append(opts, grpc.WithStatsHandler(callStats{}))
	}
	if sc, ok := grpcServiceConfig(c.cfg); ok {
		opts = append(opts, sc)
	}
	return opts
}

// hedges reports whether any method of c's config is hedged.
func (c *Client) hedges() bool {
	for i := range c.cfg.MethodConfigs {
		if c.cfg.MethodConfigs[i].HedgingPolicy != nil {
			return true
		}
	}
	return false
}

// target returns the retry state of cc, made on first use and dropped once
// cc has been collected: a process that opens and closes conns keeps no
// state for the closed ones.
func (c *Client) target(cc *grpc.ClientConn) *target {
	if t := c.last.Load(); t != nil && t.cc.Value() == cc && t.current() {
		return t
	}
	key := weak.Make(cc)
	for {
		v, ok := c.targets.Load(key)
		if ok {
			old := v.(*target)
			if old.current() {
				c.last.Store(old)
				return old
			}
			// The resolver delivered a new config.
			if t := c.newTarget(cc, key, old.src); c.targets.CompareAndSwap(key, v, t) {
				c.last.Store(t)
				return t
			}
			continue
		}
		t := c.newTarget(cc, key, c.source(cc))
		if _, loaded := c.targets.LoadOrStore(key, t); loaded {
			continue
		}
		if cc != nil {
			installed.Store(key, c)
			runtime.AddCleanup(cc, func(key weak.Pointer[grpc.ClientConn]) {
				c.targets.Delete(key)
				installed.CompareAndDelete(key, c)
				// The latest target holds what came from the conn's
				// resolver; drop it too.
				if last := c.last.Load(); last != nil && last.cc == key {
					c.last.CompareAndSwap(last, nil)
				}
			}, key)
		}
		c.last.Store(t)
		return t
	}
}

// newTarget makes the retry state of cc under the config src has in force
// (c's own without src). A throttle is shared while the server name and
// the retryThrottling settings stay the same.
func (c *Client) newTarget(cc *grpc.ClientConn, key weak.Pointer[grpc.ClientConn], src *resolved) *target {
	t := &target{cc: key, cfg: c.cfg, src: src}
	if src != nil {
		t.cfg = src.cfg.Load()
	}
	if cc != nil {
		t.uri = cc.CanonicalTarget()
	}
	t.throttle, t.err = a6.Throttle(c.serverName(cc), t.cfg.RetryThrottling)
	t.gate, t.limit = c.opts.Gates(c.serverName(cc), c.clock)
	return t
}

// current reports whether t's config is still the one in force.
func (t *target) current() bool { return t.src == nil || t.src.cfg.Load() == t.cfg }

// serverName is the name throttling is kept under.
func (c *Client) serverName(cc *grpc.ClientConn) string {
	if c.opts.ServerName != "" {
		return c.opts.ServerName
	}
	if cc == nil {
		return ""
	}
	return endpoint(cc.CanonicalTarget())
}

// endpoint returns the endpoint of a canonical target such as
// "dns:///host:443" (host:443).
func endpoint(target string) string {
	u, err := url.Parse(target)
	if err != nil {
		return target
	}
	if u.Opaque != "" {
		return u.Opaque
	}
	if p := strings.TrimPrefix(u.Path, "/"); p != "" {
		return p
	}
	return u.Host
}

// policy returns the strategy for mc on t, made on first use.
func (c *Client) policy(t *target, mc *serviceconfig.MethodConfig) *policyEntry {
	if v, ok := t.policies.Load(mc); ok {
		return v.(*policyEntry)
	}
	v, _ := t.policies.LoadOrStore(mc, c.newPolicy(t, mc))
	return v.(*policyEntry)
}

// newPolicy makes the strategy for mc on t, for [Client.policy] to keep,
// or for one call whose Override changed its method config.
func (c *Client) newPolicy(t *target, mc *serviceconfig.MethodConfig) *policyEntry {
	e := &policyEntry{err: t.err}
	if e.err == nil {
		e.retry, e.hedge, e.err = a6.Strategies(mc, t.throttle, c.opts.Settings())
		if e.hedge != nil {
			e.once = a6.Once(t.throttle, c.opts.Settings())
		}
		e.budget = a6.Budget(t.throttle, c.opts.Settings())
		_, counts := e.budget.(rebound.CallBudget)
		e.plain = e.retry != nil && !counts && c.tracer == nil && c.opts.MeterProvider == nil &&
			c.opts.RateLimit == nil && c.opts.AdaptiveThrottle == nil
	}
	return e
}

// callSettings applies mc's timeout, waitForReady and message limits to a
// call: the timeout only when it is shorter than ctx's deadline, the call
// options before the caller's own, which therefore win.
func callSettings(ctx context.Context, mc *serviceconfig.MethodConfig, opts []grpc.CallOption) (context.Context, context.CancelFunc, []grpc.CallOption) {
	cancel := context.CancelFunc(func() {})
	if mc == nil {
		return ctx, cancel, opts
	}
	if mc.Timeout > 0 {
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > mc.Timeout {
			ctx, cancel = context.WithTimeout(ctx, mc.Timeout)
		}
	}
	if mc.WaitForReady == nil && mc.MaxRequestMessageBytes == nil && mc.MaxResponseMessageBytes == nil {
		return ctx, cancel, opts
	}
	pre := make([]grpc.CallOption, 0, 3+len(opts))
	if mc.WaitForReady != nil {
		pre = append(pre, grpc.WaitForReady(*mc.WaitForReady))
	}
	if mc.MaxRequestMessageBytes != nil {
		pre = append(pre, grpc.MaxCallSendMsgSize(clampInt(*mc.MaxRequestMessageBytes)))
	}
	if mc.MaxResponseMessageBytes != nil {
		pre = append(pre, grpc.MaxCallRecvMsgSize(clampInt(*mc.MaxResponseMessageBytes)))
	}
	return ctx, cancel, append(pre, opts...)
}

func clampInt(v int64) int {
	const maxInt = int64(^uint(0) >> 1)
	return int(min(v, maxInt))
}
