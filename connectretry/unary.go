package connectretry

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/observe"
	"github.com/rebound-go/rebound/internal/perattempt"
	"github.com/rebound-go/rebound/internal/ratelimit"
	"github.com/rebound-go/rebound/serviceconfig"
)

// The metadata keys of A6 in their canonical http.Header form.
var (
	pushbackKey         = http.CanonicalHeaderKey(a6.PushbackHeader)
	previousAttemptsKey = http.CanonicalHeaderKey(a6.PreviousAttemptsHeader)
)

// WrapUnary returns the function that retries or hedges a unary client call
// per its method's policy. Handler calls pass through.
func (i *Interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		spec := req.Spec()
		if !spec.IsClient {
			return next(ctx, req)
		}
		if i.err != nil {
			return nil, connect.NewError(connect.CodeInternal, i.err)
		}
		return i.unary(ctx, next, req, spec)
	}
}

func (i *Interceptor) unary(ctx context.Context, next connect.UnaryFunc, req connect.AnyRequest, spec connect.Spec) (connect.AnyResponse, error) {
	if i.opts.RateLimit != nil {
		next = limitedUnary(i.target(req.Peer().Addr).limit, next)
	}
	if i.opts.AdaptiveThrottle != nil {
		next = gatedUnary(i.target(req.Peer().Addr).gate, next)
	}
	n := attemptsOut(ctx)
	cp, err := i.resolve(ctx, spec.Procedure)
	if err != nil {
		return nil, err
	}
	if len(cp.clamped) > 0 {
		i.logClamped(ctx, spec.Procedure, i.target(req.Peer().Addr).name, cp.clamped)
	}
	mc := cp.mc
	ctx, cancel := withTimeout(ctx, mc)
	if cancel != nil {
		defer cancel()
	}
	if i.opts.Disabled || mc == nil || (mc.RetryPolicy == nil && mc.HedgingPolicy == nil) {
		if n != nil {
			*n = 1
		}
		if !i.countsUnpoliced() {
			return next(ctx, req)
		}
		resp, err := next(ctx, req)
		countUnpoliced(i.target(req.Peer().Addr).throttle, err, nil)
		return resp, err
	}
	t := i.target(req.Peer().Addr)
	p := i.policyFor(t, cp)
	if p.err != nil {
		if n != nil {
			*n = 0
		}
		return nil, policyError(spec.Procedure, p.err)
	}
	d := i.rec.Decisions(ctx, spec.Procedure, t.name)
	var span *observe.CallSpan
	if i.tracer != nil {
		ctx, span = i.tracer.StartRPC(ctx, spec.Procedure, req.Peer().Addr)
	}
	if p.hedge != nil {
		resp, err := i.hedgeUnary(ctx, d, span, p.hedge, mc.HedgingPolicy.NonFatalStatusCodes, next, req, spec.Procedure, t.name, n)
		endCall(span, err)
		return resp, err
	}
	u := unaryCall{next: next, req: req, codes: mc.RetryPolicy.RetryableStatusCodes, clock: i.clock(), span: span, timeout: cp.timeout, opts: &i.opts}
	call := observe.Hooks[connect.AnyResponse](&d)
	if span != nil {
		call = observe.Traced[connect.AnyResponse](&d, span)
	}
	resp, err := call.Retry(ctx, p.retry, u.attempt)
	if n != nil {
		*n = u.attempts
	}
	i.end(ctx, u.tr, u.attempts, spec.Procedure, t.name, false, err)
	if err != nil {
		err = giveUp(ctx, err)
		endCall(span, err)
		return nil, err
	}
	endCall(span, nil)
	return resp, nil
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

// unaryCall is the state of one retried unary call.
type unaryCall struct {
	next     connect.UnaryFunc
	req      connect.AnyRequest
	codes    serviceconfig.CodeSet
	clock    rebound.Clock // read only after a failure
	attempts int
	// tr follows the attempts from the first failure on. It is made then,
	// not held by value: a Tracker's lock would move the whole unaryCall
	// to the heap, an allocation on every call's success path.
	tr      *observe.Tracker
	span    *observe.CallSpan // nil unless the interceptor traces
	timeout time.Duration     // per attempt; 0 for none
	opts    *options          // the interceptor's, for classify
}

// attempt makes one attempt. The first sends the caller's request as it is;
// later ones send it with a copy of its header that carries the attempts
// header, so the caller's request is never changed by a retry.
func (u *unaryCall) attempt(ctx context.Context) (connect.AnyResponse, error) {
	u.attempts++
	req := u.req
	if u.attempts > 1 {
		u.tr.Start(u.clock.Now()) // an attempt failed before: tr is set
		req = &attemptRequest{AnyRequest: u.req, header: attemptHeader(u.req.Header(), u.attempts-1)}
	}
	ctx, as := u.span.StartAttempt(ctx, u.attempts)
	ctx, v := u.opts.awaitVerdict(ctx)
	// The attempt's deadline goes to the server with the request
	// (Connect-Timeout-Ms or grpc-timeout), so the server drops work the
	// client has given up on.
	actx, cancel := perattempt.WithDeadline(ctx, u.timeout)
	resp, err := u.next(actx, req)
	timedOut := err != nil && perattempt.Cut(ctx, actx, u.timeout)
	cancel()
	if err != nil {
		var ae *a6.Failure
		if timedOut {
			ae = timeoutError(u.timeout)
			v.Release() // no classifier judged the answer, if one came
		} else {
			ae = classify(v, err, u.codes, u.opts, u.req.Spec().Procedure)
		}
		endAttempt(as, ae, false)
		if u.tr == nil {
			u.tr = new(observe.Tracker)
			u.tr.Start(time.Time{}) // the first attempt, whose start is not needed
		}
		if timedOut {
			u.tr.TimedOut()
		}
		u.tr.Failed(u.attempts, ae.Info, u.clock.Now())
		return nil, ae
	}
	endAttempt(as, nil, false)
	return resp, nil
}

// countsUnpoliced reports whether calls that no policy governs count
// against a throttle.
func (i *Interceptor) countsUnpoliced() bool {
	return i.cfg != nil && i.cfg.RetryThrottling != nil && !i.opts.Disabled
}

// countUnpoliced counts a call that no policy governed against its server
// name's throttle (see a6.CountUnpoliced). Connect puts a failed call's
// trailers in its error's metadata; trailer holds them otherwise, for a
// stream whose error does not carry them.
func countUnpoliced(th *rebound.Throttle, err error, trailer http.Header) {
	if th == nil {
		return
	}
	var pushback []string
	if err != nil {
		if ce := new(connect.Error); errors.As(err, &ce) {
			pushback = ce.Meta()[pushbackKey]
		}
		if pushback == nil {
			pushback = trailer[pushbackKey]
		}
	}
	a6.CountUnpoliced(th, err == nil, pushback)
}

// attemptRequest is the request of one attempt: the caller's, with a header
// of its own. Embedding the caller's request gives it connect's unexported
// methods, so the attempt's HTTP method is recorded on the embedded request.
type attemptRequest struct {
	connect.AnyRequest
	header http.Header
}

// Header returns the attempt's header.
func (r *attemptRequest) Header() http.Header { return r.header }

// attemptHeader returns a copy of h for an attempt that follows previous
// others; the first attempt (previous 0) carries no attempts header.
func attemptHeader(h http.Header, previous int) http.Header {
	c := h.Clone()
	if c == nil {
		c = make(http.Header, 1)
	}
	if previous > 0 {
		c[previousAttemptsKey] = []string{strconv.Itoa(previous)}
	}
	return c
}

// classify describes a failed attempt of procedure for the engine:
// retryable (or non-fatal) when its code is in codes, with the server's
// pushback and RetryInfo, then as the interceptor's classifier says (see
// options.verdict). A unary attempt is never committed: connect hands
// nothing of a response to the application before the call returns, so a
// failed attempt can be replaced without the caller seeing two responses.
// v holds the attempt's answer to the rate limit for the verdict, if any.
func classify(v *ratelimit.Verdict, err error, codes serviceconfig.CodeSet, o *options, procedure string) *a6.Failure {
	code := connect.CodeUnknown
	var pushback []string
	var ce *connect.Error
	if errors.As(err, &ce) {
		code = ce.Code()
		pushback = ce.Meta()[pushbackKey]
	}
	info := a6.Info(codes.Has(serviceconfig.Code(code)), pushback, false)
	d, has := retryDelay(ce)
	info = o.Hints.Apply(info, serviceconfig.Code(code), d, has)
	return &a6.Failure{Err: err, Info: o.verdict(v, procedure, ce, err, info)}
}

// hedgeUnary runs a unary call as A6 hedged attempts.
//
// Attempts run at the same time, so each gets its own copy of the request
// and of its header: connect records the HTTP method on the request and the
// timeout in the header. The copy of the request that won is copied back,
// so the caller's request reports the method that was used. A
// connect.CallInfo in ctx is hidden from the attempts (see hedgeContext).
//
// Hedged attempts overlap, so no delay between them is measured, and the
// clock is not read.
func (i *Interceptor) hedgeUnary(ctx context.Context, d observe.Decisions, span *observe.CallSpan, hd *rebound.Hedger, codes serviceconfig.CodeSet, next connect.UnaryFunc, req connect.AnyRequest, procedure, target string, n *int) (connect.AnyResponse, error) {
	type won struct {
		resp connect.AnyResponse
		req  connect.AnyRequest
	}
	header := req.Header()
	var tr observe.Tracker
	op := func(hctx context.Context, attempt int) (won, error) {
		tr.Start(time.Time{})
		r := copyRequest(req)
		actx, as := span.StartAttempt(hctx, attempt)
		actx, v := i.opts.awaitVerdict(actx)
		resp, err := next(actx, &attemptRequest{AnyRequest: r, header: attemptHeader(header, attempt-1)})
		// An attempt cancelled while the call goes on has lost: the call
		// ended with another attempt.
		lost := hctx.Err() != nil && ctx.Err() == nil
		if err != nil {
			ae := classify(v, err, codes, &i.opts, procedure)
			endAttempt(as, ae, lost)
			tr.Failed(attempt, ae.Info, time.Time{})
			return won{}, ae
		}
		if !lost {
			// The first response commits the call to its attempt; any
			// other is cancelled.
			as.Committed(whyResponse)
		}
		endAttempt(as, nil, lost)
		return won{resp, r}, nil
	}
	// d is a copy, so that the caller's stays on its stack on the retry
	// path.
	d.Tracker = &tr // to hear of a hedge the budget refuses, for Stats
	call := observe.Hooks[won](&d)
	if span != nil {
		call = observe.Traced[won](&d, span)
	}
	w, err := call.Hedge(hedgeContext{ctx}, hd, op)
	// Hedge has waited for every attempt: tr is complete.
	if n != nil {
		*n = tr.Attempts()
	}
	i.end(ctx, &tr, 0, procedure, target, true, err)
	if err != nil {
		return nil, giveUp(ctx, err)
	}
	restoreRequest(req, w.req)
	return w.resp, nil
}

// copyRequest returns a shallow copy of req, which is a *connect.Request[T]
// for some T when it comes from connect. AnyRequest cannot be implemented
// outside connect, and its type parameter is unknown here, hence reflect.
// Anything else is returned as is.
func copyRequest(req connect.AnyRequest) connect.AnyRequest {
	v := reflect.ValueOf(req)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return req
	}
	c := reflect.New(v.Elem().Type())
	c.Elem().Set(v.Elem())
	return c.Interface().(connect.AnyRequest)
}

// restoreRequest copies the attempt's copy of the request back into the
// caller's.
func restoreRequest(req, copied connect.AnyRequest) {
	if req == copied {
		return
	}
	dst, src := reflect.ValueOf(req), reflect.ValueOf(copied)
	if dst.Type() == src.Type() {
		dst.Elem().Set(src.Elem())
	}
}

// hedgeContext hides the connect.CallInfo of connect.NewClientContext from
// hedged attempts. connect records each attempt's HTTP method and response
// on it as the attempt is sent; attempts running at once would race on it,
// and it would end up describing whichever attempt was sent last, not the
// one that won. Handler call infos (Spec().IsClient false) stay visible.
type hedgeContext struct{ context.Context }

func (c hedgeContext) Value(key any) any {
	v := c.Context.Value(key)
	if ci, ok := v.(connect.CallInfo); ok && ci.Spec().IsClient {
		return nil
	}
	return v
}

// giveUp turns the engine's verdict into the call's error: a *connect.Error
// with the last attempt's code, message, details and metadata, which
// unwraps to an [*Error].
func giveUp(ctx context.Context, err error) error {
	var re *rebound.Error
	if !errors.As(err, &re) {
		return err
	}
	last := re.Err
	var ae *a6.Failure
	if errors.As(last, &ae) {
		last = ae.Err
	}
	if last == nil || ctx.Err() != nil && re.Reason == context.Cause(ctx) {
		// The caller's context ended the call, perhaps while it waited
		// between attempts: its code is the call's.
		last = contextError(ctx)
	}
	return callError(last, re.Attempts, re.Reason)
}

// contextError is the error of a call whose context ended before any
// attempt returned.
func contextError(ctx context.Context) error {
	code := connect.CodeCanceled
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		code = connect.CodeDeadlineExceeded
	}
	return connect.NewError(code, context.Cause(ctx))
}
