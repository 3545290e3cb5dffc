package grpcretry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/grpctest"
)

// Against a server that refuses everything, the adaptive throttle lets
// through only while (requests − 2·accepts)/(requests+1) stays below the
// random draw (0.5 here): the first two attempts, then nothing. The third
// attempt of the first call is kept home and ends the call with
// ErrThrottled; every later call fails at once, locally.
func TestAdaptiveThrottle(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1000, codes.Unavailable))
	tc, _ := client(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""),
		grpcretry.WithServerName(fmt.Sprint("adaptive-", time.Now().UnixNano())),
		grpcretry.WithAdaptiveThrottle(rebound.AdaptiveThrottleConfig{}))
	for i := range 10 {
		_, err := tc.UnaryCall(context.Background(), grpctest.Request("x"))
		if status.Code(err) != codes.Unavailable || !errors.Is(err, rebound.ErrThrottled) {
			t.Fatalf("call %d: %v, want UNAVAILABLE ending with ErrThrottled", i, err)
		}
		if i > 0 && !errors.Is(err, rebound.ErrRejectedLocally) {
			t.Fatalf("call %d: %v, want a local rejection", i, err)
		}
	}
	if n := srv.Count(grpctest.UnaryCall); n != 2 {
		t.Fatalf("server saw %d attempts, want 2", n)
	}
	// Streams ask the same throttle.
	st, err := tc.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
	if err == nil {
		_, err = st.Recv()
	}
	if !errors.Is(err, rebound.ErrRejectedLocally) {
		t.Fatalf("stream: %v, want a local rejection", err)
	}
	if n := srv.Count(grpctest.StreamingOutputCall); n != 0 {
		t.Fatalf("server saw %d streams, want 0", n)
	}
}

func TestAdaptiveThrottleInvalid(t *testing.T) {
	if _, err := grpcretry.New(nil, grpcretry.WithAdaptiveThrottle(rebound.AdaptiveThrottleConfig{K: 0.5})); err == nil {
		t.Fatal("K 0.5 accepted")
	}
}
