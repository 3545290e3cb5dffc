package httpretry_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
	"github.com/rebound-go/rebound/internal/quotatest"
)

// quotaServer serves q over HTTP: 429 with a Retry-After when it refuses,
// its fields on every answer.
func quotaServer(t *testing.T, q *quotatest.Quota) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		ok, fields, retryAfter := q.Take(time.Now())
		for k, v := range fields {
			w.Header().Set(k, v)
		}
		if !ok {
			w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// warnings counts the records at warning level a logger takes.
type warnings struct {
	slog.Handler
	n    *atomic.Int32
	last *atomic.Value
}

func newWarnings() warnings {
	return warnings{Handler: slog.DiscardHandler, n: new(atomic.Int32), last: new(atomic.Value)}
}

func (w warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w warnings) Handle(_ context.Context, r slog.Record) error {
	w.n.Add(1)
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	w.last.Store(b.String())
	return nil
}

// hammer has callers call url in a loop until done returns true, or for
// d at most, each call within a deadline of 3s, and returns the calls that
// failed with an error.
func hammer(t *testing.T, c *http.Client, url string, callers int, d time.Duration, done func() bool) int64 {
	var failed atomic.Int64
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for time.Now().Before(stop) && !done() {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				resp, err := c.Do(req)
				if err != nil {
					failed.Add(1)
				} else {
					resp.Body.Close()
				}
				cancel()
			}
		})
	}
	wg.Wait()
	return failed.Load()
}

// TestRateLimitQuotaPaces: a server that allows 15 requests in each 3s
// window and publishes what is left, in each header family, refuses
// nothing of four callers that loop for 4s (3.5s with -short, see
// quotatest.PacedRun; on a busy machine until it
// has served 15, within 20s) through a Transport with
// WithRateLimitQuota, and serves at least 15 of them (they use the
// quota); without the option, the adaptive rate limit learns the limit
// from 429s, and the server refuses some (the callers stop at its first
// refusal).
func TestRateLimitQuotaPaces(t *testing.T) {
	t.Parallel()
	for _, f := range []quotatest.Family{quotatest.IETF, quotatest.IETFDict, quotatest.Separate, quotatest.X, quotatest.XUnix} {
		for _, on := range []bool{true, false} {
			if !on && f != quotatest.X {
				continue
			}
			name := f.String()
			if !on {
				name += " without the option"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				q := &quotatest.Quota{Limit: 15, Window: 3 * time.Second, Family: f}
				srv := quotaServer(t, q)
				opts := []httpretry.Option{httpretry.WithAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{}), httpretry.WithMaxAttempts(1)}
				if on {
					opts = append(opts, httpretry.WithRateLimitQuota())
				}
				c := &http.Client{Transport: httpretry.NewTransport(nil, opts...)}
				start := time.Now()
				failed := hammer(t, c, srv.URL, 4, 20*time.Second, func() bool { return q.Enough(on, start, quotatest.PacedRun(testing.Short())) })
				t.Logf("server saw %d, refused %d; %d calls failed in the client", q.Seen(), q.Refused(), failed)
				switch {
				case on && (q.Refused() != 0 || q.Seen()-q.Refused() < 15):
					t.Errorf("with the quota read: the server saw %d and refused %d, want none refused and at least 15 served", q.Seen(), q.Refused())
				case !on && q.Refused() == 0:
					t.Errorf("without the option the server refused nothing of %d: the test does not tell the quota's pacing from the learned rate's", q.Seen())
				}
			})
		}
	}
}

// TestRateLimitQuotaDistrusted: a server that publishes a quota that is
// malformed, absurd, or at odds with its own earlier answers leaves the
// learned rate in charge (twenty calls with 2s deadlines all go at once,
// where a trusted quota of 0 left for 60s refuses every call after the
// first for its deadline, without sending it), and costs one log line
// for the host however many answers carry it.
func TestRateLimitQuotaDistrusted(t *testing.T) {
	unix := func(d time.Duration) string { return strconv.FormatInt(time.Now().Add(d).Unix(), 10) }
	var n atomic.Int32
	for _, tc := range []struct {
		name    string
		publish func(time.Time) map[string]string
		trusted bool
	}{
		{"trusted, spent for 60s", func(time.Time) map[string]string {
			return map[string]string{"X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": "60"}
		}, true},
		{"negative remaining", func(time.Time) map[string]string {
			return map[string]string{"X-Ratelimit-Remaining": "-5", "X-Ratelimit-Reset": "60"}
		}, false},
		{"remaining not a number", func(time.Time) map[string]string {
			return map[string]string{"Ratelimit": `"p";r=none;t=60`}
		}, false},
		{"reset in the past", func(time.Time) map[string]string {
			return map[string]string{"X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": unix(-time.Hour)}
		}, false},
		{"reset years away", func(time.Time) map[string]string {
			return map[string]string{"X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": unix(3 * 365 * 24 * time.Hour)}
		}, false},
		{"limit 0", func(time.Time) map[string]string {
			return map[string]string{"Ratelimit": "limit=0, remaining=0, reset=60"}
		}, false},
		{"remaining above the limit", func(time.Time) map[string]string {
			return map[string]string{"Ratelimit-Limit": "10", "Ratelimit-Remaining": "11", "Ratelimit-Reset": "60"}
		}, false},
		{"limits that contradict", func(time.Time) map[string]string {
			// The first answer a plenty, the others a limit of 5, spent.
			if n.Add(1) == 1 {
				return map[string]string{"X-Ratelimit-Limit": "100000", "X-Ratelimit-Remaining": "99999", "X-Ratelimit-Reset": "60"}
			}
			return map[string]string{"X-Ratelimit-Limit": "5", "X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": "60"}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &quotatest.Quota{Limit: 1 << 30, Window: time.Hour, Publish: tc.publish}
			srv := quotaServer(t, q)
			w := newWarnings()
			c := &http.Client{Transport: httpretry.NewTransport(nil, httpretry.WithRateLimitQuota(), httpretry.WithLogger(slog.New(w)))}
			var limited int
			for range 20 {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
				resp, err := c.Do(req)
				cancel()
				switch {
				case errors.Is(err, rebound.ErrRateLimited):
					limited++
				case err != nil:
					t.Fatal(err)
				default:
					resp.Body.Close()
				}
			}
			logged, _ := w.last.Load().(string)
			t.Logf("server saw %d; %d refused for their deadline; %d warnings: %s", q.Seen(), limited, w.n.Load(), logged)
			if tc.trusted {
				if q.Seen() != 1 || limited != 19 || w.n.Load() != 0 {
					t.Fatalf("a trusted quota of 0 for 60s: the server saw %d, %d refused locally, %d warnings; want 1, 19, 0", q.Seen(), limited, w.n.Load())
				}
				return
			}
			if q.Seen() != 20 || limited != 0 {
				t.Fatalf("the server saw %d, %d refused locally; want all 20 sent", q.Seen(), limited)
			}
			if w.n.Load() != 1 || !strings.Contains(logged, srv.Listener.Addr().String()) {
				t.Fatalf("%d warnings (last %q), want 1 naming the host", w.n.Load(), logged)
			}
		})
	}
}

// TestRateLimitQuotaCapped: a quota spent until a reset a minute away
// keeps the next call no longer than the Retry-After cap: with a cap of
// 200ms the calls after the first wait for it and go, within their 5s
// deadlines. Its limiter is its server's host's alone, so it waits beside
// the other tests that wait.
func TestRateLimitQuotaCapped(t *testing.T) {
	t.Parallel()
	q := &quotatest.Quota{Limit: 1 << 30, Window: time.Hour, Publish: func(time.Time) map[string]string {
		return map[string]string{"Ratelimit": `"p";r=0;t=60`}
	}}
	srv := quotaServer(t, q)
	c := &http.Client{Transport: httpretry.NewTransport(nil, httpretry.WithRateLimitQuota(), httpretry.WithRetryDelayCap(200*time.Millisecond))}
	for i := range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := c.Do(req)
		cancel()
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		resp.Body.Close()
	}
	if q.Seen() != 4 {
		t.Fatalf("the server saw %d, want 4", q.Seen())
	}
}
