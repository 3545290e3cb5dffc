package connectretry_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/serviceconfig"
)

// logBuffer is a log destination safe for concurrent writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestOverride(t *testing.T) {
	retry3 := func(t testing.TB) *serviceconfig.Config { return retryConfig(t, 3, `"UNAVAILABLE"`, "") }
	for _, tc := range []struct {
		name     string
		cfg      func(t testing.TB) *serviceconfig.Config
		fail     int
		code     connect.Code
		o        rebound.Override
		trusted  bool
		attempts int
		ok       bool
		clamped  bool
	}{
		{"fewer attempts", retry3, 1 << 30, connect.CodeUnavailable, rebound.Override{MaxAttempts: 2}, false, 2, false, false},
		{"more attempts clamped", retry3, 1 << 30, connect.CodeUnavailable, rebound.Override{MaxAttempts: 5}, false, 3, false, true},
		{"more attempts trusted", retry3, 1 << 30, connect.CodeUnavailable, rebound.Override{MaxAttempts: 5}, true, 5, false, false},
		{"code not in config clamped", retry3, 1, connect.CodeInternal, rebound.Override{RetryableCodes: []int{int(connect.CodeInternal)}}, false, 1, false, true},
		{"code not in config trusted", retry3, 1, connect.CodeInternal, rebound.Override{RetryableCodes: []int{int(connect.CodeInternal)}}, true, 2, true, false},
		{"disable", retry3, 1, connect.CodeUnavailable, rebound.Override{Disable: true}, false, 1, false, false},
		{"no policy trusted", func(testing.TB) *serviceconfig.Config { return nil }, 2, connect.CodeUnavailable,
			rebound.Override{MaxAttempts: 3, RetryableCodes: []int{int(connect.CodeUnavailable)}}, true, 3, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, failFirst(tc.fail, tc.code), false)
			var logs logBuffer
			opts := []connectretry.Option{connectretry.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))}
			if tc.trusted {
				opts = append(opts, connectretry.WithTrustedOverrides())
			}
			c, _ := dial(t, s, connectProtocol, tc.cfg(t), opts...)
			_, err := call(connectretry.Override(context.Background(), tc.o), c.unary, "x")
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok %v", err, tc.ok)
			}
			if got := s.count(unary); got != tc.attempts {
				t.Fatalf("server saw %d attempts, want %d", got, tc.attempts)
			}
			if got := strings.Contains(logs.String(), "override clamped"); got != tc.clamped {
				t.Fatalf("clamp logged %v, want %v; logs:\n%s", got, tc.clamped, logs.String())
			}
		})
	}
}

func TestOverrideServerStream(t *testing.T) {
	s := startServer(t, handlers{serverStream: func(context.Context, int, *request, *connect.ServerStream[msg]) error {
		return connect.NewError(connect.CodeUnavailable, nil)
	}}, false)
	c, _ := dial(t, s, connectProtocol, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
	ctx := connectretry.Override(context.Background(), rebound.Override{MaxAttempts: 2})
	st, err := c.serverStream.CallServerStream(ctx, connect.NewRequest(wrapperspb.String("x")))
	if err != nil {
		t.Fatal(err)
	}
	_, err = receiveAll(t, st)
	if connect.CodeOf(err) != connect.CodeUnavailable || s.count(serverStream) != 2 {
		t.Fatalf("err %v after %d attempts, want unavailable after 2", err, s.count(serverStream))
	}
}

func TestOverrideInvalid(t *testing.T) {
	s := startServer(t, handlers{}, false)
	c, _ := dial(t, s, connectProtocol, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
	_, err := call(connectretry.Override(context.Background(), rebound.Override{MaxAttempts: -2}), c.unary, "x")
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "Override.MaxAttempts") || s.count(unary) != 0 {
		t.Fatalf("err %v with %d attempts, want invalid_argument naming Override.MaxAttempts before any", err, s.count(unary))
	}
}
