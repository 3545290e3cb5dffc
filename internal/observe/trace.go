package observe

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/rebound-go/rebound"
)

// Span and event names, and the attributes of ours, of the traces of
// calls. The call and attempt spans follow gRFC A72 for gRPC and Connect
// ("Sent.pkg.Service.Method", "Attempt.pkg.Service.Method", with
// previous-rpc-attempts and transparent-retry), and the OpenTelemetry RPC
// and HTTP semantic conventions for their other attributes. The events
// say what retrying decided, on the call span.
const (
	// EventBackoff: a retry will follow after rebound.delay seconds;
	// rebound.attempt is the attempt that failed.
	EventBackoff = "backoff started"
	// EventPushback: the server's pushback on rebound.attempt asked for
	// rebound.pushback seconds before the next attempt, or
	// (rebound.pushback_stop) for none.
	EventPushback = "pushback received"
	// EventHedge: hedged attempt rebound.attempt is being sent.
	EventHedge = "hedge sent"
	// EventHedgeThrottled: the throttle refused hedge rebound.attempt.
	EventHedgeThrottled = "hedge throttled"
	// EventRetryThrottled: the throttle refused the retry that would
	// have been attempt rebound.attempt.
	EventRetryThrottled = "retry throttled"
	// EventHedgeCancelled: hedged attempt rebound.attempt was cancelled,
	// or its result dropped, because the call ended with another.
	EventHedgeCancelled = "hedge cancelled"
	// EventCommitted: the call was committed to rebound.attempt (A6: no
	// further attempt), for the reason rebound.why.
	EventCommitted = "committed"
	// EventStopped: retrying stopped after rebound.attempts attempts,
	// for the reason rebound.reason.
	EventStopped = "retrying stopped"
	// EventTransparentRetry, on an attempt span: the transport retried
	// the attempt on its own (gRPC only).
	EventTransparentRetry = "transparent retry"

	// The attributes of the events, and rebound.attempts on a call span:
	// attempt numbers count from 1, durations are in seconds.
	AttemptKey      = attribute.Key("rebound.attempt")
	AttemptsKey     = attribute.Key("rebound.attempts")
	DelayKey        = attribute.Key("rebound.delay")
	PushbackKey     = attribute.Key("rebound.pushback")
	PushbackStopKey = attribute.Key("rebound.pushback_stop")
	WhyKey          = attribute.Key("rebound.why")
	ReasonKey       = attribute.Key("rebound.reason")

	// A72's attributes of an attempt span.
	PreviousAttemptsKey = attribute.Key("previous-rpc-attempts")
	TransparentRetryKey = attribute.Key("transparent-retry")
)

// System names what a Tracer traces: the RPC system, or HTTP.
type System int

const (
	SystemGRPC    System = iota // rpc.system.name grpc
	SystemConnect               // rpc.system.name connectrpc
	SystemHTTP                  // the HTTP conventions
)

// Tracer starts the spans of calls. A nil *Tracer starts none and costs
// nothing. It is safe for concurrent use.
type Tracer struct {
	t      trace.Tracer
	system System
}

// NewTracer returns the Tracer of tp, or nil when tp is nil. scope names
// the tracer.
func NewTracer(tp trace.TracerProvider, scope string, system System) *Tracer {
	if tp == nil {
		return nil
	}
	return &Tracer{t: tp.Tracer(scope), system: system}
}

// CallSpan is the span of one call, the parent of its attempts' spans. A
// nil *CallSpan records nothing. Its methods may be called from the
// goroutines of hedged attempts at once.
type CallSpan struct {
	ctx       context.Context // the caller's: it ends only with the call
	tracer    trace.Tracer
	span      trace.Span
	attempt   string               // the attempt spans' name
	attrs     []attribute.KeyValue // shared by the call and its attempts
	system    System
	throttled atomic.Bool  // a hedge throttled event was added
	attempts  atomic.Int32 // attempt spans started
	ended     atomic.Bool
	committed atomic.Bool // a committed event was added
}

// StartRPC starts the span of a gRPC or Connect call of method
// ("/pkg.Service/Method") to server (host or host:port), as a child of
// ctx's span, and returns ctx with it. A nil t returns ctx and nil.
func (t *Tracer) StartRPC(ctx context.Context, method, server string) (context.Context, *CallSpan) {
	if t == nil {
		return ctx, nil
	}
	m := strings.TrimPrefix(method, "/")
	dotted := strings.ReplaceAll(m, "/", ".")
	sys := semconv.RPCSystemNameGRPC
	if t.system == SystemConnect {
		sys = semconv.RPCSystemNameConnectrpc
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, sys, semconv.RPCMethod(m))
	attrs = appendServer(attrs, server)
	return t.start(ctx, "Sent."+dotted, "Attempt."+dotted, attrs)
}

// StartHTTP starts the span of an HTTP request, as a child of ctx's span,
// and returns ctx with it. The span is named by the method, as the HTTP
// semantic conventions name a client span; its attempts are
// "Attempt.METHOD". A nil t returns ctx and nil.
func (t *Tracer) StartHTTP(ctx context.Context, method string, u *url.URL) (context.Context, *CallSpan) {
	if t == nil {
		return ctx, nil
	}
	if method == "" {
		method = "GET"
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, semconv.HTTPRequestMethodKey.String(method))
	attrs = appendServer(attrs, u.Host)
	attrs = append(attrs, semconv.URLFull(u.Redacted()))
	return t.start(ctx, method, "Attempt."+method, attrs)
}

func (t *Tracer) start(ctx context.Context, name, attempt string, attrs []attribute.KeyValue) (context.Context, *CallSpan) {
	parent := ctx
	ctx, span := t.t.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx, &CallSpan{ctx: parent, tracer: t.t, span: span, attempt: attempt, attrs: attrs, system: t.system}
}

// appendServer appends server.address and server.port of hostport.
func appendServer(attrs []attribute.KeyValue, hostport string) []attribute.KeyValue {
	if hostport == "" {
		return attrs
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return append(attrs, semconv.ServerAddress(hostport))
	}
	attrs = append(attrs, semconv.ServerAddress(host))
	if p, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, semconv.ServerPort(p))
	}
	return attrs
}

// Outcome is how a call or an attempt ended, in its protocol's terms.
type Outcome struct {
	// Err is the error, nil for success.
	Err error
	// Code is rpc.response.status_code for RPCs (gRPC's "OK",
	// "UNAVAILABLE"; connect's "unavailable"), empty for HTTP, for a
	// connect success, or when unknown.
	Code string
	// HTTPStatus is http.response.status_code, 0 when none was received.
	HTTPStatus int
	// Failed says the span's status is Error: an RPC that did not end OK,
	// an HTTP request without a response or with a 4xx or 5xx status (the
	// HTTP conventions' rule for client spans).
	Failed bool
}

// end sets o on span and ends it.
func end(span trace.Span, o Outcome, extra ...attribute.KeyValue) {
	if o.Code != "" {
		span.SetAttributes(semconv.RPCResponseStatusCode(o.Code))
	}
	if o.HTTPStatus > 0 {
		span.SetAttributes(semconv.HTTPResponseStatusCode(o.HTTPStatus))
	}
	if len(extra) > 0 {
		span.SetAttributes(extra...)
	}
	if o.Failed {
		switch {
		case o.Code != "" && o.Code != "OK":
			span.SetAttributes(semconv.ErrorTypeKey.String(o.Code))
		case o.HTTPStatus >= 400:
			span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(o.HTTPStatus)))
		default:
			span.SetAttributes(semconv.ErrorTypeKey.String("_OTHER"))
		}
		msg := ""
		if o.Err != nil {
			msg = o.Err.Error()
		}
		span.SetStatus(codes.Error, msg)
	}
	span.End()
}

// End ends the call's span with o and the number of attempts made
// (rebound.attempts). Only the first End counts.
func (c *CallSpan) End(o Outcome) {
	if c == nil || c.ended.Swap(true) {
		return
	}
	end(c.span, o, AttemptsKey.Int(int(c.attempts.Load())))
}

// Lost reports whether a hedged attempt whose context is actx lost: its
// context has ended while the call goes on, so the call ended with another
// attempt. A nil c reports false.
func (c *CallSpan) Lost(actx context.Context) bool {
	return c != nil && actx.Err() != nil && c.ctx.Err() == nil
}

// event adds an event to the call's span.
func (c *CallSpan) event(name string, attrs ...attribute.KeyValue) {
	c.span.AddEvent(name, trace.WithAttributes(attrs...))
}

// Retry: attempt failed, and the next follows after delay.
func (c *CallSpan) Retry(attempt int, delay time.Duration) {
	if c == nil {
		return
	}
	c.event(EventBackoff, AttemptKey.Int(attempt), DelayKey.Float64(delay.Seconds()))
}

// Hedge: hedged attempt number attempt is being sent.
func (c *CallSpan) Hedge(attempt int) {
	if c == nil {
		return
	}
	c.event(EventHedge, AttemptKey.Int(attempt))
}

// Throttled: the throttle refused hedge number attempt.
func (c *CallSpan) Throttled(attempt int) {
	if c == nil {
		return
	}
	c.throttled.Store(true)
	c.event(EventHedgeThrottled, AttemptKey.Int(attempt))
}

// Committed: the call was committed to attempt, for the reason why. Only
// the first commit of a call is recorded.
func (c *CallSpan) Committed(attempt int, why string) {
	if c == nil || c.committed.Swap(true) {
		return
	}
	c.event(EventCommitted, AttemptKey.Int(attempt), WhyKey.String(why))
}

// GaveUp: no further attempt follows attempts attempts, for reason. A
// retry the throttle refused is told here, as the core tells it.
func (c *CallSpan) GaveUp(attempts int, reason error) {
	if c == nil {
		return
	}
	if errors.Is(reason, rebound.ErrThrottled) && !c.throttled.Load() {
		c.event(EventRetryThrottled, AttemptKey.Int(attempts+1))
	}
	c.event(EventStopped, AttemptsKey.Int(attempts), ReasonKey.String(reasonText(reason)))
}

// AttemptSpan is the span of one attempt. A nil *AttemptSpan records
// nothing. It ends once: later calls of End do nothing.
type AttemptSpan struct {
	call  *CallSpan
	span  trace.Span
	n     int
	ended atomic.Bool
}

// StartAttempt starts the span of attempt n (1-based) as a child of ctx's
// span, which is the call's, and returns ctx with it: whatever runs in the
// attempt (the transport's own spans, the trace context sent to the
// server) hangs under it. A nil c returns ctx and nil.
func (c *CallSpan) StartAttempt(ctx context.Context, n int) (context.Context, *AttemptSpan) {
	if c == nil {
		return ctx, nil
	}
	attrs := make([]attribute.KeyValue, len(c.attrs), len(c.attrs)+2)
	copy(attrs, c.attrs)
	if c.system == SystemHTTP {
		if n > 1 {
			attrs = append(attrs, semconv.HTTPRequestResendCount(n-1))
		}
	} else {
		attrs = append(attrs, PreviousAttemptsKey.Int(n-1), TransparentRetryKey.Bool(false))
	}
	ctx, span := c.tracer.Start(ctx, c.attempt, trace.WithAttributes(attrs...))
	c.attempts.Add(1)
	return ctx, &AttemptSpan{call: c, span: span, n: n}
}

// Into returns ctx carrying the attempt's span, for an attempt that runs
// under a context other than the one StartAttempt returned.
func (a *AttemptSpan) Into(ctx context.Context) context.Context {
	if a == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, a.span)
}

// Transparent notes on the attempt's span that the transport retried it
// on its own.
func (a *AttemptSpan) Transparent() {
	if a == nil {
		return
	}
	a.span.AddEvent(EventTransparentRetry)
}

// End ends the attempt's span with o. info is how retrying judged a
// failure: a pushback it carries is added to the call's span. lost says
// the attempt was cancelled, or its result dropped, because the call ended
// with another attempt's result.
func (a *AttemptSpan) End(o Outcome, info rebound.RetryInfo, lost bool) {
	if a == nil || a.ended.Swap(true) {
		return
	}
	switch {
	case lost:
		a.call.event(EventHedgeCancelled, AttemptKey.Int(a.n))
	case info.ServerStop:
		a.call.event(EventPushback, AttemptKey.Int(a.n), PushbackStopKey.Bool(true))
	case info.HasRetryAfter:
		a.call.event(EventPushback, AttemptKey.Int(a.n), PushbackKey.Float64(info.RetryAfter.Seconds()))
	}
	end(a.span, o)
}

// Traced returns the hooks of d (see [Hooks]) for a traced call: they also
// add the call's events to s. It copies d, so that a call that is not
// traced keeps its decisions off the heap; a front door calls it only with
// a span:
//
//	call := observe.Hooks[T](&d)
//	if span != nil {
//		call = observe.Traced[T](&d, span)
//	}
func Traced[T any](d *Decisions, s *CallSpan) rebound.Call[T] {
	dc := *d
	return rebound.Call[T]{
		OnRetry: func(attempt int, err error, delay time.Duration) {
			dc.Retry(attempt, err, delay)
			s.Retry(attempt, delay)
		},
		OnHedge: func(attempt int) {
			dc.Hedge(attempt)
			s.Hedge(attempt)
		},
		OnThrottled: func(attempt int) {
			dc.Throttled(attempt)
			s.Throttled(attempt)
		},
		OnGiveUp: func(attempts int, err, reason error) {
			dc.GaveUp(attempts, err, reason)
			s.GaveUp(attempts, reason)
		},
	}
}

// Committed: the call was committed to this attempt, for the reason why.
func (a *AttemptSpan) Committed(why string) {
	if a == nil {
		return
	}
	a.call.Committed(a.n, why)
}
