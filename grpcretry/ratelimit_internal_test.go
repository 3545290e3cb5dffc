package grpcretry

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rebound-go/rebound"
)

// TestRateFeedback: what an answer tells the rate limit. The server's wait
// is the pushback delay, else RetryInfo's retry_delay.
func TestRateFeedback(t *testing.T) {
	withInfo, _ := status.New(codes.ResourceExhausted, "quota").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(5 * time.Second)})
	for _, c := range []struct {
		name    string
		err     error
		trailer metadata.MD
		want    rebound.RateFeedback
	}{
		{"ok", nil, nil, rebound.RateFeedback{}},
		{"unavailable", status.Error(codes.Unavailable, "x"), nil, rebound.RateFeedback{}},
		{"resource exhausted", status.Error(codes.ResourceExhausted, "x"), nil, rebound.RateFeedback{SlowDown: true}},
		{"RetryInfo", withInfo.Err(), nil, rebound.RateFeedback{SlowDown: true, Wait: 5 * time.Second}},
		{"pushback wins", withInfo.Err(), metadata.Pairs("grpc-retry-pushback-ms", "250"), rebound.RateFeedback{SlowDown: true, Wait: 250 * time.Millisecond}},
		{"pushback on another code", status.Error(codes.Unavailable, "x"), metadata.Pairs("grpc-retry-pushback-ms", "1000"), rebound.RateFeedback{SlowDown: true, Wait: time.Second}},
		{"pushback stop", status.Error(codes.Unavailable, "x"), metadata.Pairs("grpc-retry-pushback-ms", "-1"), rebound.RateFeedback{SlowDown: true}},
		{"not a status", errors.New("x"), nil, rebound.RateFeedback{}},
	} {
		if got := feedback(c.err, c.trailer); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
