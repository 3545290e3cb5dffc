package engine

import (
	"errors"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/serviceconfig"
)

// testMajor is a Major for the engine's own tests: its errors are
// statusError.
type testMajor struct{}

type statusError struct {
	code serviceconfig.Code
	err  error
}

func (e *statusError) Error() string { return e.code.String() + ": " + e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

func (testMajor) Code(err error) serviceconfig.Code {
	var se *statusError
	if errors.As(err, &se) {
		return se.code
	}
	return serviceconfig.Unknown
}

func (testMajor) RetryDelay(error) (time.Duration, bool) { return 0, false }

func (testMajor) Error(code serviceconfig.Code, err error) error {
	return &statusError{code: code, err: err}
}

func (testMajor) GaveUp(re *rebound.Error) error { return re }
