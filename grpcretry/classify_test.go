package grpcretry_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// retryAll makes every failure retryable.
func retryAll(_ grpcretry.Failure, v rebound.RetryInfo) rebound.RetryInfo {
	v.Safety = rebound.SafetyYes
	v.Committed, v.ServerStop = false, false // attempts to undo: ignored
	return v
}

func TestClassifierGuardrails(t *testing.T) {
	for _, tc := range []struct {
		name     string
		handler  func(ctx context.Context) error
		classify func(grpcretry.Failure, rebound.RetryInfo) rebound.RetryInfo
		attempts int
		reason   error
	}{
		{name: "promotes a code the policy does not list",
			handler: func(context.Context) error { return status.Error(codes.Internal, "oops") }, classify: retryAll, attempts: 3, reason: rebound.ErrAttemptsExhausted},
		{name: "cannot undo a commit",
			handler: func(ctx context.Context) error {
				_ = grpc.SendHeader(ctx, metadata.Pairs("x-started", "1"))
				return status.Error(codes.Unavailable, "after headers")
			}, classify: retryAll, attempts: 1, reason: rebound.ErrCommitted},
		{name: "cannot undo pushback stop",
			handler: func(ctx context.Context) error {
				_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", "-1"))
				return status.Error(codes.Unavailable, "stop")
			}, classify: retryAll, attempts: 1, reason: rebound.ErrPushback},
		{name: "demotes a retryable code",
			handler: func(ctx context.Context) error {
				_ = grpc.SetTrailer(ctx, metadata.Pairs("x-permanent", "1"))
				return status.Error(codes.Unavailable, "down for good")
			}, classify: func(f grpcretry.Failure, v rebound.RetryInfo) rebound.RetryInfo {
				if len(f.Trailer.Get("x-permanent")) > 0 && f.Status.Code() == codes.Unavailable && f.Method == grpctest.UnaryCall {
					v.Safety = rebound.SafetyNo
				}
				return v
			}, attempts: 1, reason: rebound.ErrNotRetryable},
		{name: "a class with its own limit",
			handler: func(context.Context) error { return status.Error(codes.Unavailable, "busy") }, classify: func(f grpcretry.Failure, v rebound.RetryInfo) rebound.RetryInfo {
				v.Class, v.ClassAttempts = "busy", 2
				return v
			}, attempts: 2, reason: rebound.ErrAttemptsExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := grpctest.Start(t, grpctest.Handlers{Unary: func(ctx context.Context, _ int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
				return nil, tc.handler(ctx)
			}})
			c, _ := client(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithClassifier(tc.classify))
			_, err := c.UnaryCall(context.Background(), grpctest.Request("x"))
			if got := srv.Count(grpctest.UnaryCall); got != tc.attempts || !errors.Is(err, tc.reason) {
				t.Fatalf("%d attempts, err %v; want %d, reason %v", got, err, tc.attempts, tc.reason)
			}
		})
	}
}

// TestClassifierNoPolicy: a method no retry or hedging policy governs is
// never retried, whatever the classifier would say: it is not asked.
func TestClassifierNoPolicy(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1<<30, codes.Unavailable))
	cfg, err := serviceconfig.Parse([]byte(`{"methodConfig":[{"name":[{"service":"other.Service"}],"retryPolicy":{
		"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := client(t, srv, cfg, grpcretry.WithClassifier(func(f grpcretry.Failure, v rebound.RetryInfo) rebound.RetryInfo {
		t.Errorf("classifier asked about %s, which no policy governs", f.Method)
		return retryAll(f, v)
	}))
	var n int
	_, err = c.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n))
	if got := srv.Count(grpctest.UnaryCall); got != 1 || n != 1 || status.Code(err) != codes.Unavailable {
		t.Fatalf("%d attempts (Attempts %d), err %v; want 1, UNAVAILABLE", got, n, err)
	}
}

// TestClassifierLocal: failures marked local leave the A6 throttle alone:
// with maxTokens 2, two counted failures would stop retries.
func TestClassifierLocal(t *testing.T) {
	for _, local := range []bool{false, true} {
		srv := grpctest.Start(t, failFirst(1<<30, codes.Unavailable))
		cfg := retryConfig(t, 2, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":2,"tokenRatio":0.1}`)
		c, _ := client(t, srv, cfg, grpcretry.WithServerName(t.Name()), grpcretry.WithClassifier(func(f grpcretry.Failure, v rebound.RetryInfo) rebound.RetryInfo {
			v.Local = local
			return v
		}))
		for range 3 {
			_, _ = c.UnaryCall(context.Background(), grpctest.Request("x"))
		}
		// Counted: the first failure leaves 1 token, not above half of
		// 2, so no call retries after it: 3 attempts. Local: 6.
		want := 3
		if local {
			want = 6
		}
		if got := srv.Count(grpctest.UnaryCall); got != want {
			t.Fatalf("local %v: %d attempts, want %d", local, got, want)
		}
	}
}

// TestClassifierHedge: a hedged call's failures go through the classifier
// too, and a demoted one is fatal.
func TestClassifierHedge(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1<<30, codes.Unavailable))
	var mu sync.Mutex
	var methods []string
	cc, _ := hedgeClient(t, srv, hedgeConfig(t, 3, "10s", ""), nil, grpcretry.WithClassifier(func(f grpcretry.Failure, v rebound.RetryInfo) rebound.RetryInfo {
		mu.Lock()
		methods = append(methods, f.Method)
		mu.Unlock()
		v.Safety = rebound.SafetyNo
		return v
	}))
	err := cc.Invoke(context.Background(), grpctest.UnaryCall, grpctest.Request("x"), new(testpb.SimpleResponse))
	if !errors.Is(err, rebound.ErrNotRetryable) || srv.Count(grpctest.UnaryCall) != 1 || len(methods) != 1 || methods[0] != grpctest.UnaryCall {
		t.Fatalf("err %v after %d attempts, classifier saw %v; want not retryable after 1", err, srv.Count(grpctest.UnaryCall), methods)
	}
}

// TestClassifierStream: a server stream's failed attempts go through
// RetryInfo and the classifier too, with the trailer the server set.
func TestClassifierStream(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(n int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		switch n {
		case 1:
			return withRetryInfo(t, codes.Unavailable, durationpb.New(2*time.Second))
		case 2:
			s.SetTrailer(metadata.Pairs("x-retry", "yes"))
			return status.Error(codes.Internal, "not in the policy")
		}
		return s.Send(outReply("done"))
	}})
	var mu sync.Mutex
	var trailers []string
	c, clk := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""), grpcretry.WithClassifier(func(f grpcretry.Failure, v rebound.RetryInfo) rebound.RetryInfo {
		mu.Lock()
		trailers = append(trailers, strings.Join(f.Trailer.Get("x-retry"), ","))
		mu.Unlock()
		if len(f.Trailer.Get("x-retry")) > 0 {
			v.Safety = rebound.SafetyYes
		}
		return v
	}))
	st, err := c.StreamingOutputCall(context.Background(), outMsg("req"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := recvBodies(st)
	if err != io.EOF || !slices.Equal(got, []string{"done"}) {
		t.Fatalf("got %v, %v; want [done], io.EOF", got, err)
	}
	// 2s from RetryInfo, then the backoff's 100ms at 0.5.
	if s := clk.Sleeps(); !slices.Equal(s, []time.Duration{2 * time.Second, 100 * time.Millisecond}) || !slices.Equal(trailers, []string{"", "yes"}) {
		t.Fatalf("waits %v, classifier saw trailers %q", s, trailers)
	}
}
