package httpretry_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
	"github.com/rebound-go/rebound/internal/clocktest"
)

func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		code     int
		attempts int
		sleeps   []time.Duration
	}{
		{http.StatusTooManyRequests, 3, []time.Duration{500 * time.Millisecond, time.Second}},
		{http.StatusBadGateway, 3, []time.Duration{500 * time.Millisecond, time.Second}},
		{http.StatusServiceUnavailable, 3, []time.Duration{500 * time.Millisecond, time.Second}},
		{http.StatusGatewayTimeout, 3, []time.Duration{500 * time.Millisecond, time.Second}},
		{http.StatusOK, 1, nil},
		{http.StatusNotFound, 1, nil},
		{http.StatusBadRequest, 1, nil},
		{http.StatusInternalServerError, 1, nil},
		{http.StatusNotImplemented, 1, nil},
	} {
		t.Run(strconv.Itoa(tc.code), func(t *testing.T) {
			srv := newServer(t, script(tc.code))
			client, clk := newClient(t)
			resp, err := client.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			// The last response comes back as it was sent, body included.
			want := "attempt " + strconv.Itoa(tc.attempts)
			if resp.StatusCode != tc.code || readAll(t, resp) != want {
				t.Errorf("got %d, want %d %q", resp.StatusCode, tc.code, want)
			}
			if got := srv.attempts(); got != tc.attempts {
				t.Errorf("server saw %d attempts, want %d", got, tc.attempts)
			}
			if got := clk.Sleeps(); !reflect.DeepEqual(got, tc.sleeps) {
				t.Errorf("sleeps %v, want %v", got, tc.sleeps)
			}
		})
	}
}

func TestRetryUntilSuccess(t *testing.T) {
	srv := newServer(t, script(503, 429, 200))
	client, clk := newClient(t)
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || readAll(t, resp) != "attempt 3" || srv.attempts() != 3 {
		t.Fatalf("got %d after %d attempts, want 200 after 3", resp.StatusCode, srv.attempts())
	}
	if got, want := clk.Sleeps(), []time.Duration{500 * time.Millisecond, time.Second}; !reflect.DeepEqual(got, want) {
		t.Errorf("sleeps %v, want %v", got, want)
	}
}

func TestRetryableStatusOption(t *testing.T) {
	srv := newServer(t, script(500, 503, 200))
	client, _ := newClient(t, httpretry.WithRetryableStatus(500))
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	// 500 is retried now; 503 no longer is.
	if resp.StatusCode != 503 || readAll(t, resp) != "attempt 2" {
		t.Fatalf("got %d, want 503 from attempt 2", resp.StatusCode)
	}
}

func TestMethods(t *testing.T) {
	for _, tc := range []struct {
		method   string
		header   string
		attempts int
	}{
		{http.MethodGet, "", 3},
		{http.MethodHead, "", 3},
		{http.MethodOptions, "", 3},
		{http.MethodTrace, "", 3},
		{http.MethodPut, "", 3},
		{http.MethodDelete, "", 3},
		{http.MethodPost, "", 1},
		{http.MethodPatch, "", 1},
		{http.MethodPost, "Idempotency-Key", 3},
		{http.MethodPatch, "X-Idempotency-Key", 3},
	} {
		t.Run(tc.method+tc.header, func(t *testing.T) {
			srv := newServer(t, script(503))
			client, _ := newClient(t)
			req, _ := http.NewRequest(tc.method, srv.URL, strings.NewReader("payload"))
			if tc.header != "" {
				req.Header.Set(tc.header, "key-1")
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 503 || srv.attempts() != tc.attempts {
				t.Fatalf("got %d after %d attempts, want 503 after %d", resp.StatusCode, srv.attempts(), tc.attempts)
			}
		})
	}
}

func TestIdempotentOption(t *testing.T) {
	srv := newServer(t, script(503))
	never := func(*http.Request) bool { return false }
	client, _ := newClient(t, httpretry.WithIdempotent(never))
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if srv.attempts() != 1 {
		t.Fatalf("server saw %d attempts, want 1", srv.attempts())
	}
}

// closedAddr returns a 127.0.0.1 address nothing listens on.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestDialFailureRetriesAnyMethod(t *testing.T) {
	addr := closedAddr(t)
	var dials atomic.Int32
	var d net.Dialer
	base := &http.Transport{DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, network, a)
	}}
	clk := clocktest.NewAuto()
	client := &http.Client{Transport: httpretry.NewTransport(base, httpretry.WithClock(clk), httpretry.WithRandom(clocktest.NewRand(0.5)))}
	resp, err := client.Post("http://"+addr+"/orders", "text/plain", strings.NewReader("order"))
	if err == nil {
		resp.Body.Close()
		t.Fatal("POST to a closed port succeeded")
	}
	if dials.Load() != 3 {
		t.Errorf("%d dials, want 3", dials.Load())
	}
	var re *rebound.Error
	if !errors.Is(err, rebound.ErrAttemptsExhausted) || !errors.As(err, &re) || re.Attempts != 3 {
		t.Errorf("err = %v, want attempts exhausted after 3", err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("err = %v, want it to wrap ECONNREFUSED", err)
	}
	var ue *url.Error
	if !errors.As(err, &ue) || !strings.HasPrefix(ue.Err.Error(), "httpretry: gave up after 3 attempts (attempts exhausted): dial tcp ") {
		t.Errorf("err = %q, want it to say why retrying stopped", err)
	}
}

func TestPostRetriedAfterDialFailure(t *testing.T) {
	srv := newServer(t, script(200))
	var dials atomic.Int32
	var d net.Dialer
	base := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials.Add(1) <= 2 {
			return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
		}
		return d.DialContext(ctx, network, addr)
	}}
	t.Cleanup(base.CloseIdleConnections)
	clk := clocktest.NewAuto()
	client := &http.Client{Transport: httpretry.NewTransport(base, httpretry.WithClock(clk), httpretry.WithRandom(clocktest.NewRand(0.5)))}
	resp, err := client.Post(srv.URL, "text/plain", strings.NewReader("order"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || srv.attempts() != 1 || string(srv.body(0)) != "order" || dials.Load() != 3 {
		t.Fatalf("got %d, server saw %d attempts, %d dials; want 200, 1, 3", resp.StatusCode, srv.attempts(), dials.Load())
	}
}

// hangUp closes the connection of the first request without answering
// and answers the others with 200.
func hangUp(n int, w http.ResponseWriter, r *http.Request) {
	if n == 1 {
		c, _, _ := w.(http.Hijacker).Hijack()
		c.Close()
		return
	}
	io.WriteString(w, "attempt "+strconv.Itoa(n))
}

func TestConnectionErrorRetriedWhenIdempotent(t *testing.T) {
	srv := newServer(t, hangUp)
	client, _ := newClient(t)
	req, _ := http.NewRequest(http.MethodPut, srv.URL, strings.NewReader("v"))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "attempt 2" || srv.attempts() != 2 {
		t.Fatalf("got %q after %d attempts, want attempt 2", got, srv.attempts())
	}
}

func TestConnectionErrorNotRetriedWhenNotIdempotent(t *testing.T) {
	srv := newServer(t, hangUp)
	client, _ := newClient(t)
	resp, err := client.Post(srv.URL, "text/plain", strings.NewReader("v"))
	if err == nil {
		resp.Body.Close()
		t.Fatal("POST succeeded, want the connection error")
	}
	if !errors.Is(err, rebound.ErrNotRetryable) || !errors.Is(err, io.EOF) || srv.attempts() != 1 {
		t.Fatalf("err = %v after %d attempts, want not retryable after 1", err, srv.attempts())
	}
}

func TestBodyReplayed(t *testing.T) {
	payload := make([]byte, 100<<10)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range payload {
		payload[i] = byte(r.Uint32())
	}
	for _, tc := range []struct {
		name string
		body func() io.Reader
		size int64 // ContentLength to set; 0 keeps NewRequest's
	}{
		{"GetBody", func() io.Reader { return bytes.NewReader(payload) }, 0},
		{"unknown length", func() io.Reader { return struct{ io.Reader }{bytes.NewReader(payload)} }, 0},
		{"known length", func() io.Reader { return struct{ io.Reader }{bytes.NewReader(payload)} }, int64(len(payload))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, script(503, 502, 200))
			client, _ := newClient(t)
			req, _ := http.NewRequest(http.MethodPut, srv.URL, tc.body())
			if tc.size != 0 {
				req.ContentLength = tc.size
			}
			body, getBody, length := req.Body, req.GetBody != nil, req.ContentLength
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 || srv.attempts() != 3 {
				t.Fatalf("got %d after %d attempts, want 200 after 3", resp.StatusCode, srv.attempts())
			}
			for i := range 3 {
				if !bytes.Equal(srv.body(i), payload) {
					t.Errorf("attempt %d: server got %d bytes, not the %d sent", i+1, len(srv.body(i)), len(payload))
				}
			}
			if req.Body != body || (req.GetBody != nil) != getBody || req.ContentLength != length {
				t.Error("RoundTrip modified the request")
			}
		})
	}
}

func TestLargeUnreplayableBodyGetsOneAttempt(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB
	for _, size := range []int64{0, int64(len(payload))} {
		t.Run("ContentLength="+strconv.FormatInt(size, 10), func(t *testing.T) {
			srv := newServer(t, script(503))
			client, clk := newClient(t, httpretry.WithMaxBufferedBody(1024))
			req, _ := http.NewRequest(http.MethodPut, srv.URL, struct{ io.Reader }{bytes.NewReader(payload)})
			req.ContentLength = size
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 503 || readAll(t, resp) != "attempt 1" || srv.attempts() != 1 || len(clk.Sleeps()) != 0 {
				t.Fatalf("got %d after %d attempts, want 503 after 1", resp.StatusCode, srv.attempts())
			}
			if !bytes.Equal(srv.body(0), payload) {
				t.Errorf("server got %d bytes, not the %d sent", len(srv.body(0)), len(payload))
			}
		})
	}
}

func TestUnreplayableBodyError(t *testing.T) {
	client, _ := newClient(t, httpretry.WithMaxBufferedBody(0))
	req, _ := http.NewRequest(http.MethodPut, "http://"+closedAddr(t), struct{ io.Reader }{strings.NewReader("x")})
	_, err := client.Do(req)
	if !errors.Is(err, httpretry.ErrBodyNotReplayable) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("err = %v, want ErrBodyNotReplayable wrapping the dial error", err)
	}
}

func retryAfter(v string, codes ...int) func(n int, w http.ResponseWriter, r *http.Request) {
	return func(n int, w http.ResponseWriter, r *http.Request) {
		if n <= len(codes) && codes[n-1] != 200 {
			w.Header().Set("Retry-After", v)
		}
		script(codes...)(n, w, r)
	}
}

func TestRetryAfterIsMinimumDelay(t *testing.T) {
	// in7s is an HTTP-date 7s after the clock's time, which it first moves
	// to a whole second, the resolution of HTTP-dates.
	in7s := func(clk *clocktest.Clock) string {
		now := clk.Now()
		clk.Advance(now.Truncate(time.Second).Add(time.Second).Sub(now))
		return clk.Now().Add(7 * time.Second).Format(http.TimeFormat)
	}
	for _, tc := range []struct {
		name   string
		value  func(*clocktest.Clock) string
		sleeps []time.Duration
	}{
		// A hint waits up to half a second more: a quarter, with the
		// random source at 0.5.
		{"seconds", func(*clocktest.Clock) string { return "3" }, []time.Duration{3250 * time.Millisecond, 3250 * time.Millisecond}},
		{"below backoff", func(*clocktest.Clock) string { return "0" }, []time.Duration{500 * time.Millisecond, time.Second}},
		{"http-date", in7s, []time.Duration{7250 * time.Millisecond, time.Second}}, // the date is then past
		{"invalid", func(*clocktest.Clock) string { return "soon" }, []time.Duration{500 * time.Millisecond, time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, clk := newClient(t)
			srv := newServer(t, retryAfter(tc.value(clk), 503, 429, 200))
			resp, err := client.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 || readAll(t, resp) != "attempt 3" {
				t.Fatalf("got %d, want 200", resp.StatusCode)
			}
			if got := clk.Sleeps(); !reflect.DeepEqual(got, tc.sleeps) {
				t.Errorf("sleeps %v, want %v", got, tc.sleeps)
			}
		})
	}
}

func TestRetryAfterBeyondCap(t *testing.T) {
	srv := newServer(t, retryAfter("11", 503, 200))
	client, clk := newClient(t, httpretry.WithRetryAfterCap(10*time.Second))
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "11" || readAll(t, resp) != "attempt 1" {
		t.Fatalf("got %d, want the 503 with its body", resp.StatusCode)
	}
	if srv.attempts() != 1 || len(clk.Sleeps()) != 0 {
		t.Fatalf("%d attempts, sleeps %v; want 1 attempt, no sleep", srv.attempts(), clk.Sleeps())
	}
}

func TestDeadline(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler func(n int, w http.ResponseWriter, r *http.Request)
		opts    []httpretry.Option
	}{
		{"Retry-After", retryAfter("120", 503, 200), []httpretry.Option{httpretry.WithRetryAfterCap(time.Hour)}},
		{"backoff", script(503, 200), []httpretry.Option{httpretry.WithBackoff(rebound.Backoff{Initial: 10 * time.Minute, Max: 10 * time.Minute, Multiplier: 2})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, tc.handler)
			client, clk := newClient(t, tc.opts...)
			// The fake clock starts at the real time, which deadlines use.
			ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(time.Minute))
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 503 || readAll(t, resp) != "attempt 1" {
				t.Fatalf("got %d, want the 503 with its body", resp.StatusCode)
			}
			if srv.attempts() != 1 || len(clk.Sleeps()) != 0 {
				t.Fatalf("%d attempts, sleeps %v; want 1 attempt, no sleep", srv.attempts(), clk.Sleeps())
			}
		})
	}
}

func TestCanceledWhileWaiting(t *testing.T) {
	srv := newServer(t, script(503))
	clk := clocktest.New()
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	client := &http.Client{Transport: httpretry.NewTransport(base, httpretry.WithClock(clk))}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	done := make(chan error, 1)
	go func() {
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	if !clk.WaitPending(1) {
		t.Fatal("the transport never waited")
	}
	cancel()
	err := <-done
	var re *rebound.Error
	if !errors.Is(err, context.Canceled) || !errors.As(err, &re) || re.Attempts != 1 || srv.attempts() != 1 {
		t.Fatalf("err = %v after %d attempts, want context.Canceled after 1", err, srv.attempts())
	}
}

func TestCanceledDuringAttemptNotRetried(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		cancel()
		<-r.Context().Done()
	})
	client, clk := newClient(t)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	_, err := client.Do(req)
	if !errors.Is(err, context.Canceled) || srv.attempts() != 1 || len(clk.Sleeps()) != 0 {
		t.Fatalf("err = %v after %d attempts, want context.Canceled after 1", err, srv.attempts())
	}
}

func TestDeadlineExceededIsTimeout(t *testing.T) {
	srv := newServer(t, script(200))
	client, _ := newClient(t)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	_, err := client.Do(req)
	var ue *url.Error
	if !errors.As(err, &ue) || !ue.Timeout() || !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(ue.Err.Error(), "httpretry: ") {
		t.Fatalf("err = %v, want an httpretry timeout", err)
	}
}

func TestLastResponseBodyIntact(t *testing.T) {
	big := strings.Repeat("x", 200<<10)
	srv := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(503)
		io.WriteString(w, strconv.Itoa(n)+big)
	})
	client, _ := newClient(t)
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); resp.StatusCode != 503 || got != "3"+big {
		t.Fatalf("got %d with %d bytes, want 503 with the %d bytes of attempt 3", resp.StatusCode, len(got), len(big)+1)
	}
}

func TestConnectionReuse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		size    int  // of each failed response's body
		chunked bool // sent without a Content-Length
		conns   int32
	}{
		{"small bodies drained", 100, false, 1},
		{"drain limit", 4 << 10, false, 1},
		{"large bodies closed unread", 4<<10 + 1, false, 3},
		{"small bodies of unknown length drained", 100, true, 1},
		{"drain limit of unknown length", 4 << 10, true, 1},
		{"large bodies of unknown length closed", 64 << 10, true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if n < 3 {
					if !tc.chunked {
						w.Header().Set("Content-Length", strconv.Itoa(tc.size))
					}
					w.WriteHeader(503)
					if tc.chunked {
						// Sent ahead of the body, the header cannot
						// carry its length.
						w.(http.Flusher).Flush()
					}
					w.Write(bytes.Repeat([]byte{'x'}, tc.size))
					return
				}
				io.WriteString(w, "ok")
			})
			client, _ := newClient(t)
			req, _ := http.NewRequest(http.MethodPut, srv.URL, strings.NewReader("body"))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if readAll(t, resp) != "ok" || srv.attempts() != 3 {
				t.Fatalf("%d attempts, want 3", srv.attempts())
			}
			if got := srv.conns.Load(); got != tc.conns {
				t.Errorf("%d connections for 3 attempts, want %d", got, tc.conns)
			}
		})
	}
}

// A 503 whose body trickles does not hold back the retry: attempt 2
// reaches the server while attempt 1's handler is still sending its body.
func TestTricklingBodyDoesNotDelayRetry(t *testing.T) {
	const bodyLen = 2000 // bytes, one per 10ms: 20s if the client waited
	second, firstDone := make(chan struct{}), make(chan struct{})
	var sent atomic.Int32 // bytes of attempt 1's body when attempt 2 came
	sent.Store(-1)
	srv := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n > 1 {
			if n == 2 {
				close(second)
			}
			io.WriteString(w, "attempt "+strconv.Itoa(n))
			return
		}
		defer close(firstDone)
		w.WriteHeader(503)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := range bodyLen {
			// Write errors are ignored: the client may hang up before
			// attempt 2 comes, and the handler waits for it all the same.
			w.Write([]byte{'x'})
			w.(http.Flusher).Flush()
			select {
			case <-second:
				sent.Store(int32(i + 1))
				return
			case <-tick.C:
			}
		}
	})
	client, _ := newClient(t)
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "attempt 2" {
		t.Fatalf("got %q, want attempt 2", got)
	}
	<-firstDone
	if n := sent.Load(); n < 1 || n >= bodyLen {
		t.Fatalf("attempt 2 came after %d of attempt 1's %d bytes, want while it was still sending", n, bodyLen)
	}
	if got := srv.conns.Load(); got != 2 {
		t.Errorf("%d connections, want 2: the trickling body's connection cannot be reused", got)
	}
}

func TestBudgetPerHost(t *testing.T) {
	a := newServer(t, script(503))
	b := newServer(t, script(503))
	var hosts []string
	// Two retries' worth of tokens per host, and no refund.
	budget := func(host string) rebound.Budget {
		hosts = append(hosts, host)
		bucket, err := rebound.NewTokenBucket(rebound.TokenBucketConfig{Capacity: 10, RetryCost: 5, TimeoutCost: 10})
		if err != nil {
			t.Fatal(err)
		}
		return bucket
	}
	client, _ := newClient(t, httpretry.WithBudget(budget))
	for _, step := range []struct {
		srv      *server
		attempts int // the server's total after the request
	}{
		{a, 3}, // spends the bucket of a
		{a, 4}, // nothing left: one attempt
		{b, 3}, // b has its own bucket
		{b, 4},
	} {
		resp, err := client.Get(step.srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 503 || step.srv.attempts() != step.attempts {
			t.Fatalf("got %d with %d attempts, want 503 with %d", resp.StatusCode, step.srv.attempts(), step.attempts)
		}
	}
	want := []string{strings.TrimPrefix(a.URL, "http://"), strings.TrimPrefix(b.URL, "http://")}
	if !reflect.DeepEqual(hosts, want) {
		t.Errorf("budget made for %v, want %v", hosts, want)
	}
}

func TestBudgetThrottle(t *testing.T) {
	srv := newServer(t, script(503))
	throttle, err := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 4, TokenRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	client, _ := newClient(t, httpretry.WithBudget(func(string) rebound.Budget { return throttle }))
	// Each failure takes a token; retries stop at half of 4.
	for i, want := range []int{2, 3} {
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if srv.attempts() != want {
			t.Fatalf("request %d: server saw %d attempts in all, want %d", i+1, srv.attempts(), want)
		}
	}
}

func TestNoBudget(t *testing.T) {
	srv := newServer(t, script(503))
	client, _ := newClient(t, httpretry.WithBudget(nil), httpretry.WithMaxAttempts(5))
	for range 30 { // 120 retries, more than the default bucket's 100
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if srv.attempts() != 150 {
		t.Fatalf("server saw %d attempts, want 150", srv.attempts())
	}
}

func TestWithStrategy(t *testing.T) {
	srv := newServer(t, script(503))
	clk := clocktest.NewAuto()
	policy, err := rebound.NewRetrier(rebound.RetryPolicy{MaxAttempts: 2, Backoff: rebound.DefaultBackoff()},
		rebound.WithClock(clk), rebound.WithRandom(clocktest.NewRand(0.25)))
	if err != nil {
		t.Fatal(err)
	}
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	client := &http.Client{Transport: httpretry.NewTransport(base, httpretry.WithStrategy(policy))}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 503 || readAll(t, resp) != "attempt 2" {
		t.Fatalf("got %d, want 503 from attempt 2", resp.StatusCode)
	}
	if got, want := clk.Sleeps(), []time.Duration{250 * time.Millisecond}; !reflect.DeepEqual(got, want) {
		t.Errorf("sleeps %v, want %v", got, want)
	}
}

func TestDoesNotModifyRequest(t *testing.T) {
	srv := newServer(t, script(503, 503, 200))
	client, _ := newClient(t)
	req, _ := http.NewRequest(http.MethodPut, srv.URL, strings.NewReader("abc"))
	req.Header.Set("X-Test", "1")
	before := *req
	hdr := req.Header.Clone()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	after := *req
	if after.Body != before.Body || after.ContentLength != before.ContentLength || after.URL != before.URL ||
		!reflect.DeepEqual(req.Header, hdr) || after.Method != before.Method {
		t.Error("RoundTrip modified the request")
	}
}

func TestInvalidOptions(t *testing.T) {
	policy, err := rebound.NewRetrier(rebound.RetryPolicy{MaxAttempts: 2, Backoff: rebound.DefaultBackoff()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts []httpretry.Option
		want string
	}{
		{[]httpretry.Option{httpretry.WithMaxAttempts(0)}, "httpretry: WithMaxAttempts: n must be >= 1, got 0"},
		{[]httpretry.Option{httpretry.WithBackoff(rebound.Backoff{})}, "httpretry: WithBackoff: rebound: Backoff.Initial must be > 0, got 0s"},
		{[]httpretry.Option{httpretry.WithRetryAfterCap(0)}, "httpretry: WithRetryAfterCap: d must be > 0, got 0s"},
		{[]httpretry.Option{httpretry.WithRetryableStatus(503, 600)}, "httpretry: WithRetryableStatus: codes[1] must be in [100, 599], got 600"},
		{[]httpretry.Option{httpretry.WithIdempotent(nil)}, "httpretry: WithIdempotent: nil predicate"},
		{[]httpretry.Option{httpretry.WithStrategy(nil)}, "httpretry: WithStrategy: nil Strategy"},
		{[]httpretry.Option{httpretry.WithHedging(-time.Second, 2)}, "httpretry: WithHedging: delay must be >= 0, got -1s"},
		{[]httpretry.Option{httpretry.WithHedging(0, 0)}, "httpretry: WithHedging: maxAttempts must be >= 1, got 0"},
		{[]httpretry.Option{httpretry.WithClock(nil)}, "httpretry: WithClock: nil Clock"},
		{[]httpretry.Option{httpretry.WithRandom(nil)}, "httpretry: WithRandom: nil Random"},
		{[]httpretry.Option{httpretry.WithMaxBufferedBody(-1)}, "httpretry: WithMaxBufferedBody: n must be >= 0, got -1"},
		{[]httpretry.Option{httpretry.WithMeterProvider(nil)}, "httpretry: WithMeterProvider: nil MeterProvider"},
		{[]httpretry.Option{httpretry.WithLogger(nil)}, "httpretry: WithLogger: nil Logger"},
		{[]httpretry.Option{nil}, "httpretry: opts[0]: nil Option"},
		{[]httpretry.Option{httpretry.WithStrategy(policy), httpretry.WithBackoff(rebound.DefaultBackoff())}, "httpretry: WithStrategy: cannot be combined with WithBackoff, which configures the built-in strategy"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			tr := httpretry.NewTransport(nil, tc.opts...)
			if err := tr.Err(); err == nil || err.Error() != tc.want {
				t.Fatalf("Err() = %v, want %q", err, tc.want)
			}
			body := &closeRecorder{Reader: strings.NewReader("x")}
			req, _ := http.NewRequest(http.MethodPut, "http://127.0.0.1:1", body)
			resp, err := tr.RoundTrip(req)
			if resp != nil || err == nil || err.Error() != tc.want {
				t.Fatalf("RoundTrip = %v, %v; want %q", resp, err, tc.want)
			}
			if !body.closed.Load() {
				t.Error("RoundTrip did not close the request body")
			}
		})
	}
}

func TestZeroTransport(t *testing.T) {
	var tr httpretry.Transport
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:1", nil)
	if _, err := tr.RoundTrip(req); err == nil || !strings.HasPrefix(err.Error(), "httpretry: ") {
		t.Fatalf("RoundTrip on a zero Transport = %v, want an httpretry error", err)
	}
}

type closeRecorder struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeRecorder) Close() error {
	c.closed.Store(true)
	return nil
}

// Clients told the same Retry-After come back spread over up to half a
// second after it (half the hint, when shorter), not in one wave.
func TestRetryAfterSpread(t *testing.T) {
	for _, tc := range []struct {
		hint string
		u    float64
		want time.Duration
	}{
		{"1", 0, time.Second},
		{"1", 0.5, 1250 * time.Millisecond},
		{"1", 0.999, 1499500 * time.Microsecond},
		{"10", 0.5, 10250 * time.Millisecond},
		{"0", 0.999, 999 * time.Millisecond}, // nothing to spread: the backoff, 1s × 0.999, decides
	} {
		client, clk := newClient(t, httpretry.WithRandom(clocktest.NewRand(tc.u)))
		srv := newServer(t, retryAfter(tc.hint, 503, 200))
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if got := clk.Sleeps(); len(got) != 1 || got[0] != tc.want {
			t.Errorf("Retry-After %s, random %v: waited %v, want %v", tc.hint, tc.u, got, tc.want)
		}
	}
}
