package httpretry_test

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
)

func TestClassifierGuardrails(t *testing.T) {
	promote := func(f httpretry.Failure, v rebound.RetryInfo) rebound.RetryInfo {
		if f.Response != nil && f.Response.StatusCode == http.StatusInternalServerError {
			v.Safety = rebound.SafetyYes
		}
		return v
	}
	demote := func(f httpretry.Failure, v rebound.RetryInfo) rebound.RetryInfo {
		if f.Response != nil && f.Response.Header.Get("X-Final") != "" {
			v.Safety = rebound.SafetyNo
		}
		return v
	}
	for _, tc := range []struct {
		name     string
		method   string
		status   int
		classify func(httpretry.Failure, rebound.RetryInfo) rebound.RetryInfo
		attempts int
	}{
		{"promotes a 500 of a GET", http.MethodGet, 500, promote, 3},
		{"cannot promote a POST", http.MethodPost, 500, promote, 1},
		{"without a classifier a 500 is final", http.MethodGet, 500, nil, 1},
		{"demotes a 503", http.MethodGet, 503, demote, 1},
		{"a 503 without its header is retried", http.MethodPut, 503, func(f httpretry.Failure, v rebound.RetryInfo) rebound.RetryInfo { return v }, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Final", "yes")
				w.WriteHeader(tc.status)
			})
			var opts []httpretry.Option
			if tc.classify != nil {
				opts = append(opts, httpretry.WithClassifier(tc.classify))
			}
			client, _ := newClient(t, opts...)
			req, _ := http.NewRequest(tc.method, srv.URL, strings.NewReader("x"))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			if resp.StatusCode != tc.status || srv.attempts() != tc.attempts {
				t.Fatalf("%d after %d attempts, want %d after %d", resp.StatusCode, srv.attempts(), tc.status, tc.attempts)
			}
		})
	}
}

// TestClassifierThrottleBackoff: a throttling failure backs off on the
// classifier's schedule.
func TestClassifierThrottleBackoff(t *testing.T) {
	srv := newServer(t, script(429, 429, 200))
	hard := rebound.Backoff{Initial: 4 * time.Second, Max: time.Minute, Multiplier: 3}
	client, clk := newClient(t, httpretry.WithClassifier(func(f httpretry.Failure, v rebound.RetryInfo) rebound.RetryInfo {
		if v.SlowDown {
			v.Backoff = hard
		}
		return v
	}))
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	// Ceilings 4s, 12s at jitter 0.5, instead of the default 1s, 2s.
	if got, want := clk.Sleeps(), []time.Duration{2 * time.Second, 6 * time.Second}; resp.StatusCode != 200 || !slices.Equal(got, want) {
		t.Fatalf("%d after waits %v, want 200 after %v", resp.StatusCode, got, want)
	}
}

// TestClassifierLocal: a failure marked local costs the budget nothing.
func TestClassifierLocal(t *testing.T) {
	for _, local := range []bool{false, true} {
		srv := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
			if n == 1 {
				w.Header().Set("X-Breaker", "open") // a proxy's own circuit breaker answered
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		})
		b, _ := rebound.NewTokenBucket(rebound.TokenBucketConfig{Capacity: 10, RetryCost: 5, TimeoutCost: 10})
		client, _ := newClient(t, httpretry.WithBudgetPerHost(func(string) rebound.Budget { return b }),
			httpretry.WithClassifier(func(f httpretry.Failure, v rebound.RetryInfo) rebound.RetryInfo {
				v.Local = local && f.Response != nil && f.Response.Header.Get("X-Breaker") == "open"
				return v
			}))
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		want := int64(5)
		if local {
			want = 10
		}
		if resp.StatusCode != 200 || srv.attempts() != 2 || b.Tokens() != want {
			t.Fatalf("local %v: %d after %d attempts, %d tokens; want 200 after 2, %d tokens", local, resp.StatusCode, srv.attempts(), b.Tokens(), want)
		}
	}
}

// TestClassifierClassLimit: a class with an attempt limit of 2 stops a
// request that may make 5 attempts after its second such failure.
func TestClassifierClassLimit(t *testing.T) {
	srv := newServer(t, script(503))
	var mu sync.Mutex
	var seen []string
	client, _ := newClient(t, httpretry.WithMaxAttempts(5), httpretry.WithClassifier(func(f httpretry.Failure, v rebound.RetryInfo) rebound.RetryInfo {
		mu.Lock()
		seen = append(seen, f.Request.Method+" "+f.Response.Status)
		mu.Unlock()
		v.Class, v.ClassAttempts = "unavailable", 2
		return v
	}))
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if srv.attempts() != 2 || len(seen) != 2 || seen[0] != "GET 503 Service Unavailable" {
		t.Fatalf("%d attempts, classifier saw %q; want 2", srv.attempts(), seen)
	}
}

// TestClassifierTransportError: a connection refused is given to the
// classifier as Err, and a classifier may stop its retries.
func TestClassifierTransportError(t *testing.T) {
	srv := newServer(t, script(200))
	url := srv.URL
	srv.Close()
	var errs []error
	client, _ := newClient(t, httpretry.WithClassifier(func(f httpretry.Failure, v rebound.RetryInfo) rebound.RetryInfo {
		errs = append(errs, f.Err)
		v.Safety = rebound.SafetyNo
		return v
	}))
	_, err := client.Get(url)
	if err == nil || len(errs) != 1 || errs[0] == nil {
		t.Fatalf("err %v, classifier saw %v; want one failure with its error", err, errs)
	}
	if !strings.Contains(err.Error(), "not retryable") {
		t.Fatalf("err %v, want not retryable", err)
	}
}
