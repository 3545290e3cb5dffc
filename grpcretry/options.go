package grpcretry

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/resolver"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/replay"
)

// Option configures a [Client]. Options are applied in order; the first
// invalid one makes [New] fail.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// options are the settings grpcretry shares with connectretry, and its own.
type options struct {
	a6.Options
	buffers  replay.Limits
	adaptive *AdaptiveHedgingConfig
	// classify is WithClassifier's; nil for none.
	classify func(Failure, rebound.RetryInfo) rebound.RetryInfo
	// resolvers are WithResolver's builders, by scheme.
	resolvers map[string]resolver.Builder
}

// WithMaxAttemptsCap sets the client-side cap on a policy's maxAttempts
// (A6 "Limits"): a retryPolicy or hedgingPolicy that asks for more
// attempts, the first included, is held to n. The default is 5
// ([serviceconfig.DefaultMaxAttemptsCap]). n must be >= 1; to make every
// call once, use [WithRetriesDisabled].
func WithMaxAttemptsCap(n int) Option {
	return optionFunc(func(o *options) { o.SetMaxAttemptsCap(n) })
}

// WithBufferLimits sets the memory that may hold requests for replay (A6
// "Memory Management"), as httpretry's WithBufferLimits does: total bytes
// for the whole Client (retry_buffer_size_in_bytes) and bytes for one call
// (per_rpc_buffer_limit_in_bytes). A call whose request does not fit is
// committed: it goes on, but is not retried or hedged. A unary or
// server-streaming call counts its request's encoded size (proto.Size, or
// the call's codec for other messages) against both limits until it ends:
// a hedged call and a server stream from the start, a retried unary call
// from its first failed attempt, as until then no retry holds on to the
// request (and a call that succeeds at once need not measure it); a
// client or bidirectional stream counts each message it keeps until it
// commits. The defaults are [rebound.DefaultBufferTotal] (16 MiB) and
// [rebound.DefaultBufferPerCall] (1 MiB). Both must be > 0 and perCall <=
// total.
func WithBufferLimits(total, perCall int) Option {
	return optionFunc(func(o *options) {
		if err := replay.Check(total, perCall); err != nil {
			o.Fail("WithBufferLimits: %v", err)
			return
		}
		o.buffers = replay.Limits{Total: total, PerCall: perCall}
	})
}

// WithRetriesDisabled turns retries and hedging off entirely (A6 "Disabling
// Retries"): every call is made once, as if no policy were configured.
// grpc-go's transparent retries still happen below.
func WithRetriesDisabled() Option {
	return optionFunc(func(o *options) { o.Disabled = true })
}

// WithServerName sets the server name that retry throttling is kept under.
// By default it is the endpoint of the ClientConn's canonical target (for
// "dns:///api.example.com:443", "api.example.com:443"). Every client of the
// process with the same server name and throttling config shares one
// throttle.
func WithServerName(name string) Option {
	return optionFunc(func(o *options) { o.SetServerName(name) })
}

// WithClock sets the clock that backoff and pushback delays wait on.
func WithClock(c rebound.Clock) Option {
	return optionFunc(func(o *options) { o.SetClock(c) })
}

// WithRandom sets the source of backoff jitter.
func WithRandom(r rebound.Random) Option {
	return optionFunc(func(o *options) { o.SetRandom(r) })
}

// WithPerAttemptTimeout cuts an attempt of a call under a retryPolicy that
// has not committed within d, and retries it (gRPC core's
// perAttemptRecvTimeout, which the service config can set too; with both,
// the smaller applies). d must be > 0.
//
// The timer starts when the attempt is handed to grpc-go, after any
// backoff, and stops when the attempt commits: on response headers, a
// message, or a Trailers-Only status. A committed stream, however long, is
// never cut. A unary attempt's deadline is the earlier of its start plus d
// and the call's deadline, and goes to the server as grpc-timeout, so the
// server drops work the client has given up on. It bounds the attempt as a
// whole: one whose headers came but whose answer did not complete in time
// is cut too, and, nothing of it having reached the application, retried
// like any cut attempt. A streaming attempt keeps
// the call's deadline on the wire (a server would otherwise cut it at d
// after it committed), and its timer is the client's alone, as in gRPC
// core.
//
// When the timer fires, only that attempt is cancelled. The call is then
// retried even if DEADLINE_EXCEEDED is not in retryableStatusCodes, within
// maxAttempts, backoff, the call's deadline and the throttle, which counts
// the attempt as a failure. When no attempt follows, the call ends with
// DEADLINE_EXCEEDED, a message naming the per-attempt timeout, and an error
// for which errors.Is(err, rebound.ErrAttemptTimeout) holds. gRPC core ends
// such a call CANCELLED ("retry perAttemptRecvTimeout exceeded"); rebound
// does not, because a deadline is what passed, and callers treat the two
// codes differently: DEADLINE_EXCEEDED says the server was too slow, and
// is what retry policies, dashboards and alerts expect of a slow backend,
// while CANCELLED says the caller gave up, which code commonly ignores as
// intended. Hedged calls are not timed: their hedgingDelay sends the next
// attempt without cutting the first.
func WithPerAttemptTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) { o.SetPerAttemptTimeout(d) })
}

// WithTrustedOverrides lets the [Override] call option loosen a method's
// policy: more attempts than the service config allows, codes it does not
// retry, a longer per-attempt timeout, or a retry policy on a method that
// has none (with rebound.DefaultBackoff). Without it, an override only
// tightens, and what it asks beyond the config is held to the config and
// logged at debug level ([WithLogger]). Give it only when every caller
// that can set an override is trusted: an override that comes from a
// request (a header passed on, a tenant's setting) could otherwise
// multiply the load on a struggling backend. [WithMaxAttemptsCap], the
// throttle and the buffer limits hold either way.
func WithTrustedOverrides() Option {
	return optionFunc(func(o *options) { o.TrustedOverrides = true })
}

func buildOptions(opts []Option) options {
	o := options{
		Options:   a6.NewOptions("grpcretry"),
		buffers:   replay.Limits{Total: rebound.DefaultBufferTotal, PerCall: rebound.DefaultBufferPerCall},
		resolvers: map[string]resolver.Builder{},
	}
	for _, opt := range opts {
		if opt == nil {
			o.Fail("nil Option")
			continue
		}
		opt.apply(&o)
	}
	o.RateLimitOn()
	return o
}

// WithAdaptiveHedging makes the hedging delay of every method under a
// hedgingPolicy follow the method's recent latency, and caps the method's
// hedges at a fraction of its calls; see [AdaptiveHedgingConfig]. c's
// fields must be valid.
func WithAdaptiveHedging(c AdaptiveHedgingConfig) Option {
	return optionFunc(func(o *options) {
		if err := c.validate(); err != nil {
			o.Fail("WithAdaptiveHedging: %v", err)
			return
		}
		o.adaptive = &c
	})
}

// WithMeterProvider records OpenTelemetry instruments with mp once per
// call that a policy governs: gRFC A96's grpc.client.call.retries,
// grpc.client.call.transparent_retries, grpc.client.call.hedges and
// grpc.client.call.retry_delay, and rebound's own counters
// rebound.client.call.retries_throttled and
// rebound.client.call.retries_pushback_stopped (calls whose retries the
// throttle or server pushback stopped) and
// rebound.client.call.attempt_timeouts (attempts cut by the per-attempt
// timeout), all with A66's attributes grpc.method and grpc.target and
// rpc.system.name "grpc". Transparent retries are counted by a stats
// handler that [Client.DialOptions] then installs. The meter's scope is
// "github.com/rebound-go/rebound/grpcretry".
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(o *options) { o.SetMeterProvider(mp) })
}

// WithTracerProvider traces every call that a policy governs with tp, as
// gRFC A72 does: a span "Sent.pkg.Service.Method" for the call, the child
// of the caller's span, and a child "Attempt.pkg.Service.Method" for each
// attempt, hedges included, with the attributes previous-rpc-attempts and
// transparent-retry and the OpenTelemetry RPC conventions' (rpc.method,
// server.address, rpc.response.status_code). An attempt's span ends with
// that attempt's status; the call's span ends with the call's. Events on
// the call's span tell what retrying decided: "backoff started" (with
// rebound.delay in seconds), "pushback received", "hedge sent", "hedge
// throttled" or "retry throttled", "hedge cancelled" (another attempt
// won), "committed" (rebound.why: response headers, a response message, a
// buffer overflow) and "retrying stopped" (rebound.reason).
//
// The context of each attempt carries its span, so what runs inside the
// attempt hangs under it: the spans of an otelgrpc stats handler, or of
// grpc-go's own OpenTelemetry tracing (stats/opentelemetry, whose call span
// then sits in each attempt), and the trace context their propagator sends
// to the server. rebound sends no trace context itself: install
// otelgrpc.NewClientHandler, grpc-go's opentelemetry.DialOption or an
// interceptor of your own after rebound's for that. Without this option
// nothing is traced, and calls cost nothing more.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(o *options) { o.SetTracerProvider(tp) })
}

// WithLogger writes one debug record per decision to l: a retry scheduled
// (with its delay and the error that caused it), a hedge sent, obeying
// server pushback, and giving up and why (attempts exhausted, throttled,
// pushback, committed, deadline). Nothing is logged unless l is enabled at
// slog.LevelDebug, but for a service config from a name resolver that
// rebound rejects: that is a warning (to slog.Default() without
// WithLogger).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) { o.SetLogger(l) })
}
