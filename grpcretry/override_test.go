package grpcretry_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/internal/stretch"
	"github.com/rebound-go/rebound/serviceconfig"
)

// syncBuffer is a log destination safe for the concurrent writes of a
// client's calls.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func debugLogger(w *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestOverride(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      func(t testing.TB) *serviceconfig.Config
		fail     int // the first fail attempts fail with code
		code     codes.Code
		o        rebound.Override
		trusted  bool
		attempts int
		ok       bool
		clamped  bool
	}{
		{"fewer attempts", func(t testing.TB) *serviceconfig.Config { return retryConfig(t, 4, `"UNAVAILABLE"`, "") },
			1 << 30, codes.Unavailable, rebound.Override{MaxAttempts: 2}, false, 2, false, false},
		{"more attempts clamped", func(t testing.TB) *serviceconfig.Config { return retryConfig(t, 3, `"UNAVAILABLE"`, "") },
			1 << 30, codes.Unavailable, rebound.Override{MaxAttempts: 5}, false, 3, false, true},
		{"more attempts trusted", func(t testing.TB) *serviceconfig.Config { return retryConfig(t, 3, `"UNAVAILABLE"`, "") },
			1 << 30, codes.Unavailable, rebound.Override{MaxAttempts: 5}, true, 5, false, false},
		{"client cap holds", func(t testing.TB) *serviceconfig.Config { return retryConfig(t, 3, `"UNAVAILABLE"`, "") },
			1 << 30, codes.Unavailable, rebound.Override{MaxAttempts: 9}, true, 5, false, false},
		{"codes intersected", func(t testing.TB) *serviceconfig.Config { return retryConfig(t, 3, `"UNAVAILABLE"`, "") },
			1, codes.Unavailable, rebound.Override{RetryableCodes: []int{int(codes.Unavailable), int(codes.Internal)}}, false, 2, true, true},
		{"code not in config clamped", func(t testing.TB) *serviceconfig.Config { return retryConfig(t, 3, `"UNAVAILABLE"`, "") },
			1, codes.Internal, rebound.Override{RetryableCodes: []int{int(codes.Internal)}}, false, 1, false, true},
		{"code not in config trusted", func(t testing.TB) *serviceconfig.Config { return retryConfig(t, 3, `"UNAVAILABLE"`, "") },
			1, codes.Internal, rebound.Override{RetryableCodes: []int{int(codes.Internal)}}, true, 2, true, false},
		{"no codes", func(t testing.TB) *serviceconfig.Config { return retryConfig(t, 3, `"UNAVAILABLE"`, "") },
			1, codes.Unavailable, rebound.Override{RetryableCodes: []int{}}, false, 1, false, false},
		{"disable", func(t testing.TB) *serviceconfig.Config { return retryConfig(t, 3, `"UNAVAILABLE"`, "") },
			1, codes.Unavailable, rebound.Override{Disable: true, MaxAttempts: 3}, true, 1, false, false},
		{"no policy clamped", func(testing.TB) *serviceconfig.Config { return nil },
			1, codes.Unavailable, rebound.Override{MaxAttempts: 3, RetryableCodes: []int{int(codes.Unavailable)}}, false, 1, false, true},
		{"no policy trusted", func(testing.TB) *serviceconfig.Config { return nil },
			2, codes.Unavailable, rebound.Override{MaxAttempts: 3, RetryableCodes: []int{int(codes.Unavailable)}}, true, 3, true, false},
		{"hedging fewer attempts", func(t testing.TB) *serviceconfig.Config {
			cfg, err := serviceconfig.Parse(fmt.Appendf(nil, `{"methodConfig":[{"name":[{"service":%q}],
				"hedgingPolicy":{"maxAttempts":4,"hedgingDelay":"0s","nonFatalStatusCodes":["UNAVAILABLE"]}}]}`, grpctest.Service))
			if err != nil {
				t.Fatal(err)
			}
			return cfg
		}, 1 << 30, codes.Unavailable, rebound.Override{MaxAttempts: 2}, false, 2, false, false},
		{"hedging disable", func(t testing.TB) *serviceconfig.Config {
			cfg, err := serviceconfig.Parse(fmt.Appendf(nil, `{"methodConfig":[{"name":[{"service":%q}],
				"hedgingPolicy":{"maxAttempts":4,"hedgingDelay":"0s","nonFatalStatusCodes":["UNAVAILABLE"]}}]}`, grpctest.Service))
			if err != nil {
				t.Fatal(err)
			}
			return cfg
		}, 1 << 30, codes.Unavailable, rebound.Override{Disable: true}, false, 1, false, false},
		{"longer timeout clamped", func(t testing.TB) *serviceconfig.Config {
			cfg, err := serviceconfig.Parse(fmt.Appendf(nil, `{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
				"maxAttempts":2,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
				"retryableStatusCodes":["UNAVAILABLE"],"perAttemptRecvTimeout":"1s"}}]}`, grpctest.Service))
			if err != nil {
				t.Fatal(err)
			}
			return cfg
		}, 1, codes.Unavailable, rebound.Override{PerAttemptTimeout: 2 * time.Second}, false, 2, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := grpctest.Start(t, failFirst(tc.fail, tc.code))
			var logs syncBuffer
			opts := []grpcretry.Option{grpcretry.WithLogger(debugLogger(&logs))}
			if tc.trusted {
				opts = append(opts, grpcretry.WithTrustedOverrides())
			}
			tc2, _ := client(t, srv, tc.cfg(t), opts...)
			var n int
			_, err := tc2.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.Override(tc.o), grpcretry.CountAttempts(&n))
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok %v", err, tc.ok)
			}
			if got := srv.Count(grpctest.UnaryCall); got != tc.attempts || n != tc.attempts {
				t.Fatalf("%d attempts (server saw %d), want %d", n, got, tc.attempts)
			}
			if got := strings.Contains(logs.String(), "override clamped"); got != tc.clamped {
				t.Fatalf("clamp logged %v, want %v; logs:\n%s", got, tc.clamped, logs.String())
			}
		})
	}
}

func TestOverrideStream(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(int, *testpb.StreamingOutputCallRequest, grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		return status.Error(codes.Unavailable, "busy")
	}})
	tc, _ := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
	st, err := tc.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{}, grpcretry.Override(rebound.Override{MaxAttempts: 2}))
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unavailable || srv.Count(grpctest.StreamingOutputCall) != 2 {
		t.Fatalf("err %v after %d attempts, want UNAVAILABLE after 2", err, srv.Count(grpctest.StreamingOutputCall))
	}
}

// TestOverrideStripped: grpc-go, and the interceptors after rebound's, do
// not see the Override option.
func TestOverrideStripped(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{})
	c, err := grpcretry.New(retryConfig(t, 3, `"UNAVAILABLE"`, ""))
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	inner := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		for _, o := range opts {
			seen = append(seen, fmt.Sprintf("%T", o))
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	tc := testpb.NewTestServiceClient(srv.Dial(t, append(c.DialOptions(), grpc.WithChainUnaryInterceptor(inner))...))
	if _, err := tc.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.Override(rebound.Override{MaxAttempts: 2}), grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
	for _, s := range seen {
		if strings.Contains(s, "override") {
			t.Fatalf("the next interceptor saw %s among %v", s, seen)
		}
	}
	if len(seen) == 0 {
		t.Fatal("the next interceptor saw no options")
	}
}

func TestOverrideInvalid(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{})
	tc, _ := client(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
	_, err := tc.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.Override(rebound.Override{MaxAttempts: -1}))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "Override.MaxAttempts") {
		t.Fatalf("err %v, want InvalidArgument naming Override.MaxAttempts", err)
	}
	if srv.Count(grpctest.UnaryCall) != 0 {
		t.Fatal("an invalid override reached the server")
	}
}

func TestOverridePerAttemptTimeout(t *testing.T) {
	t.Parallel()
	stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(d time.Duration) error {
		srv := grpctest.Start(t, hangFirst(1, nil))
		tc, c, _ := statsClient(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
		var n int
		_, err := tc.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.Override(rebound.Override{PerAttemptTimeout: d}), grpcretry.CountAttempts(&n))
		if cut := c.Stats()[grpctest.UnaryCall].AttemptTimeouts; (err != nil || n > 2) && allCut(err, n, cut) {
			return tooSlow(fmt.Sprint(err), n, 2, cut)
		}
		if err != nil || n != 2 {
			t.Fatalf("err %v after %d attempts, want success after 2", err, n)
		}
		return nil
	})
}
