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
	client, _ := newClient(t, httpretry.WithIdempotencyKey("Idempotency-Key", gen), httpretry.WithPreviousAttemptsHeader("Rebound-Previous-Attempts"))
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
	if got := seenHeader(srv, "Rebound-Previous-Attempts"); !slices.Equal(got, []string{"", "1", "2"}) {
		t.Errorf("previous-attempts headers %q, want none on the first attempt, then 1 and 2", got)
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
// carries the same key and the number of attempts sent before it.
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
		httpretry.WithPreviousAttemptsHeader("Rebound-Previous-Attempts"))
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if got := seenHeader(srv, "Idempotency-Key"); !slices.Equal(got, []string{"k1", "k1", "k1"}) {
		t.Errorf("keys %q, want k1 on each of 3 hedges", got)
	}
	got := seenHeader(srv, "Rebound-Previous-Attempts")
	slices.Sort(got)
	if !slices.Equal(got, []string{"", "1", "2"}) {
		t.Errorf("previous-attempts headers %q, want none on the first attempt, 1 and 2 on the hedges", got)
	}
}

func TestIdempotencyKeyBadInput(t *testing.T) {
	for _, o := range []httpretry.Option{
		httpretry.WithIdempotencyKey("", nil),
		httpretry.WithIdempotencyKey("Bad Name", nil),
		httpretry.WithPreviousAttemptsHeader("a:b"),
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

// TestPreviousAttemptsHeader: a handler reads with PreviousAttempts what
// WithPreviousAttemptsHeader sent: 0 on the first attempt, which carries no
// header, then the number of attempts before each retry, as
// grpcretry.PreviousAttempts and connectretry.PreviousAttempts count.
func TestPreviousAttemptsHeader(t *testing.T) {
	var mu sync.Mutex
	var seen []int
	srv := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, httpretry.PreviousAttempts(r.Header, "rebound-previous-attempts"))
		mu.Unlock()
		if n < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	client, _ := newClient(t, httpretry.WithPreviousAttemptsHeader("Rebound-Previous-Attempts"))
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != 200 || !slices.Equal(seen, []int{0, 1, 2}) {
		t.Fatalf("got %d; the handler read %v, want 0 1 2", resp.StatusCode, seen)
	}
	if got := seenHeader(srv, "Rebound-Previous-Attempts"); got[0] != "" {
		t.Errorf("the first attempt carried %q, want no header", got[0])
	}

	for _, tc := range []struct {
		values []string
		want   int
	}{
		{nil, 0}, {[]string{"2"}, 2}, {[]string{"0"}, 0}, {[]string{"-1"}, 0}, {[]string{"x"}, 0}, {[]string{""}, 0}, {[]string{"1", "2"}, 0},
	} {
		h := http.Header{}
		for _, v := range tc.values {
			h.Add("X-Previous", v)
		}
		if got := httpretry.PreviousAttempts(h, "x-previous"); got != tc.want {
			t.Errorf("PreviousAttempts(%q) = %d, want %d", tc.values, got, tc.want)
		}
	}
}

func FuzzPreviousAttempts(f *testing.F) {
	for _, s := range []string{"0", "1", "4", "-1", "+2", "007", "99999999999999999999", "x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		n := httpretry.PreviousAttempts(http.Header{"Rebound-Previous-Attempts": {v}}, "Rebound-Previous-Attempts")
		if n < 0 {
			t.Fatalf("PreviousAttempts(%q) = %d, want >= 0", v, n)
		}
		if n > 0 && strings.TrimLeft(strings.TrimPrefix(v, "+"), "0") != strconv.Itoa(n) {
			t.Fatalf("PreviousAttempts(%q) = %d, not the header's value", v, n)
		}
	})
}
