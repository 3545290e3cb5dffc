package httpretry

import (
	"errors"
	"net/http"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/observe"
)

// whyNotReplayable is why a request was committed, for the "committed"
// event, when its body cannot be replayed; a server hint beyond the cap
// gives its own (statusError.why).
const whyNotReplayable = "request body cannot be replayed"

// whyResponse is why a hedged request committed to an attempt, for the
// "committed" event: its response came first.
const whyResponse = "response received"

// outcome describes how a request or an attempt ended: with resp, or
// with err (a statusError carries its response).
func outcome(resp *http.Response, err error) observe.Outcome {
	if err == nil {
		return observe.Outcome{HTTPStatus: resp.StatusCode, Failed: resp.StatusCode >= 400}
	}
	o := observe.Outcome{Err: err, Failed: true}
	var se *statusError
	if errors.As(err, &se) {
		o.HTTPStatus = se.resp.StatusCode
	}
	return o
}

// endAttempt ends the span of an attempt, when there is one. lost says
// another attempt won the request.
func endAttempt(as *observe.AttemptSpan, resp *http.Response, err error, lost bool) {
	if as == nil {
		return
	}
	if se, ok := err.(*statusError); ok && se.overCap > 0 {
		as.Committed(se.why())
	}
	as.End(outcome(resp, err), rebound.Classify(err), lost)
}

// endCall ends the span of a request with RoundTrip's result, when there
// is one.
func endCall(s *observe.CallSpan, resp *http.Response, err error) {
	if s != nil {
		s.End(outcome(resp, err))
	}
}
