package grpcretry

import (
	"context"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/observe"
)

// codeNames are the canonical names of the status codes, as the
// OpenTelemetry RPC conventions spell rpc.response.status_code.
var codeNames = [...]string{
	codes.OK:                 "OK",
	codes.Canceled:           "CANCELLED",
	codes.Unknown:            "UNKNOWN",
	codes.InvalidArgument:    "INVALID_ARGUMENT",
	codes.DeadlineExceeded:   "DEADLINE_EXCEEDED",
	codes.NotFound:           "NOT_FOUND",
	codes.AlreadyExists:      "ALREADY_EXISTS",
	codes.PermissionDenied:   "PERMISSION_DENIED",
	codes.ResourceExhausted:  "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION",
	codes.Aborted:            "ABORTED",
	codes.OutOfRange:         "OUT_OF_RANGE",
	codes.Unimplemented:      "UNIMPLEMENTED",
	codes.Internal:           "INTERNAL",
	codes.Unavailable:        "UNAVAILABLE",
	codes.DataLoss:           "DATA_LOSS",
	codes.Unauthenticated:    "UNAUTHENTICATED",
}

// outcome describes how a call or an attempt that ended with err ended
// (nil or io.EOF for OK).
func outcome(err error) observe.Outcome {
	if err == nil || err == io.EOF {
		return observe.Outcome{Code: "OK"}
	}
	o := observe.Outcome{Err: err, Failed: true}
	if c := status.Code(err); int(c) < len(codeNames) {
		o.Code = codeNames[c]
	}
	return o
}

// startCall starts the span of a call of method on t, when c traces.
func (c *Client) startCall(ctx context.Context, method string, t *target) (context.Context, *observe.CallSpan) {
	if c.tracer == nil {
		return ctx, nil
	}
	return c.tracer.StartRPC(ctx, method, endpoint(t.uri))
}

type attemptSpanKey struct{}

// startAttempt starts the span of attempt n of the call s, and puts it in
// the attempt's context also for callStats, which hears of the attempt's
// headers and transparent retries only through its context.
func startAttempt(ctx context.Context, s *observe.CallSpan, n int) (context.Context, *observe.AttemptSpan) {
	if s == nil {
		return ctx, nil
	}
	ctx, as := s.StartAttempt(ctx, n)
	return context.WithValue(ctx, attemptSpanKey{}, as), as
}

// attemptSpan returns the span that startAttempt put in ctx, or nil.
func attemptSpan(ctx context.Context) *observe.AttemptSpan {
	as, _ := ctx.Value(attemptSpanKey{}).(*observe.AttemptSpan)
	return as
}

// Reasons a call was committed, for the "committed" event.
const (
	whyHeaders  = "response headers"
	whyOK       = "attempt ended OK"
	whyOverflow = "message not kept for replay: buffer limit, or not a proto message"
	whyTooLarge = "request does not fit the buffer"
)

// lostOutcome is how an attempt cancelled because the call committed to
// another ends.
var lostOutcome = outcome(status.Error(codes.Canceled, "grpcretry: the call committed to another attempt"))

// endAttempt ends the span of an attempt that ended with err (see
// observe.AttemptSpan.End), when there is one.
func endAttempt(as *observe.AttemptSpan, err error, info rebound.RetryInfo, lost bool) {
	if as != nil {
		as.End(outcome(err), info, lost)
	}
}

// endCall ends the span of a call that ended with err, when there is one.
func endCall(s *observe.CallSpan, err error) {
	if s != nil {
		s.End(outcome(err))
	}
}
