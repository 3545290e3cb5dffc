// Package engine is the retry machinery that the front doors of
// connect-go's two majors share: connectretry for connectrpc.com/connect
// (v1) and connectretry/v2 for connectrpc.com/connect/v2. It imports
// neither major, so that a program that uses one does not compile the
// other: a front door adapts its major's calls and errors to the small
// interfaces here ([Major], [Conn], [Opener]) and the engine does the rest,
// once for both:
//
//   - the state an Interceptor keeps (throttles and rate limits per server
//     name, strategies per method config, statistics, the tracer);
//   - the policy of a call (its method config, the caller's Override, the
//     method's timeout);
//   - unary calls, retried or hedged ([Interceptor.StartUnary]);
//   - streaming calls of every shape, retried with their request messages
//     replayed from a bounded buffer ([Interceptor.OpenStream]);
//   - what a failed attempt means (status code, pushback, RetryInfo, the
//     classifier), and the error of a call that gave up.
package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/adaptive"
	"github.com/rebound-go/rebound/internal/bounded"
	"github.com/rebound-go/rebound/internal/observe"
	"github.com/rebound-go/rebound/internal/ratelimit"
	"github.com/rebound-go/rebound/internal/replay"
	"github.com/rebound-go/rebound/serviceconfig"
)

// Major is what the engine needs to know of a connect major: how its
// errors carry a status, and how to make one. connect's codes are gRPC's,
// so a code is a [serviceconfig.Code]. A Major is stateless and safe for
// concurrent use.
type Major interface {
	// Code returns the status code of err, a failed attempt's or call's
	// error: the code of the connect error it wraps, Canceled or
	// DeadlineExceeded for a bare context error, Unknown otherwise.
	Code(err error) serviceconfig.Code
	// RetryDelay returns the retry_delay of the first google.rpc.RetryInfo
	// in the details of the connect error err wraps, and whether it has a
	// valid one (see a6.RetryDelay).
	RetryDelay(err error) (time.Duration, bool)
	// Error returns a connect error of the major with code, whose cause
	// is err: an error rebound makes itself (a local refusal, a timeout).
	Error(code serviceconfig.Code, err error) error
	// GaveUp returns the error of a call that a policy governed and that
	// failed, from the engine's verdict: re.Err is the last attempt's
	// error, or the context's when no attempt returned one.
	GaveUp(re *rebound.Error) error
}

// Interceptor is the state of one front door's Interceptor: the service
// config, the options, and what it keeps per server name. The zero value,
// with a Major set, has no service config and makes every call once. It is
// safe for concurrent use.
type Interceptor struct {
	cfg    *serviceconfig.Config
	opts   Options
	major  Major
	scope  string            // the instrumentation scope, the front door's import path
	rec    *observe.Recorder // nil in the zero value
	tracer *observe.Tracer   // nil without WithTracerProvider

	// buffers is the memory that the calls' replay buffers hold, against
	// Options.Buffers.
	buffers replay.Pool

	last    atomic.Pointer[Target]        // the target of the latest call
	targets *bounded.Map[string, *Target] // by server name; nil in the zero value
}

// Target is the retry state of one server name.
type Target struct {
	name     string
	throttle *rebound.Throttle // nil without retryThrottling
	err      error             // why the throttle could not be made
	gate     *adaptive.Gate    // the adaptive throttle; nil without WithAdaptiveThrottle
	limit    *ratelimit.Gate   // the adaptive rate limit; nil without WithAdaptiveRateLimit
	policies sync.Map          // *serviceconfig.MethodConfig -> *policyEntry
}

// Name returns the server name.
func (t *Target) Name() string { return t.name }

// policyEntry is the strategy of one method config for one server name:
// retry or hedge is set, or err.
type policyEntry struct {
	retry *rebound.Retrier
	hedge *rebound.Hedger
	err   error
}

// New returns the engine of an Interceptor of cfg with o, whose errors are
// major's and whose metrics and spans have the instrumentation scope scope.
// A nil cfg configures no policy. o.Err, when set, is returned.
func New(cfg *serviceconfig.Config, o Options, major Major, scope string) (*Interceptor, error) {
	if o.Err != nil {
		return nil, o.Err
	}
	if cfg == nil {
		// A trusted override may still give a call a policy.
		cfg = &serviceconfig.Config{}
	}
	rec, err := observe.New(o.MeterProvider, o.Logger, scope, observe.Connect)
	if err != nil {
		return nil, fmt.Errorf("connectretry: WithMeterProvider: %w", err)
	}
	return &Interceptor{
		cfg: cfg, opts: o, major: major, scope: scope, rec: rec,
		buffers: replay.Pool{Limits: o.Buffers},
		tracer:  observe.NewTracer(o.TracerProvider, scope, observe.SystemConnect),
		targets: bounded.New[string, *Target](bounded.DefaultMax),
	}, nil
}

// Zero returns the engine of a front door's zero Interceptor, which has no
// service config and makes every call once.
func Zero(major Major) *Interceptor {
	o := NewOptions()
	return &Interceptor{opts: o, major: major, buffers: replay.Pool{Limits: o.Buffers}}
}

// Stats returns a snapshot of the retry statistics of the calls that a
// policy governed, by procedure.
func (i *Interceptor) Stats() rebound.Stats { return i.rec.Stats() }

// Target returns the retry state of a server name, made on first use. addr
// is the peer's address, used unless WithServerName set a name. The state
// of at most bounded.DefaultMax names is kept; see package bounded.
func (i *Interceptor) Target(addr string) *Target {
	name := i.opts.ServerName
	if name == "" {
		name = addr
	}
	if t := i.last.Load(); t != nil && t.name == name {
		return t
	}
	if i.targets == nil {
		// The zero Interceptor keeps nothing: it has no throttles, gates
		// or policies to keep.
		return &Target{name: name}
	}
	t, _ := i.targets.Get(name, func() (*Target, error) {
		t := &Target{name: name}
		t.throttle, t.err = a6.Throttle(name, i.cfg.RetryThrottling)
		t.gate, t.limit = i.opts.Gates(name, i.clock())
		return t, nil
	})
	i.last.Store(t)
	return t
}

// Targets returns how many server names i keeps state for.
func (i *Interceptor) Targets() int {
	if i.targets == nil {
		return 0
	}
	return i.targets.Len()
}

// Throttle returns the A6 throttle of t; nil without retryThrottling.
func (t *Target) Throttle() *rebound.Throttle { return t.throttle }

// policy returns the strategy for mc on t, made on first use.
func (i *Interceptor) policy(t *Target, mc *serviceconfig.MethodConfig) *policyEntry {
	if v, ok := t.policies.Load(mc); ok {
		return v.(*policyEntry)
	}
	v, _ := t.policies.LoadOrStore(mc, i.newPolicy(t, mc))
	return v.(*policyEntry)
}

// newPolicy makes the strategy for mc on t, for policy to keep, or for one
// call whose Override changed its method config.
func (i *Interceptor) newPolicy(t *Target, mc *serviceconfig.MethodConfig) *policyEntry {
	e := &policyEntry{err: t.err}
	if e.err == nil {
		e.retry, e.hedge, e.err = a6.Strategies(mc, t.throttle, i.opts.Settings())
	}
	return e
}

// policyFor returns the strategy of a call's policy on t.
func (i *Interceptor) policyFor(t *Target, cp Policy) *policyEntry {
	if cp.fresh {
		return i.newPolicy(t, cp.mc)
	}
	return i.policy(t, cp.mc)
}

// clock returns the clock that retry delays run on, for measuring them.
func (i *Interceptor) clock() rebound.Clock {
	if i.opts.Clock != nil {
		return i.opts.Clock
	}
	return rebound.RealClock()
}

// countsUnpoliced reports whether calls that no policy governs count
// against a throttle.
func (i *Interceptor) countsUnpoliced() bool {
	return i.cfg != nil && i.cfg.RetryThrottling != nil && !i.opts.Disabled
}

// CountUnpoliced counts a call to t that no policy governed, which ended
// with err (nil for success) and whose answer carried the pushback header
// values pushback, against t's throttle (see a6.CountUnpoliced).
func (i *Interceptor) CountUnpoliced(t *Target, err error, pushback []string) {
	if i.countsUnpoliced() {
		a6.CountUnpoliced(t.throttle, err == nil, pushback)
	}
}

// policyError is the error of a call whose strategy could not be made
// (possible only with a service config built by hand).
func (i *Interceptor) policyError(procedure string, err error) error {
	return i.major.Error(serviceconfig.Internal, fmt.Errorf("connectretry: %s: %w", procedure, err))
}

// withTimeout applies mc's timeout to a call when it is shorter than ctx's
// deadline. The cancel func is nil when ctx is returned unchanged.
func withTimeout(ctx context.Context, mc *serviceconfig.MethodConfig) (context.Context, context.CancelFunc) {
	if mc == nil || mc.Timeout <= 0 {
		return ctx, nil
	}
	// Context deadlines run on real time, whatever the retry clock.
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= mc.Timeout {
		return ctx, nil
	}
	return context.WithTimeout(ctx, mc.Timeout)
}

// end records a call that a policy governed. tr is nil when no attempt
// failed, and attempts then says how many ran; err is the retry loop's.
func (i *Interceptor) end(ctx context.Context, tr *observe.Tracker, attempts int, method, target string, hedged bool, err error) {
	var reason error
	if err != nil {
		// Only here: looking for the reason costs an allocation.
		reason = observe.Reason(err)
	}
	c := observe.Call{Method: method, Target: target, Attempts: attempts, Hedged: hedged, Reason: reason}
	if tr != nil {
		c = tr.Call(method, target, hedged, reason)
	}
	i.rec.End(ctx, &c)
}
