package connectretry

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rebound-go/rebound"
)

// TestRateFeedback: what an answer tells the rate limit. The server's wait
// is the pushback delay, else RetryInfo's retry_delay.
func TestRateFeedback(t *testing.T) {
	withInfo := connect.NewError(connect.CodeResourceExhausted, errors.New("quota"))
	d, err := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	withInfo.AddDetail(d)
	pushback := connect.NewError(connect.CodeUnavailable, errors.New("x"))
	pushback.Meta().Set("grpc-retry-pushback-ms", "1000")
	for _, c := range []struct {
		name    string
		err     error
		trailer http.Header
		want    rebound.RateFeedback
	}{
		{"ok", nil, nil, rebound.RateFeedback{}},
		{"unavailable", connect.NewError(connect.CodeUnavailable, errors.New("x")), nil, rebound.RateFeedback{}},
		{"resource exhausted", connect.NewError(connect.CodeResourceExhausted, errors.New("x")), nil, rebound.RateFeedback{SlowDown: true}},
		{"RetryInfo", withInfo, nil, rebound.RateFeedback{SlowDown: true, Wait: 5 * time.Second}},
		{"pushback on another code", pushback, nil, rebound.RateFeedback{SlowDown: true, Wait: time.Second}},
		{"pushback in a stream's trailer", nil, http.Header{"Grpc-Retry-Pushback-Ms": {"250"}}, rebound.RateFeedback{SlowDown: true, Wait: 250 * time.Millisecond}},
	} {
		if got := zero.RateFeedback(c.err, streamPushback(c.err, c.trailer)); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
