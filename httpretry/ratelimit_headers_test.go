package httpretry_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
)

// resetting answers the first request with status and the headers hdr
// (name, value pairs; a value "unix+N" is the fake clock's time plus N
// seconds, as a Unix time), then 200.
func resetting(status int, now func() time.Time, hdr ...string) func(n int, w http.ResponseWriter, r *http.Request) {
	return func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			for i := 0; i+1 < len(hdr); i += 2 {
				v := hdr[i+1]
				if d, ok := cutPrefix(v, "unix+"); ok {
					secs, _ := strconv.Atoi(d)
					v = strconv.FormatInt(now().Add(time.Duration(secs)*time.Second).Unix(), 10)
				}
				w.Header().Set(hdr[i], v)
			}
			w.WriteHeader(status)
			return
		}
		w.WriteHeader(http.StatusOK)
	}
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return "", false
}

func TestRateLimitReset(t *testing.T) {
	// The first backoff is 500ms (jitter 0.5).
	for _, tc := range []struct {
		name     string
		status   int
		hdr      []string
		off      bool
		attempts int
		min, max time.Duration // of the one wait
		final    int
	}{
		{name: "delta seconds", status: 503, hdr: []string{"X-RateLimit-Reset", "3"}, attempts: 2, min: 3 * time.Second, max: 3 * time.Second, final: 200},
		{name: "RateLimit-Reset", status: 429, hdr: []string{"RateLimit-Reset", "2"}, attempts: 2, min: 2 * time.Second, max: 2 * time.Second, final: 200},
		{name: "RateLimit-Reset first", status: 429, hdr: []string{"RateLimit-Reset", "2", "X-RateLimit-Reset", "7"}, attempts: 2, min: 2 * time.Second, max: 2 * time.Second, final: 200},
		{name: "unix time", status: 429, hdr: []string{"X-RateLimit-Reset", "unix+5"}, attempts: 2, min: 4 * time.Second, max: 5 * time.Second, final: 200},
		{name: "a floor under the backoff", status: 503, hdr: []string{"X-RateLimit-Reset", "0"}, attempts: 2, min: 500 * time.Millisecond, max: 500 * time.Millisecond, final: 200},
		{name: "unix time past", status: 503, hdr: []string{"X-RateLimit-Reset", "unix+-5"}, attempts: 2, min: 500 * time.Millisecond, max: 500 * time.Millisecond, final: 200},
		{name: "malformed", status: 503, hdr: []string{"X-RateLimit-Reset", "3.5"}, attempts: 2, min: 500 * time.Millisecond, max: 500 * time.Millisecond, final: 200},
		{name: "Retry-After wins", status: 503, hdr: []string{"Retry-After", "1", "X-RateLimit-Reset", "9"}, attempts: 2, min: time.Second, max: 1500 * time.Millisecond, final: 200},
		{name: "off by default", status: 503, hdr: []string{"X-RateLimit-Reset", "9"}, off: true, attempts: 2, min: 500 * time.Millisecond, max: 500 * time.Millisecond, final: 200},
		{name: "beyond the cap", status: 429, hdr: []string{"RateLimit-Reset", "61"}, attempts: 1, final: 429},
		{name: "not a retryable status", status: 404, hdr: []string{"RateLimit-Reset", "1"}, attempts: 1, final: 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []httpretry.Option
			if !tc.off {
				opts = append(opts, httpretry.WithRateLimitReset())
			}
			client, clk := newClient(t, opts...)
			srv := newServer(t, resetting(tc.status, clk.Now, tc.hdr...))
			resp, err := client.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			if resp.StatusCode != tc.final || srv.attempts() != tc.attempts {
				t.Fatalf("%d after %d attempts, want %d after %d", resp.StatusCode, srv.attempts(), tc.final, tc.attempts)
			}
			sleeps := clk.Sleeps()
			if tc.attempts == 1 {
				if len(sleeps) != 0 {
					t.Fatalf("waited %v, want no wait", sleeps)
				}
				return
			}
			if len(sleeps) != 1 || sleeps[0] < tc.min || sleeps[0] > tc.max {
				t.Fatalf("waited %v, want one wait in [%v, %v]", sleeps, tc.min, tc.max)
			}
		})
	}
}

// TestHintBeyondCapReason: a Retry-After and a rate-limit reset beyond the
// cap follow one rule: the response comes back at once, and the decision
// log says which hint was beyond the cap and that retrying stopped with
// rebound.ErrRetryDelayTooLong.
func TestHintBeyondCapReason(t *testing.T) {
	for _, tc := range []struct {
		name, header, value, why string
	}{
		{"Retry-After", "Retry-After", "2", "Retry-After beyond cap"},
		{"RateLimit-Reset", "RateLimit-Reset", "2", "RateLimit-Reset beyond cap"},
		{"X-RateLimit-Reset, Unix time", "X-RateLimit-Reset", "unix+2", "X-RateLimit-Reset beyond cap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			client, clk := newClient(t, httpretry.WithRateLimitReset(), httpretry.WithRetryDelayCap(time.Second), httpretry.WithLogger(logger))
			srv := newServer(t, resetting(503, clk.Now, tc.header, tc.value))
			resp, err := client.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			if resp.StatusCode != 503 || srv.attempts() != 1 || len(clk.Sleeps()) != 0 {
				t.Fatalf("%d after %d attempts, waits %v; want 503 after 1, no wait", resp.StatusCode, srv.attempts(), clk.Sleeps())
			}
			for _, want := range []string{
				`msg="rebound: committed"`, `why="` + tc.why + `"`,
				`reason="` + strings.TrimPrefix(rebound.ErrRetryDelayTooLong.Error(), "rebound: ") + `"`,
			} {
				if !strings.Contains(buf.String(), want) {
					t.Errorf("log %q does not say %s", buf.String(), want)
				}
			}
		})
	}
}
