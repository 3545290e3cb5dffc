package connectretry

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/adaptive"
	"github.com/rebound-go/rebound/internal/bounded"
	"github.com/rebound-go/rebound/internal/observe"
	"github.com/rebound-go/rebound/internal/ratelimit"
	"github.com/rebound-go/rebound/serviceconfig"
)

// Interceptor is a [connect.Interceptor] that retries and hedges client calls
// as a service config says (gRFC A6). Install it on a client with
// connect.WithInterceptors; put it last among the client's interceptors so
// that the others run once per call rather than once per attempt. On a
// handler it does nothing.
//
// An Interceptor keeps the throttle of each server name, a strategy per
// method config and the statistics of its calls ([Interceptor.Stats]); it is
// safe for concurrent use and may be shared by many clients. The zero value
// has no service config: it makes every call once.
type Interceptor struct {
	cfg  *serviceconfig.Config
	opts options
	err  error             // an invalid option, reported by every call
	rec  *observe.Recorder // nil in the zero value and after an invalid option
	// tracer is nil without WithTracerProvider.
	tracer *observe.Tracer

	last    atomic.Pointer[target]        // the target of the latest call
	targets *bounded.Map[string, *target] // by server name; nil in the zero value
}

var _ connect.Interceptor = (*Interceptor)(nil)

// target is the retry state of one server name.
type target struct {
	name     string
	throttle *rebound.Throttle // nil without retryThrottling
	err      error             // why the throttle could not be made
	gate     *adaptive.Gate    // the adaptive throttle; nil without WithAdaptiveThrottle
	limit    *ratelimit.Gate   // the adaptive rate limit; nil without WithAdaptiveRateLimit
	policies sync.Map          // *serviceconfig.MethodConfig -> *policyEntry
}

// policyEntry is the strategy of one method config for one server name:
// retry or hedge is set, or err.
type policyEntry struct {
	retry *rebound.Retrier
	hedge *rebound.Hedger
	err   error
}

// New returns an Interceptor for cfg, or an error naming the first invalid
// option. A nil cfg configures no policy: calls are made once.
func New(cfg *serviceconfig.Config, opts ...Option) (*Interceptor, error) {
	o := buildOptions(opts)
	if o.Err != nil {
		return nil, o.Err
	}
	if cfg == nil {
		// A trusted override may still give a call a policy.
		cfg = &serviceconfig.Config{}
	}
	rec, err := observe.New(o.MeterProvider, o.Logger, "github.com/rebound-go/rebound/connectretry", observe.Connect)
	if err != nil {
		return nil, fmt.Errorf("connectretry: WithMeterProvider: %w", err)
	}
	tracer := observe.NewTracer(o.TracerProvider, "github.com/rebound-go/rebound/connectretry", observe.SystemConnect)
	return &Interceptor{cfg: cfg, opts: o, rec: rec, tracer: tracer, targets: bounded.New[string, *target](bounded.DefaultMax)}, nil
}

// Stats returns a snapshot of the retry statistics (gRFC A6) of the calls
// that a retry or hedging policy governed, by procedure
// ("/pkg.Service/Method"): a unary call is counted when it returns, a
// server stream when it commits to an attempt or fails before one. Calls
// made once because no policy applies are not counted. Stats is safe to
// call at any time, also while calls run; the result is the caller's. It
// is empty for the zero Interceptor and for one with an invalid option.
func (i *Interceptor) Stats() rebound.Stats { return i.rec.Stats() }

// NewInterceptor returns the [Interceptor] for cfg, to install in one line:
//
//	client := pingv1connect.NewPingServiceClient(httpClient, url,
//		connect.WithInterceptors(connectretry.NewInterceptor(cfg)))
//
// An invalid option does not panic: [Interceptor.Err] reports it, and every
// client call through the interceptor fails with connect.CodeInternal and
// the error, which names the option, without reaching the server. [New]
// returns the error instead.
func NewInterceptor(cfg *serviceconfig.Config, opts ...Option) *Interceptor {
	i, err := New(cfg, opts...)
	if err != nil {
		return &Interceptor{err: err}
	}
	return i
}

// Err returns the error of the first invalid option given to
// [NewInterceptor], or nil.
func (i *Interceptor) Err() error { return i.err }

// WrapStreamingHandler returns next: retries are a client matter.
func (i *Interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// target returns the retry state of a server name, made on first use. addr
// is the peer's address, used unless WithServerName set a name. The state
// of at most bounded.DefaultMax names is kept; see package bounded.
func (i *Interceptor) target(addr string) *target {
	name := i.opts.ServerName
	if name == "" {
		name = addr
	}
	if t := i.last.Load(); t != nil && t.name == name {
		return t
	}
	t, _ := i.targets.Get(name, func() (*target, error) {
		t := &target{name: name}
		t.throttle, t.err = a6.Throttle(name, i.cfg.RetryThrottling)
		t.gate, t.limit = i.opts.Gates(name, i.clock())
		return t, nil
	})
	i.last.Store(t)
	return t
}

// policy returns the strategy for mc on t, made on first use.
func (i *Interceptor) policy(t *target, mc *serviceconfig.MethodConfig) *policyEntry {
	if v, ok := t.policies.Load(mc); ok {
		return v.(*policyEntry)
	}
	v, _ := t.policies.LoadOrStore(mc, i.newPolicy(t, mc))
	return v.(*policyEntry)
}

// newPolicy makes the strategy for mc on t, for [Interceptor.policy] to
// keep, or for one call whose Override changed its method config.
func (i *Interceptor) newPolicy(t *target, mc *serviceconfig.MethodConfig) *policyEntry {
	e := &policyEntry{err: t.err}
	if e.err == nil {
		e.retry, e.hedge, e.err = a6.Strategies(mc, t.throttle, i.opts.Settings())
	}
	return e
}

// clock returns the clock that retry delays run on, for measuring them.
func (i *Interceptor) clock() rebound.Clock {
	if i.opts.Clock != nil {
		return i.opts.Clock
	}
	return rebound.RealClock()
}

// policyError is the error of a call whose strategy could not be made
// (possible only with a service config built by hand).
func policyError(procedure string, err error) *connect.Error {
	return connect.NewError(connect.CodeInternal, fmt.Errorf("connectretry: %s: %w", procedure, err))
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
