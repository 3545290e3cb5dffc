package connectretry

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry/internal/engine"
)

// Option configures an [Interceptor]. Options are applied in order; the
// first invalid one makes [New] fail.
type Option interface{ apply(*engine.Options) }

type optionFunc func(*engine.Options)

func (f optionFunc) apply(o *engine.Options) { f(o) }

// WithMaxAttemptsCap sets the client-side cap on a policy's maxAttempts
// (A6 "Limits"): a retryPolicy or hedgingPolicy that asks for more
// attempts, the first included, is held to n. The default is 5
// ([serviceconfig.DefaultMaxAttemptsCap]). n must be >= 1; to make every
// call once, use [WithRetriesDisabled].
func WithMaxAttemptsCap(n int) Option {
	return optionFunc(func(o *engine.Options) { o.SetMaxAttemptsCap(n) })
}

// WithRetriesDisabled turns retries and hedging off entirely (A6 "Disabling
// Retries"): every call is made once, as if no policy were configured. The
// method config's timeout still applies.
func WithRetriesDisabled() Option {
	return optionFunc(func(o *engine.Options) { o.Disabled = true })
}

// WithServerName sets the server name that retry throttling is kept under.
// By default it is the host (or host:port) of the client's URL, as
// connect.Peer.Addr reports it. Every interceptor of the process with the
// same server name and throttling config shares one throttle, and so do
// grpcretry clients whose target has that name. An Interceptor keeps the
// state of the 1024 server names it used most recently; one evicted and
// used again finds the process's throttle again if another client still
// holds it, and a full one otherwise.
func WithServerName(name string) Option {
	return optionFunc(func(o *engine.Options) { o.SetServerName(name) })
}

// WithClock sets the clock that backoff, pushback and hedging delays wait
// on.
func WithClock(c rebound.Clock) Option {
	return optionFunc(func(o *engine.Options) { o.SetClock(c) })
}

// WithRandom sets the source of backoff jitter.
func WithRandom(r rebound.Random) Option {
	return optionFunc(func(o *engine.Options) { o.SetRandom(r) })
}

// WithMeterProvider records OpenTelemetry instruments with mp, once per
// call that a retry or hedging policy governs, when the call ends (for a
// stream, when it commits to an attempt): gRFC A96's
// grpc.client.call.retries, grpc.client.call.hedges and
// grpc.client.call.retry_delay, and rebound's own counters
// rebound.client.call.retries_throttled and
// rebound.client.call.retries_pushback_stopped (calls whose retries the
// throttle or server pushback stopped) and
// rebound.client.call.attempt_timeouts (attempts cut by the per-attempt
// timeout), as grpcretry does, all with the attributes grpc.method (the
// procedure), grpc.target (the server name of [WithServerName]) and
// rpc.system.name "connectrpc". connect-go makes no transparent retries.
// The meter's scope is "github.com/rebound-go/rebound/connectretry".
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(o *engine.Options) { o.SetMeterProvider(mp) })
}

// WithLogger logs each retry decision to l at debug level, one record per
// decision: a retry scheduled (with its delay and the error that caused
// it), a hedge sent, a stream committed to an attempt, and giving up
// (throttled, stopped by pushback, or why else). Nothing is logged, and
// nothing is spent on logging, while l does not log at debug level.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *engine.Options) { o.SetLogger(l) })
}

// WithTracerProvider traces every call that a retry or hedging policy
// governs with tp, as gRFC A72 does: a span "Sent.pkg.Service.Method" for
// the call, the child of the caller's span, and a child
// "Attempt.pkg.Service.Method" for each attempt, hedges included, with the
// attributes previous-rpc-attempts and transparent-retry (always false:
// connect has no transparent retries) and the OpenTelemetry RPC
// conventions' (rpc.system.name "connectrpc", rpc.method, server.address,
// rpc.response.status_code with connect's code names). An attempt's span
// ends with that attempt's result; the call's with the call's (for a
// stream, when its response is closed or fails). Events on the
// call's span tell what retrying decided: "backoff started" (with
// rebound.delay in seconds), "pushback received", "hedge sent", "hedge
// throttled" or "retry throttled", "hedge cancelled" (another attempt
// won), "committed" (rebound.why) and "retrying stopped"
// (rebound.reason).
//
// The context of each attempt carries its span, so what runs inside it
// hangs under it: the spans of the interceptors after this one (such as
// otelconnect's) and the trace context they send to the server. rebound
// sends no trace context itself. Without this option nothing is traced,
// and calls cost nothing more.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(o *engine.Options) { o.SetTracerProvider(tp) })
}

// WithPerAttemptTimeout cuts an attempt of a call under a retryPolicy that
// has not committed within d, and retries it (gRPC core's
// perAttemptRecvTimeout, which the service config can set too; with both,
// the smaller applies). d must be > 0.
//
// The timer starts when the attempt is handed to connect, after any
// backoff, and stops when the attempt commits: when a unary call returns,
// or a stream's response headers, first message or end arrive. A stream
// whose response has started is never cut, however long its first message
// takes; but connect tells of a response only when the application reads
// it, so a stream left unread for longer than d is cut, and sent again
// once the application reads. A unary attempt's deadline is the earlier of
// its start plus d and the call's deadline, and goes to the server with the
// request (Connect-Timeout-Ms or grpc-timeout), so the server drops work
// the client has given up on; a stream keeps the call's deadline on the
// wire, and its timer is the client's alone.
//
// When the timer fires, only that attempt is cancelled. The call is then
// retried even if deadline_exceeded is not in retryableStatusCodes, within
// maxAttempts, backoff, the call's deadline and the throttle, which counts
// the attempt as a failure. When no attempt follows, the call ends with
// connect.CodeDeadlineExceeded, a message naming the per-attempt timeout,
// and an error for which errors.Is(err, rebound.ErrAttemptTimeout) holds.
// gRPC core ends such a call CANCELLED; rebound does not, because a
// deadline is what passed, and callers treat the two codes differently:
// deadline_exceeded says the server was too slow, canceled that the caller
// gave up, which code commonly ignores as intended. Hedged calls are not
// timed: their hedgingDelay sends the next attempt instead.
func WithPerAttemptTimeout(d time.Duration) Option {
	return optionFunc(func(o *engine.Options) { o.SetPerAttemptTimeout(d) })
}

// WithBufferLimits sets the memory that may hold the request messages of
// streaming calls for replay (A6 "Memory Management"), as grpcretry's and
// httpretry's WithBufferLimits do: total bytes for all of the
// interceptor's calls (retry_buffer_size_in_bytes) and bytes for one call
// (per_rpc_buffer_limit_in_bytes). A stream keeps each message it sends,
// as its protobuf encoding, until it commits; the message that would pass
// either limit commits the call to the attempt in flight: it goes on, but
// is not retried or hedged. Unary calls keep nothing and count nothing:
// the transport marshals the caller's request again for each attempt. The
// defaults are [rebound.DefaultBufferTotal] (16 MiB) and
// [rebound.DefaultBufferPerCall] (1 MiB). Both must be > 0 and perCall <=
// total.
func WithBufferLimits(total, perCall int) Option {
	return optionFunc(func(o *engine.Options) { o.SetBufferLimits(total, perCall) })
}

// WithTrustedOverrides lets [Override] loosen a method's policy:
// more attempts than the service config allows, codes it does not retry, a
// longer per-attempt timeout, or a retry policy on a method that has none
// (with rebound.DefaultBackoff). Without it, an override only tightens,
// and what it asks beyond the config is held to the config and logged at
// debug level ([WithLogger]). Give it only when every caller that can set
// an override is trusted: an override taken from a request (a header
// passed on, a tenant's setting) could otherwise multiply the load on a
// struggling backend. [WithMaxAttemptsCap] and the throttle hold either way.
func WithTrustedOverrides() Option {
	return optionFunc(func(o *engine.Options) { o.TrustedOverrides = true })
}

func buildOptions(opts []Option) engine.Options {
	o := engine.NewOptions()
	for _, opt := range opts {
		if opt == nil {
			o.Fail("nil Option")
			continue
		}
		opt.apply(&o)
	}
	return o
}
