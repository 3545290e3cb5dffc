package grpcretry_test

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/grpctest"
)

// callBudgets are a ratio budget that allows one retry per call (and no
// floor, so that a retry needs its call counted) and a concurrency budget
// that allows as many retries in flight as calls, combined.
func callBudgets(t *testing.T) (*rebound.RatioBudget, *rebound.ConcurrencyBudget, rebound.Budget) {
	t.Helper()
	ratio, err := rebound.NewRatioBudget(rebound.RatioBudgetConfig{Ratio: 1, TTL: 10 * time.Second, Clock: clocktest.New()})
	if err != nil {
		t.Fatal(err)
	}
	conc, err := rebound.NewConcurrencyBudget(rebound.ConcurrencyBudgetConfig{Percent: 100})
	if err != nil {
		t.Fatal(err)
	}
	return ratio, conc, rebound.AllBudgets(ratio, conc)
}

// wantInFlight checks the concurrency budget's calls and retries in flight.
func wantInFlight(t *testing.T, when string, conc *rebound.ConcurrencyBudget, calls, retries int64) {
	t.Helper()
	if c, r := conc.InFlight(); c != calls || r != retries {
		t.Fatalf("%s: %d calls %d retries in flight, want %d %d", when, c, r, calls, retries)
	}
}

// TestStreamRetryCountsCalls: a retried server stream is counted as a call
// by the budgets that count calls, so a ratio budget without a floor lets
// it retry, and its retry is in flight from its admission until the call
// ends.
func TestStreamRetryCountsCalls(t *testing.T) {
	release := make(chan struct{})
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(n int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		if n == 1 {
			return status.Error(codes.Unavailable, "first attempt fails")
		}
		if err := s.Send(outReply("ok")); err != nil {
			return err
		}
		select {
		case <-release:
		case <-s.Context().Done():
		}
		return nil
	}})
	ratio, conc, b := callBudgets(t)
	c, _ := streamClient(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""), clocktest.NewAuto(), grpcretry.WithBudget(b))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int
	st, err := c.StreamingOutputCall(ctx, outMsg("req"), grpcretry.CountAttempts(&n))
	if err != nil {
		t.Fatal(err)
	}
	var r testpb.StreamingOutputCallResponse
	if err := st.RecvMsg(&r); err != nil {
		t.Fatalf("first message: %v, want the retry's", err)
	}
	wantInFlight(t, "streaming from the retry", conc, 1, 1)
	close(release)
	if err := st.RecvMsg(&r); err != io.EOF {
		t.Fatalf("end: %v, want io.EOF", err)
	}
	if n != 2 || srv.Count(grpctest.StreamingOutputCall) != 2 {
		t.Fatalf("Attempts %d, server %d; want 2", n, srv.Count(grpctest.StreamingOutputCall))
	}
	wantInFlight(t, "after the call", conc, 0, 0)
	if calls, retries := ratio.Counts(); calls != 1 || retries != 1 {
		t.Fatalf("ratio budget counted %d calls %d retries, want 1 1", calls, retries)
	}
}

// TestHedgedStreamCountsCalls: a hedged server stream is counted as a
// call; a hedge that fails or loses ends at once, and a hedge that wins is
// in flight until the call ends.
func TestHedgedStreamCountsCalls(t *testing.T) {
	for _, tc := range []struct {
		name string
		// winner is the attempt that answers; the other waits until
		// cancelled. Attempt 1 fails at once when winner is 0.
		winner int
		// streaming is the retries in flight while the winner streams.
		streaming int64
	}{
		{"hedge wins", 2, 1},
		{"first attempt wins", 1, 0},
		{"first attempt fails", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			firstSeen, hedgeSent := make(chan struct{}), make(chan struct{})
			release := make(chan struct{})
			srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(n int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
				if n == 1 {
					close(firstSeen)
				}
				switch {
				case n == 1 && tc.winner == 0:
					return status.Error(codes.Unavailable, "first attempt fails")
				case n == 2:
					close(hedgeSent)
				}
				if lost := (tc.winner == 1 && n == 2) || (tc.winner == 2 && n == 1); lost {
					<-s.Context().Done()
					return s.Context().Err()
				}
				if n == 1 {
					select { // answer once the hedge is out
					case <-hedgeSent:
					case <-s.Context().Done():
						return s.Context().Err()
					}
				}
				if err := s.Send(outReply("ok")); err != nil {
					return err
				}
				select {
				case <-release:
				case <-s.Context().Done():
				}
				return nil
			}})
			ratio, conc, b := callBudgets(t)
			clk := clocktest.New()
			c, _ := streamClient(t, srv, streamHedgeConfig(t, 2, "10s", `"UNAVAILABLE"`, ""), clk, grpcretry.WithBudget(b))
			// A regression would wait for the deadline: fail instead of
			// hanging.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var n int
			st, err := c.StreamingOutputCall(ctx, outMsg("req"), grpcretry.CountAttempts(&n))
			if err != nil {
				t.Fatal(err)
			}
			if tc.winner != 0 {
				// The hedge goes out once the server has the first
				// attempt, so that the server numbers them as sent.
				<-firstSeen
				if !clk.WaitCreated(1) {
					t.Fatal("no hedging timer")
				}
				clk.Advance(10 * time.Second)
			}
			var r testpb.StreamingOutputCallResponse
			if err := st.RecvMsg(&r); err != nil {
				t.Fatalf("first message: %v", err)
			}
			wantInFlight(t, "streaming from the winner", conc, 1, tc.streaming)
			close(release)
			got, err := recvBodies(st)
			if err != io.EOF || !slices.Equal(got, []string(nil)) {
				t.Fatalf("end: %v %v, want io.EOF", got, err)
			}
			if n != 2 {
				t.Fatalf("Attempts %d, want 2", n)
			}
			wantInFlight(t, "after the call", conc, 0, 0)
			if calls, retries := ratio.Counts(); calls != 1 || retries != 1 {
				t.Fatalf("ratio budget counted %d calls %d retries, want 1 1", calls, retries)
			}
		})
	}
}
