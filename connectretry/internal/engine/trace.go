package engine

import (
	"errors"
	"io"
	"strconv"
	"strings"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/observe"
	"github.com/rebound-go/rebound/serviceconfig"
)

// whyResponse is why a hedged call committed to an attempt, for the
// "committed" event: its response arrived first.
const whyResponse = "response received"

// codeNames are connect's names of the codes, as its Code.String gives
// them: gRPC's in lower case, but "canceled".
var codeNames = func() [serviceconfig.Unauthenticated + 1]string {
	var names [serviceconfig.Unauthenticated + 1]string
	for c := range names {
		names[c] = strings.ToLower(serviceconfig.Code(c).String())
	}
	names[serviceconfig.Cancelled] = "canceled"
	return names
}()

// codeName returns connect's name of c.
func codeName(c serviceconfig.Code) string {
	if c != serviceconfig.OK && c <= serviceconfig.Unauthenticated {
		return codeNames[c]
	}
	return "code_" + strconv.FormatUint(uint64(c), 10)
}

// outcome describes how a call or an attempt that ended with err ended
// (nil or io.EOF for success). rpc.response.status_code is connect's code
// name ("unavailable"), set only for an error, as connect has no code for
// success.
func (i *Interceptor) outcome(err error) observe.Outcome {
	if err == nil || errors.Is(err, io.EOF) {
		return observe.Outcome{}
	}
	return observe.Outcome{Err: err, Code: codeName(i.major.Code(err)), Failed: true}
}

// endAttempt ends the span of an attempt that ended with err, when there
// is one. lost says another attempt won the call.
func (i *Interceptor) endAttempt(as *observe.AttemptSpan, err error, lost bool) {
	if as != nil {
		as.End(i.outcome(err), rebound.Classify(err), lost)
	}
}

// endCall ends the span of a call that ended with err, when there is one.
func (i *Interceptor) endCall(s *observe.CallSpan, err error) {
	if s != nil {
		s.End(i.outcome(err))
	}
}
