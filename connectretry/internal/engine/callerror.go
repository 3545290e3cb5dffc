package engine

import (
	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/errtext"
)

// CallError is the error of a call that a retry or hedging policy governed
// and that failed, in the words grpcretry and httpretry use too:
// "connectretry: gave up after 3 attempts (attempts exhausted):
// unavailable: busy". It unwraps to Last, the major's connect error of the
// last attempt, which unwraps to RE, the rebound.Error that says why
// retrying stopped. A connect error cannot carry that text itself: its
// text begins with its code, and its message is what a handler that
// returns it would send on the wire.
type CallError struct {
	Last error
	RE   *rebound.Error
}

// Error returns why retrying stopped and the last attempt's error.
func (e *CallError) Error() string {
	return errtext.GaveUp("connectretry", e.RE.Attempts, e.RE.Reason, e.Last)
}

// Unwrap returns the last attempt's connect error.
func (e *CallError) Unwrap() error { return e.Last }
