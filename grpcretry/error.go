package grpcretry

import (
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/errtext"
)

// callError is the error of a call that a retry or hedging policy governed
// and that did not succeed. It is a gRPC status error whose status is the
// last attempt's, unchanged: status.Code, status.Convert and
// status.FromError see it. Its text adds why retrying stopped, and it
// unwraps to the [rebound.Error] that says so, which errors.As finds (the
// number of attempts, the reason) and through which errors.Is sees the
// reason (rebound.ErrAttemptsExhausted, rebound.ErrThrottled, ...) and the
// last attempt's status error.
type callError struct{ re *rebound.Error }

func newCallError(last error, attempts int, reason error) *callError {
	return &callError{&rebound.Error{Err: last, Attempts: attempts, Reason: reason}}
}

// Error returns why retrying stopped and the last attempt's status, like
// "grpcretry: gave up after 3 attempts (attempts exhausted): rpc error:
// code = Unavailable desc = busy".
func (e *callError) Error() string {
	return errtext.GaveUp("grpcretry", e.re.Attempts, e.re.Reason, e.re.Err)
}

// GRPCStatus returns the last attempt's status.
func (e *callError) GRPCStatus() *status.Status { return status.Convert(e.re.Err) }

// Unwrap returns the rebound.Error.
func (e *callError) Unwrap() error { return e.re }
