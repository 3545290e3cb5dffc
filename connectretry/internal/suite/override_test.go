package suite

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/rebound-go/rebound"
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

// debugLogger returns a logger that writes debug records to buf.
func debugLogger(buf *logBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestOverride(t *testing.T) {
	retry3 := func(t testing.TB) *serviceconfig.Config { return retryConfig(t, 3, `"UNAVAILABLE"`, "") }
	for _, tc := range []struct {
		name     string
		cfg      func(t testing.TB) *serviceconfig.Config
		fail     int
		code     code
		o        rebound.Override
		trusted  bool
		attempts int
		ok       bool
		clamped  bool
	}{
		{"fewer attempts", retry3, 1 << 30, serviceconfig.Unavailable, rebound.Override{MaxAttempts: 2}, false, 2, false, false},
		{"more attempts clamped", retry3, 1 << 30, serviceconfig.Unavailable, rebound.Override{MaxAttempts: 5}, false, 3, false, true},
		{"more attempts trusted", retry3, 1 << 30, serviceconfig.Unavailable, rebound.Override{MaxAttempts: 5}, true, 5, false, false},
		{"code not in config clamped", retry3, 1, serviceconfig.Internal, rebound.Override{RetryableCodes: []int{int(serviceconfig.Internal)}}, false, 1, false, true},
		{"code not in config trusted", retry3, 1, serviceconfig.Internal, rebound.Override{RetryableCodes: []int{int(serviceconfig.Internal)}}, true, 2, true, false},
		{"disable", retry3, 1, serviceconfig.Unavailable, rebound.Override{Disable: true}, false, 1, false, false},
		{"no policy trusted", func(testing.TB) *serviceconfig.Config { return nil }, 2, serviceconfig.Unavailable,
			rebound.Override{MaxAttempts: 3, RetryableCodes: []int{int(serviceconfig.Unavailable)}}, true, 3, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachMajor(t, protocol{}, func(t *testing.T, e env) {
				s := e.start(t, failFirst(tc.fail, tc.code))
				var logs logBuffer
				opts := []option{withLogger(debugLogger(&logs))}
				if tc.trusted {
					opts = append(opts, withTrustedOverrides())
				}
				c, _ := e.dialAuto(t, s, tc.cfg(t), opts...)
				_, err := c.unary(e.override(context.Background(), tc.o), "x", nil)
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
		})
	}
}

func TestOverrideServerStream(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		s := e.start(t, handlers{serverStream: func(*call, func(string) error) error {
			return fail(serviceconfig.Unavailable, "down")
		}})
		c, _ := e.dialAuto(t, s, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
		st, err := c.open(e.override(context.Background(), rebound.Override{MaxAttempts: 2}), serverStream, "x", nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = receiveAll(t, st)
		if e.codeOf(err) != serviceconfig.Unavailable || s.count(serverStream) != 2 {
			t.Fatalf("err %v after %d attempts, want unavailable after 2", err, s.count(serverStream))
		}
	})
}

func TestOverrideInvalid(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		s := e.start(t, handlers{})
		c, _ := e.dialAuto(t, s, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
		ctx := e.override(context.Background(), rebound.Override{MaxAttempts: -2})
		_, err := c.unary(ctx, "x", nil)
		if e.codeOf(err) != serviceconfig.InvalidArgument || !strings.Contains(err.Error(), "Override.MaxAttempts") || s.count(unary) != 0 {
			t.Fatalf("err %v with %d attempts, want invalid_argument naming Override.MaxAttempts before any", err, s.count(unary))
		}
		st, err := c.open(ctx, serverStream, "x", nil)
		if err == nil {
			_, err = receiveAll(t, st)
		}
		if e.codeOf(err) != serviceconfig.InvalidArgument || s.count(serverStream) != 0 {
			t.Fatalf("stream: err %v with %d attempts, want invalid_argument before any", err, s.count(serverStream))
		}
	})
}

// The two majors share one context key: a context made by either front
// door's Override (or CountAttempts) works with the other's.
func TestCallSettingsShared(t *testing.T) {
	for _, from := range majors {
		for _, to := range majors {
			e := env{to, to.protocols[0]}
			t.Run(from.name+"→"+to.name, func(t *testing.T) {
				s := e.start(t, failFirst(1<<30, serviceconfig.Unavailable))
				c, _ := e.dialAuto(t, s, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
				var n int
				ctx := from.countAttempts(from.override(context.Background(), rebound.Override{MaxAttempts: 2}), &n)
				_, _ = c.unary(ctx, "x", nil)
				if s.count(unary) != 2 || n != 2 {
					t.Fatalf("%d attempts, counted %d; want 2", s.count(unary), n)
				}
			})
		}
	}
}
