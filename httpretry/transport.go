package httpretry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/bounded"
	"github.com/rebound-go/rebound/internal/observe"
	"github.com/rebound-go/rebound/internal/replay"
)

// errBodyNotReplayable is the reason a request whose body cannot be sent
// again (no GetBody, and too large for [WithBufferLimits]) was not
// retried: it is committed to its one attempt, as a gRPC call whose
// request outgrew the replay buffer is, and unwraps to
// rebound.ErrCommitted.
var errBodyNotReplayable = fmt.Errorf("%w: %s", rebound.ErrCommitted, whyNotReplayable)

var errZeroTransport = errors.New("httpretry: Transport not made by NewTransport")

// maxNames bounds the method and host pairs that get their own name in
// Stats and metrics; further requests are counted under otherName.
const maxNames = 1024

// otherName is the method and the target of requests beyond maxNames.
const otherName = "(other)"

// Transport is an [http.RoundTripper] that retries requests on a base
// RoundTripper (see [NewTransport]). It is safe for concurrent use; share
// one per client so that per-host budgets see all of its traffic. The zero
// value is not usable: its RoundTrip returns an error.
type Transport struct {
	base http.RoundTripper
	cfg  *config
	err  error
	rec  *observe.Recorder // nil in the zero value and after an invalid option
	// tracer is nil without WithTracerProvider.
	tracer *observe.Tracer

	// shared serves every host when budgets are not kept per host.
	shared *host

	// hosts holds the state of the hosts used lately, at most
	// bounded.DefaultMax of them (see package bounded).
	hosts *bounded.Map[string, *host]

	// buffers holds the request bodies buffered for replay, against
	// WithBufferLimits.
	buffers replay.Pool

	mu       sync.Mutex // serializes adding names
	names    sync.Map   // callName → its name in Stats
	nnames   int        // guarded by mu
	maxNames int
}

// callName is what requests are counted by in Stats and metrics.
type callName struct{ method, host string }

// host is the state kept per host: a strategy and a hedger that share the
// host's budget.
type host struct {
	retry  *strategy
	hedger *rebound.Hedger // nil without WithHedging
	budget rebound.Budget  // the host's budget and WithBudget's, for an override's cap; nil for none
}

// NewTransport returns a Transport that sends requests through base
// (http.DefaultTransport when nil) and retries them:
//
//   - up to 3 attempts, with exponential backoff and full jitter between
//     them ([rebound.DefaultBackoff]), following the Smithy standard
//     strategy ([rebound.NewStandard]);
//   - on responses 429, 502, 503 and 504, and on connection errors, when
//     the request is idempotent ([Idempotent]); a request whose connection
//     could not be made never reached the server and is retried whatever
//     its method;
//   - waiting at least as long as a Retry-After hint asks, and at random
//     up to half a second more (half the hint, when shorter), so that
//     clients told the same whole second do not all come back in it; in
//     seconds or
//     an HTTP-date ([ParseRetryAfter]); a hint longer than the cap
//     ([WithRetryDelayCap], 60s by default) returns the response at once
//     and stops retrying with [rebound.ErrRetryDelayTooLong], one that
//     would pass the request context's deadline with [rebound.ErrDeadline];
//   - never sleeping past the request context's deadline, and never
//     retrying once the context is done;
//   - while the host's budget allows (by default a [rebound.TokenBucket]
//     per host, see [WithBudgetPerHost]), and the Transport's, if any
//     ([WithBudget]).
//
// The caller's request is never modified. Each attempt after the first
// gets a fresh body from GetBody; a body without GetBody is buffered when
// small enough ([WithBufferLimits]), and otherwise the request gets
// exactly one attempt. The bodies of responses that are not returned are
// drained (up to 4 KiB, for at most 50ms, while the request's context
// lasts) and closed, so that their connections are reused; a longer or
// slower body is closed unread and costs its connection, not the time to
// read it.
//
// When retrying stops after a response, that last response is returned
// with its body unread and a nil error, as http.Client expects of a
// RoundTripper. Otherwise the error says why retrying stopped: it unwraps
// to a [*rebound.Error], and errors.Is finds the reason
// ([rebound.ErrAttemptsExhausted], [rebound.ErrThrottled],
// [rebound.ErrNotRetryable], [rebound.ErrDeadline], [rebound.ErrCommitted]
// when the body could not be sent again, or the context's cause) and the
// last attempt's error.
//
// Invalid options do not panic: [Transport.Err] reports them, and every
// RoundTrip fails with that error, which names the option.
func NewTransport(base http.RoundTripper, opts ...Option) *Transport {
	if base == nil {
		base = http.DefaultTransport
	}
	t := &Transport{base: base, cfg: newConfig(opts), hosts: bounded.New[string, *host](bounded.DefaultMax), maxNames: maxNames}
	if t.err = t.cfg.err(); t.err != nil {
		return t
	}
	rec, err := observe.New(t.cfg.meters, t.cfg.logger, "github.com/rebound-go/rebound/httpretry", observe.HTTP)
	if err != nil {
		t.err = fmt.Errorf("httpretry: WithMeterProvider: %w", err)
		return t
	}
	t.rec = rec
	t.buffers.Limits = t.cfg.buffers
	t.tracer = observe.NewTracer(t.cfg.tracer, "github.com/rebound-go/rebound/httpretry", observe.SystemHTTP)
	if t.cfg.rateLimit != nil {
		t.base = newLimitedBase(t.base, t.cfg)
	}
	if t.cfg.adaptiveThrottle != nil {
		t.base = newGatedBase(t.base, t.cfg)
	}
	probe, err := t.newHost(t.cfg.budget)
	if err != nil {
		t.err = err
		return t
	}
	if t.cfg.budgetPerHost == nil || (t.cfg.strategy != nil && t.cfg.hedge == nil) {
		t.shared = probe
	}
	return t
}

// New returns the Transport of [NewTransport], or an error naming the first
// invalid option.
func New(base http.RoundTripper, opts ...Option) (*Transport, error) {
	t := NewTransport(base, opts...)
	if t.err != nil {
		return nil, t.err
	}
	return t, nil
}

// Err returns the error of the options given to [NewTransport], naming each
// invalid option, or nil when they are all valid. For a zero Transport it
// returns an error.
func (t *Transport) Err() error {
	if t.cfg == nil {
		return errZeroTransport
	}
	return t.err
}

// RoundTrip sends req, retrying as described at [NewTransport]. It
// implements [http.RoundTripper]: the response is non-nil iff the error is
// nil, and req's body is closed.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.Err(); err != nil {
		closeBody(req)
		return nil, err
	}
	if req.URL == nil {
		closeBody(req)
		return nil, errors.New("httpretry: nil Request.URL")
	}
	out, held, err := prepare(req, &t.buffers)
	if err != nil {
		return nil, err
	}
	resp, err := t.roundTrip(req, out)
	t.buffers.Release(held)
	return resp, err
}

// roundTrip makes the attempts of req, prepared as out.
func (t *Transport) roundTrip(req *http.Request, out outgoing) (*http.Response, error) {
	idempotent, err := t.cfg.headers.keyed(&out, t.cfg.idempotent(req))
	if err != nil {
		closeBody(out.first)
		return nil, err
	}
	name, target := t.name(req.Method, req.URL.Host)
	ctx := req.Context()
	if !out.replayable() {
		return t.once(ctx, out.first, idempotent, name, target, req)
	}
	h, err := t.hostFor(req.URL.Host)
	if err != nil {
		closeBody(out.first)
		return nil, err
	}
	ctx, span := t.tracer.StartHTTP(ctx, req.Method, req.URL)
	hd := h.hedger
	if ov := overrideOf(ctx); hd != nil && idempotent && ov != nil {
		if hd, err = t.overrideHedge(ctx, h, *ov, name, target); err != nil {
			closeBody(out.first)
			endCall(span, nil, err)
			return nil, err
		}
	}
	if hd != nil && idempotent {
		resp, err := t.hedge(ctx, hd, &out, name, target, req, span)
		endCall(span, resp, err)
		return resp, err
	}
	c := &call{t: t, out: out, idempotent: idempotent, clock: h.retry.clock, name: name, target: target, span: span, timeout: t.cfg.attemptTimeout}
	st := h.retry
	if ov := overrideOf(ctx); ov != nil {
		if st, err = t.override(ctx, c, h, *ov); err != nil {
			closeBody(out.first)
			endCall(span, nil, err)
			return nil, err
		}
	}
	d := t.rec.Decisions(ctx, name, target)
	call := observe.Hooks[*http.Response](&d)
	if span != nil {
		call = observe.Traced[*http.Response](&d, span)
	}
	resp, err := call.Retry(ctx, st, c.attempt)
	countAttempts(ctx, c.sent)
	loopErr := err
	if err != nil {
		resp, err = t.gaveUp(ctx, err)
	}
	t.end(ctx, c.tr, c.sent, name, target, attributes(req, target, resp), false, loopErr)
	endCall(span, resp, err)
	return resp, err
}

// Stats returns a snapshot of the retry statistics (gRFC A6) of the
// requests sent through t, counted when their RoundTrip returns. Requests
// are named by method and host, like "GET example.com" or "PUT
// 127.0.0.1:8080" (the request URL's Host; an empty method is GET), so a
// method's statistics are kept per host. Names are kept for at most 1024
// method and host pairs; requests beyond them are counted under "(other)".
// Stats is safe to call at any time, also while requests run; the result
// is the caller's. For a Transport with invalid options it is empty.
func (t *Transport) Stats() rebound.Stats { return t.rec.Stats() }

// name returns the name of requests with method to host in Stats and
// metrics, and their target, the host.
func (t *Transport) name(method, host string) (name, target string) {
	if method == "" {
		method = http.MethodGet
	}
	key := callName{method, host}
	if v, ok := t.names.Load(key); ok {
		return v.(string), host
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.names.Load(key); ok {
		return v.(string), host
	}
	if t.nnames >= t.maxNames {
		return otherName, otherName
	}
	// Made once per pair: building it for every request would cost an
	// allocation on the success path.
	name = method + " " + host
	t.names.Store(key, name)
	t.nnames++
	return name, host
}

// end records a request that went through the retry loop or hedging. tr
// is nil when no attempt failed, and attempts then says how many were
// sent; a holds the metric attributes; err is the loop's.
func (t *Transport) end(ctx context.Context, tr *observe.Tracker, attempts int, name, target string, a observe.HTTPAttributes, hedged bool, err error) {
	var reason error
	if err != nil {
		// Only here: looking for the reason costs an allocation.
		reason = observe.Reason(err)
	}
	c := observe.Call{Method: name, Target: target, Attempts: attempts, Hedged: hedged, Reason: reason}
	if tr != nil {
		c = tr.Call(name, target, hedged, reason)
	}
	c.HTTP = a
	t.rec.End(ctx, &c)
}

// logCommitted logs the decision to return a response whose server hint
// (Retry-After, or a rate-limit reset) is beyond the cap, with the hint.
func (t *Transport) logCommitted(ctx context.Context, err error, attempt int, name, target string) {
	if se, ok := err.(*statusError); ok && se.overCap > 0 {
		t.rec.Log(ctx, "rebound: committed", name, target, slog.Int("attempt", attempt),
			slog.String("why", se.why()), slog.Duration("retry_after", se.overCap), slog.Duration("cap", t.cfg.retryDelayCap))
	}
}

// CloseIdleConnections closes the idle connections of the base
// RoundTripper, when it has such a method; http.Client calls it.
func (t *Transport) CloseIdleConnections() {
	if ci, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

func closeBody(req *http.Request) {
	if req != nil && req.Body != nil {
		_ = req.Body.Close()
	}
}

// call is one RoundTrip on the retry path.
type call struct {
	t            *Transport
	out          outgoing
	idempotent   bool
	sent         int
	clock        rebound.Clock // read only after a failure
	name, target string
	// tr follows the attempts from the first failure on. It is made then,
	// not held by value: a Tracker's lock would move the call to the heap,
	// an allocation on every request's success path.
	tr   *observe.Tracker
	span *observe.CallSpan // nil unless the Transport traces
	// timeout is the per-attempt timeout, 0 for none; status the codes
	// the call's override retries, nil for the Transport's.
	timeout time.Duration
	status  *statusSet
}

// attempt sends the request once and turns the outcome into what the
// strategy needs: a success, or an error carrying [rebound.RetryInfo].
func (c *call) attempt(ctx context.Context) (*http.Response, error) {
	r := c.out.first
	if c.sent > 0 {
		var err error
		if r, err = c.out.next(); err != nil {
			return nil, rebound.Permanent(err)
		}
		c.tr.Start(c.clock.Now()) // an attempt failed before: tr is set
	}
	c.sent++
	r = c.t.cfg.headers.numbered(r, c.sent)
	var as *observe.AttemptSpan
	if c.span != nil {
		// The request keeps its own context, with the attempt's span.
		_, as = c.span.StartAttempt(ctx, c.sent)
		r = r.WithContext(as.Into(r.Context()))
	}
	var resp *http.Response
	var err error
	timedOut := false
	if c.timeout > 0 {
		resp, err, timedOut = c.timed(r)
	} else {
		resp, err = c.t.sendWith(r, c.idempotent, c.status)
	}
	endAttempt(as, resp, err, false)
	if err != nil {
		if c.tr == nil {
			c.tr = new(observe.Tracker)
			c.tr.Start(time.Time{}) // the first attempt, whose start is not needed
		}
		if timedOut {
			c.tr.TimedOut()
		}
		c.tr.Failed(c.sent, rebound.Classify(err), c.clock.Now())
		c.t.logCommitted(ctx, err, c.sent, c.name, c.target)
		return nil, err
	}
	return resp, nil
}

// send is one attempt through the base RoundTripper.
func (t *Transport) send(r *http.Request, idempotent bool) (*http.Response, error) {
	return t.sendWith(r, idempotent, nil)
}

// sendWith is send with the status codes a call's override retries; nil
// means the Transport's.
func (t *Transport) sendWith(r *http.Request, idempotent bool, retryable *statusSet) (*http.Response, error) {
	if t.cfg.rateLimit != nil && t.cfg.classify != nil && !awaited(r) {
		return t.sendJudged(r, idempotent, retryable)
	}
	resp, err := t.base.RoundTrip(r)
	switch {
	case err != nil:
		return nil, t.judged(r, idempotent, checkError(err, idempotent))
	case resp == nil:
		return nil, rebound.Permanent(errors.New("httpretry: base RoundTripper returned a nil response and a nil error"))
	}
	if err := t.checkResponse(resp, idempotent, retryable); err != nil {
		return nil, t.judged(r, idempotent, err)
	}
	return resp, nil
}

// gaveUp turns the error that ended retrying into RoundTrip's result: the
// last response when there is one still unread and the caller is still
// waiting, an error otherwise.
func (t *Transport) gaveUp(ctx context.Context, err error) (*http.Response, error) {
	var se *statusError
	if errors.As(err, &se) && !se.discarded {
		if ctx.Err() == nil {
			return se.resp, nil
		}
		if se.resp.Body != nil {
			_ = se.resp.Body.Close()
		}
	}
	return nil, &gaveUpError{err}
}

// once sends a request whose body cannot be replayed: one attempt, no
// retries. ctx is the request's; req is the caller's, for the metric
// attributes.
func (t *Transport) once(ctx context.Context, r *http.Request, idempotent bool, name, target string, req *http.Request) (resp *http.Response, err error) {
	t.rec.Log(ctx, "rebound: committed", name, target, slog.Int("attempt", 1), slog.String("why", "request body cannot be replayed"))
	r = t.cfg.headers.numbered(r, 1)
	if t.tracer != nil {
		var span *observe.CallSpan
		ctx, span = t.tracer.StartHTTP(ctx, r.Method, r.URL)
		span.Committed(1, whyNotReplayable)
		var as *observe.AttemptSpan
		_, as = span.StartAttempt(ctx, 1)
		r = r.WithContext(as.Into(r.Context()))
		defer func() {
			endAttempt(as, resp, err, false)
			endCall(span, resp, err)
		}()
	}
	resp, err = t.base.RoundTrip(r)
	countAttempts(ctx, 1)
	c := observe.Call{Method: name, Target: target, Attempts: 1, HTTP: attributes(req, target, resp)}
	if err == nil {
		t.rec.End(ctx, &c)
		return resp, nil
	}
	var reason error = errBodyNotReplayable
	if ctx := r.Context(); ctx.Err() != nil {
		reason = context.Cause(ctx)
	} else if rebound.Classify(checkError(err, idempotent)).Safety == rebound.SafetyNo {
		reason = rebound.ErrNotRetryable
	}
	c.Reason = reason
	t.rec.End(ctx, &c)
	return nil, &gaveUpError{&rebound.Error{Err: err, Reason: reason, Attempts: 1}}
}

// hostFor returns the state of the named host, adding it when new. The
// budget factory is called once per host (again after an eviction), under
// the host map's lock. NewTransport built
// the same configuration once already, so newHost fails only if a later
// change to the core starts checking budgets.
func (t *Transport) hostFor(name string) (*host, error) {
	if t.shared != nil {
		return t.shared, nil
	}
	return t.hosts.Get(name, func() (*host, error) { return t.newHost(hostBudget(t.cfg.budgetPerHost(name), t.cfg.budget)) })
}

// hostBudget returns what the retries and hedges of a host spend: its own
// budget and the Transport's, both of which must allow; nil for neither.
func hostBudget(own, shared rebound.Budget) rebound.Budget {
	switch {
	case own == nil:
		return shared
	case shared == nil:
		return own
	}
	return rebound.AllBudgets(own, shared)
}

func (t *Transport) newHost(b rebound.Budget) (*host, error) {
	cfg := t.cfg
	h := &host{budget: b}
	if cfg.strategy != nil {
		h.retry = &strategy{s: cfg.strategy, clock: clockOf(cfg.strategy, cfg.clock)}
	} else {
		opts := []rebound.Option{
			rebound.WithMaxAttempts(cfg.maxAttempts),
			rebound.WithBackoff(cfg.backoff),
			rebound.WithBudget(b),
			rebound.WithClock(cfg.clock),
		}
		if cfg.random != nil {
			opts = append(opts, rebound.WithRandom(cfg.random))
		}
		st, err := rebound.NewStandard(opts...)
		if err != nil {
			return nil, errors.New("httpretry: " + err.Error())
		}
		h.retry = &strategy{s: st, clock: cfg.clock}
	}
	if cfg.hedge != nil {
		hd, err := rebound.NewHedger(*cfg.hedge, rebound.WithBudget(b), rebound.WithClock(cfg.clock))
		if err != nil {
			return nil, errors.New("httpretry: WithHedging: " + err.Error())
		}
		h.hedger = hd
	}
	return h, nil
}
