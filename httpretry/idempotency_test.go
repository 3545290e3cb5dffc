package httpretry_test

import (
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rebound-go/rebound/httpretry"
)

// seenHeader returns header name of every request srv saw, in order.
func seenHeader(srv *server, name string) []string {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	var vs []string
	for _, h := range srv.hdrs {
		vs = append(vs, h.Get(name))
	}
	return vs
}

func TestIdempotencyKey(t *testing.T) {
	srv := newServer(t, script(503, 503, 200))
	var made atomic.Int32
	gen := func() string { return "key-" + strconv.Itoa(int(made.Add(1))) }
	client, _ := newClient(t, httpretry.WithIdempotencyKey("Idempotency-Key", gen), httpretry.WithAttemptHeader("Rebound-Attempt"))
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("charge 10"))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || readAll(t, resp) != "attempt 3" {
		t.Fatalf("got %d, want 200 from attempt 3", resp.StatusCode)
	}
	if got := seenHeader(srv, "Idempotency-Key"); !slices.Equal(got, []string{"key-1", "key-1", "key-1"}) {
		t.Errorf("keys %q, want key-1 on each of 3 attempts", got)
	}
	if got := seenHeader(srv, "Rebound-Attempt"); !slices.Equal(got, []string{"1", "2", "3"}) {
		t.Errorf("attempt headers %q, want 1 2 3", got)
	}
	for i := range 3 {
		if string(srv.body(i)) != "charge 10" {
			t.Errorf("attempt %d body %q", i+1, srv.body(i))
		}
	}
	if _, ok := req.Header["Idempotency-Key"]; ok {
		t.Error("the caller's request was given the key")
	}

	// A second request gets a key of its own.
	req2, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("charge 20"))
	resp, err = client.Do(req2)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if got := seenHeader(srv, "Idempotency-Key"); got[3] != "key-2" || made.Load() != 2 {
		t.Errorf("second request's key %q (%d made), want key-2", got[3], made.Load())
	}
}

// TestIdempotencyKeyMakesPostRetryable: without the option a POST that
// gets 503 is not retried; with it, it is. A key the caller set is kept.
func TestIdempotencyKeyMakesPostRetryable(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     []httpretry.Option
		header   string // set by the caller
		attempts int
		keys     []string
	}{
		{"no option", nil, "", 1, []string{""}},
		{"default generator", []httpretry.Option{httpretry.WithIdempotencyKey("X-Request-Key", nil)}, "", 2, nil},
		{"the caller's key", []httpretry.Option{httpretry.WithIdempotencyKey("X-Request-Key", func() string { panic("called") })}, "mine", 2, []string{"mine", "mine"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, script(503, 200))
			client, _ := newClient(t, tc.opts...)
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
			if tc.header != "" {
				req.Header.Set("X-Request-Key", tc.header)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			if got := srv.attempts(); got != tc.attempts {
				t.Fatalf("%d attempts, want %d", got, tc.attempts)
			}
			keys := seenHeader(srv, "X-Request-Key")
			if tc.keys == nil {
				uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
				if !uuid.MatchString(keys[0]) || keys[1] != keys[0] {
					t.Fatalf("keys %q, want one UUIDv4 twice", keys)
				}
				return
			}
			if !slices.Equal(keys, tc.keys) {
				t.Fatalf("keys %q, want %q", keys, tc.keys)
			}
		})
	}
}

// TestIdempotencyKeyHedges: a POST with a key is hedged, and every hedge
// carries the same key and its own attempt number.
func TestIdempotencyKeyHedges(t *testing.T) {
	var mu sync.Mutex
	arrived := 0
	all := make(chan struct{})
	srv := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if arrived++; arrived == 3 {
			close(all)
		}
		mu.Unlock()
		// No attempt wins before all three are in.
		select {
		case <-all:
		case <-r.Context().Done():
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	client, _ := newClient(t, httpretry.WithHedging(0, 3), httpretry.WithIdempotencyKey("Idempotency-Key", func() string { return "k1" }),
		httpretry.WithAttemptHeader("Rebound-Attempt"))
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if got := seenHeader(srv, "Idempotency-Key"); !slices.Equal(got, []string{"k1", "k1", "k1"}) {
		t.Errorf("keys %q, want k1 on each of 3 hedges", got)
	}
	got := seenHeader(srv, "Rebound-Attempt")
	slices.Sort(got)
	if !slices.Equal(got, []string{"1", "2", "3"}) {
		t.Errorf("attempt headers %q, want 1 2 3", got)
	}
}

func TestIdempotencyKeyBadInput(t *testing.T) {
	for _, o := range []httpretry.Option{
		httpretry.WithIdempotencyKey("", nil),
		httpretry.WithIdempotencyKey("Bad Name", nil),
		httpretry.WithAttemptHeader("a:b"),
	} {
		if err := httpretry.NewTransport(nil, o).Err(); err == nil {
			t.Error("option accepted")
		}
	}
	srv := newServer(t, script(200))
	for _, key := range []string{"", "a\r\nb", " padded"} {
		client, _ := newClient(t, httpretry.WithIdempotencyKey("Idempotency-Key", func() string { return key }))
		_, err := client.Post(srv.URL, "text/plain", strings.NewReader("x"))
		if err == nil || !strings.Contains(err.Error(), "WithIdempotencyKey") {
			t.Errorf("key %q: err %v, want one naming WithIdempotencyKey", key, err)
		}
	}
	if srv.attempts() != 0 {
		t.Errorf("%d requests sent with a bad key", srv.attempts())
	}
}
