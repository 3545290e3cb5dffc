package connectretry

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"strconv"

	"connectrpc.com/connect"

	"github.com/rebound-go/rebound/connectretry/internal/engine"
)

// The metadata keys of A6 in their canonical http.Header form.
const (
	pushbackKey         = engine.PushbackHeader
	previousAttemptsKey = engine.PreviousAttemptsHeader
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
		return i.unary(ctx, next, req, spec.Procedure)
	}
}

func (i *Interceptor) unary(ctx context.Context, next connect.UnaryFunc, req connect.AnyRequest, procedure string) (connect.AnyResponse, error) {
	// The call's state lives in c, on this stack: the attempts' method
	// leaks what c points to (the request), so c holds the engine's state
	// by value, not by pointer.
	c := unaryCall{next: next, req: req}
	addr := req.Peer().Addr
	ctx, err := c.u.Start(i.engine(), ctx, procedure, addr)
	if err != nil {
		return nil, err
	}
	defer c.u.Stop()
	if err := c.u.Opened(addr); err != nil {
		return nil, err
	}
	switch c.u.Mode() {
	case engine.ModeOnce:
		return c.attempt(ctx)
	case engine.ModeHedge:
		return hedge(ctx, &c.u, next, req)
	}
	return engine.Retry(ctx, &c.u, c.attempt)
}

// unaryCall is a unary call made once or retried.
type unaryCall struct {
	u    engine.Unary
	next connect.UnaryFunc
	req  connect.AnyRequest
}

// attempt makes one attempt. The first sends the caller's request as it is;
// later ones send it with a copy of its header that carries the attempts
// header, so the caller's request is never changed by a retry.
func (c *unaryCall) attempt(ctx context.Context) (connect.AnyResponse, error) {
	ctx = c.u.Begin(ctx)
	req := c.req
	if n := c.u.Attempts(); n > 1 {
		req = &attemptRequest{AnyRequest: c.req, header: attemptHeader(c.req.Header(), n-1)}
	}
	if err := c.u.Admit(); err != nil {
		return nil, c.u.End(err, nil, nil)
	}
	resp, err := c.next(ctx, req)
	var pushback []string
	if err != nil || c.u.RateLimited() {
		// A success's trailer is read only for the rate limit: connect
		// makes a response's trailer on first use.
		pushback = unaryPushback(err, resp)
	}
	return resp, c.u.End(err, pushback, nil)
}

// unaryPushback returns the values of the pushback header of a unary
// call's answer: connect puts a failed call's trailers in its error's
// metadata.
func unaryPushback(err error, resp connect.AnyResponse) []string {
	if err == nil {
		if resp == nil {
			return nil
		}
		return resp.Trailer()[pushbackKey]
	}
	if ce := new(connect.Error); errors.As(err, &ce) {
		return ce.Meta()[pushbackKey]
	}
	return nil
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

// hedge runs a unary call as A6 hedged attempts.
//
// Attempts run at the same time, so each gets its own copy of the request
// and of its header: connect records the HTTP method on the request and the
// timeout in the header. The copy of the request that won is copied back,
// so the caller's request reports the method that was used. A
// connect.CallInfo in ctx is hidden from the attempts (see hedgeContext).
func hedge(ctx context.Context, u *engine.Unary, next connect.UnaryFunc, req connect.AnyRequest) (connect.AnyResponse, error) {
	type won struct {
		resp connect.AnyResponse
		req  connect.AnyRequest
	}
	header := req.Header()
	w, err := engine.Hedge(hedgeContext{ctx}, u, nil, func(a *engine.HedgeAttempt) (won, error) {
		r := copyRequest(req)
		if err := a.Admit(); err != nil {
			return won{}, a.End(err, nil, nil)
		}
		resp, err := next(a.Ctx, &attemptRequest{AnyRequest: r, header: attemptHeader(header, a.N-1)})
		if err != nil {
			return won{}, a.End(err, unaryPushback(err, nil), nil)
		}
		var pushback []string
		if a.RateLimited() {
			pushback = unaryPushback(nil, resp)
		}
		return won{resp, r}, a.End(nil, pushback, nil)
	})
	if err != nil {
		return nil, err
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
