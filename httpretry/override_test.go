package httpretry_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
	"github.com/rebound-go/rebound/internal/stretch"
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
	for _, tc := range []struct {
		name     string
		statuses []int
		o        rebound.Override
		trusted  bool
		attempts int
		code     int // of the response returned
		clamped  bool
	}{
		{"fewer attempts", []int{503}, rebound.Override{MaxAttempts: 2}, false, 2, 503, false},
		{"more attempts clamped", []int{503}, rebound.Override{MaxAttempts: 5}, false, 3, 503, true},
		{"attempts cap trusted", []int{503}, rebound.Override{MaxAttempts: 5}, true, 3, 503, false},
		{"codes intersected", []int{503, 200}, rebound.Override{RetryableCodes: []int{503, 500}}, false, 2, 200, true},
		{"code left out", []int{503, 200}, rebound.Override{RetryableCodes: []int{429}}, false, 1, 503, false},
		{"code not retried clamped", []int{500, 200}, rebound.Override{RetryableCodes: []int{500}}, false, 1, 500, true},
		{"code not retried trusted", []int{500, 200}, rebound.Override{RetryableCodes: []int{500}}, true, 2, 200, false},
		{"disable", []int{503, 200}, rebound.Override{Disable: true}, false, 1, 503, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, script(tc.statuses...))
			var logs logBuffer
			opts := []httpretry.Option{httpretry.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))}
			if tc.trusted {
				opts = append(opts, httpretry.WithTrustedOverrides())
			}
			client, _ := newClient(t, opts...)
			req, _ := http.NewRequestWithContext(httpretry.Override(context.Background(), tc.o), http.MethodGet, srv.URL, nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			if resp.StatusCode != tc.code || srv.attempts() != tc.attempts {
				t.Fatalf("%d after %d attempts, want %d after %d", resp.StatusCode, srv.attempts(), tc.code, tc.attempts)
			}
			if got := strings.Contains(logs.String(), "override clamped"); got != tc.clamped {
				t.Fatalf("clamp logged %v, want %v; logs:\n%s", got, tc.clamped, logs.String())
			}
		})
	}
}

func TestOverridePerAttemptTimeout(t *testing.T) {
	stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(d time.Duration) error {
		srv := newServer(t, hangFirst(1))
		client, _ := newClient(t)
		req, _ := http.NewRequestWithContext(httpretry.Override(context.Background(), rebound.Override{PerAttemptTimeout: d}), http.MethodGet, srv.URL, nil)
		resp, err := client.Do(req)
		var got string
		if err == nil {
			got = readAll(t, resp) // before any return: no connection is left behind
		}
		n, cut := attempts(client, http.MethodGet, srv)
		if !allCut(err, n, cut) {
			t.Fatalf("%v after %d attempts, %d cut: every attempt but one that answered must have been cut", err, n, cut)
		}
		if err != nil || n > 2 {
			return tooSlow(fmt.Sprint(err), n, 2, cut)
		}
		if got != "attempt 2" || srv.attempts() != 2 {
			t.Fatalf("got %q after %d attempts, want attempt 2", got, srv.attempts())
		}
		return nil
	})
}

func TestOverrideInvalid(t *testing.T) {
	srv := newServer(t, script(200))
	client, _ := newClient(t)
	req, _ := http.NewRequestWithContext(httpretry.Override(context.Background(), rebound.Override{PerAttemptTimeout: -1}), http.MethodGet, srv.URL, nil)
	_, err := client.Do(req)
	if err == nil || !strings.Contains(err.Error(), "Override.PerAttemptTimeout") || srv.attempts() != 0 {
		t.Fatalf("err %v with %d attempts, want an error naming Override.PerAttemptTimeout before any", err, srv.attempts())
	}
}

func TestOverrideHedged(t *testing.T) {
	for _, tc := range []struct {
		name     string
		o        rebound.Override
		attempts int
	}{
		{"fewer hedges", rebound.Override{MaxAttempts: 2}, 2},
		{"more hedges clamped", rebound.Override{MaxAttempts: 9}, 3},
		{"disable", rebound.Override{Disable: true}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, script(503))
			client, _ := newClient(t, httpretry.WithHedging(0, 3))
			req, _ := http.NewRequestWithContext(httpretry.Override(context.Background(), tc.o), http.MethodGet, srv.URL, nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			if got := srv.attempts(); got != tc.attempts {
				t.Fatalf("server saw %d attempts, want %d", got, tc.attempts)
			}
		})
	}
}
