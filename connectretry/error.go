package connectretry

import (
	"context"
	"errors"
	"maps"
	"net/http"

	"connectrpc.com/connect"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry/internal/engine"
	"github.com/rebound-go/rebound/internal/previous"
)

// newCallError returns the error of a call that a retry or hedging policy
// governed and that failed, from the engine's verdict re. Its text says
// why retrying stopped, as grpcretry's and httpretry's do: "connectretry:
// gave up after 3 attempts (attempts exhausted): unavailable: busy". It
// unwraps to a *connect.Error with the last attempt's code, message,
// details and metadata, so that connect.CodeOf and errors.As with a
// *connect.Error see the last attempt's unchanged (a handler that passes
// the error on sends the server's, not rebound's account), and through it
// to the [rebound.Error] that says why retrying stopped, which errors.As
// finds (the number of attempts, the reason, the last attempt's error) and
// through which errors.Is sees the reason: rebound.ErrAttemptsExhausted,
// rebound.ErrThrottled, rebound.ErrPushback, rebound.ErrNotRetryable,
// rebound.ErrDeadline, or the context's cause.
//
// A *connect.Error cannot carry that text itself: its text begins with
// its code, and its message is what goes on the wire.
//
// A call made once because no policy applies returns connect's error as it
// is.
func newCallError(re *rebound.Error) error {
	last := re.Err
	code := connect.CodeUnknown
	var lastCE *connect.Error
	if errors.As(last, &lastCE) {
		code = lastCE.Code()
	}
	inner := &lastMessage{re: re, msg: last.Error()}
	if lastCE != nil {
		inner.msg = lastCE.Message()
	}
	var out *connect.Error
	if connect.IsWireError(last) {
		out = connect.NewWireError(code, inner)
	} else {
		out = connect.NewError(code, inner)
	}
	if lastCE != nil {
		for _, d := range lastCE.Details() {
			out.AddDetail(d)
		}
		if meta := lastCE.Meta(); len(meta) > 0 {
			maps.Copy(out.Meta(), meta)
		}
	}
	return &engine.CallError{Last: out, RE: re}
}

// lastMessage carries the last attempt's message to the *connect.Error a
// call returns, and unwraps to the rebound.Error.
type lastMessage struct {
	re  *rebound.Error
	msg string
}

func (m *lastMessage) Error() string { return m.msg }
func (m *lastMessage) Unwrap() error { return m.re }

// CountAttempts returns a copy of ctx that makes a call through an
// [Interceptor] store in *n how many attempts it made, hedges included: 1
// when it was made once. For unary calls *n is set when the call returns;
// for streams when the first response message arrives or the stream fails
// before one (1 for streams that are never retried). Do not share the
// context between calls that run at the same time.
func CountAttempts(ctx context.Context, n *int) context.Context {
	return engine.CountAttempts(ctx, n)
}

// PreviousAttempts returns, in a handler, how many attempts of this call
// came before this one, from the request header grpc-previous-rpc-attempts
// that the Interceptor sets on retries and hedges: 0 on the first attempt or
// when the header is missing or invalid. Pass the request's header, like
// PreviousAttempts(req.Header()).
func PreviousAttempts(h http.Header) int {
	return previous.Parse(h[previousAttemptsKey])
}
