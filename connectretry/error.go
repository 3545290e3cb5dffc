package connectretry

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"strconv"

	"connectrpc.com/connect"

	"github.com/rebound-go/rebound/internal/a6"
)

// Error tells why a call that a retry or hedging policy governed failed. The
// call itself returns a *connect.Error with the last attempt's code,
// message, details and metadata, so connect.CodeOf and errors.As with a
// *connect.Error see the last attempt unchanged; that error unwraps to an
// *Error, which errors.As finds to tell how many attempts ran and why
// retrying stopped. errors.Is sees the reason: rebound.ErrAttemptsExhausted,
// rebound.ErrThrottled, rebound.ErrPushback, rebound.ErrNotRetryable,
// rebound.ErrDeadline, or the context's cause.
//
// A call made once because no policy applies returns connect's error as it
// is, without an Error.
type Error struct {
	// Err is the last attempt's error: a *connect.Error unless an
	// interceptor between this one and the network returned another kind.
	Err error
	// Attempts is the number of attempts made, hedges included.
	Attempts int
	// Reason says why no further attempt was made.
	Reason error
}

// Error returns the last attempt's error text followed by the retry
// summary, like "unavailable: busy (connectretry: 3 attempts, attempts
// exhausted)".
func (e *Error) Error() string {
	return a6.ErrorText("connectretry", e.Err, e.Attempts, e.Reason)
}

// Unwrap returns the last attempt's error and the reason.
func (e *Error) Unwrap() []error {
	if e.Reason == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Reason}
}

// connectError returns the *connect.Error a call returns for e. Its
// message is the last attempt's, so that the error reads as connect's own.
func (e *Error) connectError() *connect.Error {
	code, msg := connect.CodeUnknown, e.Err.Error()
	var last *connect.Error
	if errors.As(e.Err, &last) {
		code, msg = last.Code(), last.Message()
	}
	inner := &lastMessage{msg: msg, err: e}
	var out *connect.Error
	if connect.IsWireError(e.Err) {
		out = connect.NewWireError(code, inner)
	} else {
		out = connect.NewError(code, inner)
	}
	if last != nil {
		for _, d := range last.Details() {
			out.AddDetail(d)
		}
		if meta := last.Meta(); len(meta) > 0 {
			maps.Copy(out.Meta(), meta)
		}
	}
	return out
}

// lastMessage carries the last attempt's message to the *connect.Error a
// call returns, and unwraps to the *Error.
type lastMessage struct {
	msg string
	err *Error
}

func (m *lastMessage) Error() string { return m.msg }
func (m *lastMessage) Unwrap() error { return m.err }

type attemptsKey struct{}

// CountAttempts returns a copy of ctx that makes a call through an
// [Interceptor] store in *n how many attempts it made, hedges included: 1
// when it was made once. For unary calls *n is set when the call returns;
// for streams when the first response message arrives or the stream fails
// before one (1 for streams that are never retried). Do not share the
// context between calls that run at the same time.
func CountAttempts(ctx context.Context, n *int) context.Context {
	return context.WithValue(ctx, attemptsKey{}, n)
}

func attemptsOut(ctx context.Context) *int {
	n, _ := ctx.Value(attemptsKey{}).(*int)
	return n
}

// PreviousAttempts returns, in a handler, how many attempts of this call
// came before this one, from the request header grpc-previous-rpc-attempts
// that the Interceptor sets on retries and hedges: 0 on the first attempt or
// when the header is missing or invalid. Pass the request's header, like
// PreviousAttempts(req.Header()).
func PreviousAttempts(h http.Header) int {
	v := h[previousAttemptsKey]
	if len(v) != 1 {
		return 0
	}
	n, err := strconv.Atoi(v[0])
	if err != nil || n < 0 {
		return 0
	}
	return n
}
