package connectretry

import (
	"errors"
	"io"

	"connectrpc.com/connect"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/observe"
)

// whyResponse is why a hedged call committed to an attempt, for the
// "committed" event: its response arrived first.
const whyResponse = "response received"

// outcome describes how a call or an attempt that ended with err ended
// (nil or io.EOF for success). rpc.response.status_code is connect's code
// name ("unavailable"), set only for an error, as connect has no code for
// success.
func outcome(err error) observe.Outcome {
	if err == nil || errors.Is(err, io.EOF) {
		return observe.Outcome{}
	}
	return observe.Outcome{Err: err, Code: connect.CodeOf(err).String(), Failed: true}
}

// endAttempt ends the span of an attempt that ended with err, when there
// is one. lost says another attempt won the call.
func endAttempt(as *observe.AttemptSpan, err error, lost bool) {
	if as != nil {
		as.End(outcome(err), rebound.Classify(err), lost)
	}
}

// endCall ends the span of a call that ended with err, when there is one.
func endCall(s *observe.CallSpan, err error) {
	if s != nil {
		s.End(outcome(err))
	}
}
