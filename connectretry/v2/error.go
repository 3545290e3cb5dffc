package connectretry

import (
	"context"
	"errors"

	"connectrpc.com/connect/v2"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry/internal/engine"
	"github.com/rebound-go/rebound/internal/previous"
)

// newCallError returns the error of a call that a retry or hedging policy
// governed and that failed, from the engine's verdict re. Its text says
// why retrying stopped: "connectretry: gave up after 3 attempts (attempts
// exhausted): unavailable: busy". It unwraps to the last attempt's
// *connect.Error, with its code, message, details and IsRemote unchanged,
// so that connect.CodeOf and errors.As with a *connect.Error see the last
// attempt's, and through that to the [rebound.Error] that says why
// retrying stopped, which errors.As finds (the number of attempts, the
// reason, the last attempt's error) and through which errors.Is sees the
// reason: rebound.ErrAttemptsExhausted, rebound.ErrThrottled,
// rebound.ErrPushback, rebound.ErrNotRetryable, rebound.ErrDeadline, or
// the context's cause.
//
// The last attempt's error keeps IsRemote: a server's verdict stays a
// remote one, so that a handler which passes the call's error on does not
// send it as its own (connect's server transports send a remote error as
// CodeInternal), and the handler's callers do not retry what was retried
// here already. rebound's own errors (a per-attempt timeout, the adaptive
// throttle's or rate limit's refusal, the caller's context) are local.
//
// A call made once because no policy applies returns connect's error as it
// is.
func newCallError(re *rebound.Error) error {
	last, ok := errors.AsType[*connect.Error](re.Err)
	if !ok || last == nil {
		last = connect.NewError(connect.CodeUnknown, re.Err.Error()).WithCause(re.Err)
	}
	return &engine.CallError{Last: last.WithCause(re), RE: re}
}

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
// that the Interceptor sets on retries and hedges: 0 on the first attempt,
// when the header is missing or invalid, or outside a handler (ctx
// carries no connect.CallInfo of the server).
func PreviousAttempts(ctx context.Context) int {
	info, ok := connect.CallInfoForServerContext(ctx)
	if !ok {
		return 0
	}
	return previous.Parse(info.RequestHeader().Values(engine.PreviousAttemptsHeader))
}
