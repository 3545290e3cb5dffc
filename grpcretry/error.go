package grpcretry

import (
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound/internal/a6"
)

// Error is returned by a call that a retry or hedging policy governed and
// that did not succeed. It is a gRPC status error: status.Code and
// status.FromError see the last attempt's status unchanged. errors.As finds
// it to tell how many attempts ran and why retrying stopped; errors.Is sees
// the reason (rebound.ErrAttemptsExhausted, rebound.ErrThrottled,
// rebound.ErrPushback, rebound.ErrNotRetryable, rebound.ErrCommitted,
// rebound.ErrDeadline, or the context's error).
type Error struct {
	// Err is the last attempt's status error.
	Err error
	// Attempts is the number of attempts made, hedges included.
	Attempts int
	// Reason says why no further attempt was made.
	Reason error
}

// Error returns the status error's text followed by the retry summary.
func (e *Error) Error() string {
	return a6.ErrorText("grpcretry", e.Err, e.Attempts, e.Reason)
}

// GRPCStatus returns the last attempt's status.
func (e *Error) GRPCStatus() *status.Status { return status.Convert(e.Err) }

// Unwrap returns the last attempt's error and the reason.
func (e *Error) Unwrap() []error {
	if e.Reason == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Reason}
}
