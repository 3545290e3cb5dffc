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
	"sync"
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

// TestBufferLimitsPerCall: a body without GetBody that is larger than the
// per-call limit is sent once; one with GetBody is the caller's to replay
// and takes no room, whatever its size.
func TestBufferLimitsPerCall(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB
	for _, size := range []int64{0, int64(len(payload))} {
		t.Run("ContentLength="+strconv.FormatInt(size, 10), func(t *testing.T) {
			srv := newServer(t, script(503))
			client, clk := newClient(t, httpretry.WithBufferLimits(16<<10, 1024))
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
	t.Run("GetBody", func(t *testing.T) {
		srv := newServer(t, script(503, 200))
		client, _ := newClient(t, httpretry.WithBufferLimits(1, 1))
		req, _ := http.NewRequest(http.MethodPut, srv.URL, bytes.NewReader(payload))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || readAll(t, resp) != "attempt 2" || !bytes.Equal(srv.body(1), payload) {
			t.Fatalf("got %d after %d attempts, want 200 after 2 with the body replayed", resp.StatusCode, srv.attempts())
		}
	})
}

// TestBufferLimitsTotal: the bodies a Transport buffers at once share its
// total; a request whose body would pass it is sent once, and what a
// request held is given back when its RoundTrip returns.
func TestBufferLimitsTotal(t *testing.T) {
	const requests = 3
	arrived := make(chan struct{}, requests)
	release := make(chan struct{})
	var mu sync.Mutex
	seen := map[string]int{}
	srv := newServer(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("X-Request")]++
		n := seen[r.Header.Get("X-Request")]
		mu.Unlock()
		if n == 1 && r.Header.Get("X-Request") != "after" {
			// Hold every first attempt until all three have arrived, so
			// that all three bodies are buffered at once.
			arrived <- struct{}{}
			<-release
			w.WriteHeader(503)
			return
		}
		if n == 1 {
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(200)
	})
	// Two 1000-byte bodies fit in 2500 bytes; a third does not.
	client, _ := newClient(t, httpretry.WithBufferLimits(2500, 1000))
	body := bytes.Repeat([]byte("x"), 1000)
	send := func(id string) (int, error) {
		req, _ := http.NewRequest(http.MethodPut, srv.URL, struct{ io.Reader }{bytes.NewReader(body)})
		req.ContentLength = int64(len(body))
		req.Header.Set("X-Request", id)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	codes := make(chan int, requests)
	for i := range requests {
		go func() {
			code, err := send(strconv.Itoa(i))
			if err != nil {
				t.Error(err)
			}
			codes <- code
		}()
	}
	for range requests {
		select {
		case <-arrived:
		case <-time.After(30 * time.Second):
			t.Fatal("the three first attempts did not all arrive")
		}
	}
	close(release)
	got := map[int]int{}
	for range requests {
		got[<-codes]++
	}
	if got[200] != 2 || got[503] != 1 {
		t.Fatalf("statuses %v: want two requests retried to 200 and the one past the total sent once (503)", got)
	}
	mu.Lock()
	attempts := 0
	for _, n := range seen {
		attempts += n
	}
	mu.Unlock()
	if attempts != 5 {
		t.Fatalf("%d attempts at the server, want 5 (2+2+1)", attempts)
	}
	// Every RoundTrip gave its room back: a request alone is retried.
	if code, err := send("after"); err != nil || code != 200 {
		t.Fatalf("a later request: %d, %v; want 200 after a retry", code, err)
	}
}

// TestUnreplayableBodyError: a request whose body cannot be sent again is
// committed to its one attempt, as a gRPC call whose request outgrew the
// replay buffer is: it fails with rebound.ErrCommitted as the reason, and
// the text says why.
func TestUnreplayableBodyError(t *testing.T) {
	client, _ := newClient(t, httpretry.WithBufferLimits(1, 1))
	req, _ := http.NewRequest(http.MethodPut, "http://"+closedAddr(t), struct{ io.Reader }{strings.NewReader("xy")})
	_, err := client.Do(req)
	var re *rebound.Error
	if !errors.As(err, &re) || !errors.Is(re.Reason, rebound.ErrCommitted) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("err = %v, want rebound.ErrCommitted as the reason, and the dial error", err)
	}
	if !strings.Contains(err.Error(), "httpretry: gave up after 1 attempt (call committed: request body cannot be replayed): ") {
		t.Fatalf("err = %q, want it to say the body could not be replayed", err)
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
	client, clk := newClient(t, httpretry.WithRetryDelayCap(10*time.Second))
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
		{"Retry-After", retryAfter("120", 503, 200), []httpretry.Option{httpretry.WithRetryDelayCap(time.Hour)}},
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
	client, _ := newClient(t, httpretry.WithBudgetPerHost(budget))
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
	client, _ := newClient(t, httpretry.WithBudgetPerHost(func(string) rebound.Budget { return throttle }))
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
	client, _ := newClient(t, httpretry.WithBudgetPerHost(nil), httpretry.WithMaxAttempts(5))
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

// TestRetriesDisabled: WithRetriesDisabled sends every request once,
// whatever the options and overrides that would add attempts or hedges.
func TestRetriesDisabled(t *testing.T) {
	policy, err := rebound.NewRetrier(rebound.RetryPolicy{MaxAttempts: 3, Backoff: rebound.DefaultBackoff()},
		rebound.WithClock(clocktest.NewAuto()))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts []httpretry.Option
		ov   *rebound.Override
	}{
		{"alone", nil, nil},
		{"after WithMaxAttempts", []httpretry.Option{httpretry.WithMaxAttempts(5)}, nil},
		{"before WithMaxAttempts", []httpretry.Option{httpretry.WithRetriesDisabled(), httpretry.WithMaxAttempts(5)}, nil},
		{"with hedging", []httpretry.Option{httpretry.WithHedging(0, 3)}, nil},
		{"with a strategy", []httpretry.Option{httpretry.WithStrategy(policy)}, nil},
		{"with a trusted override", []httpretry.Option{httpretry.WithTrustedOverrides()}, &rebound.Override{MaxAttempts: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, script(503, 200))
			base := &http.Transport{}
			t.Cleanup(base.CloseIdleConnections)
			// A fake clock, and no WithRandom, which WithStrategy refuses:
			// a retry would not wait, and would show.
			tr := httpretry.NewTransport(base, append(tc.opts, httpretry.WithClock(clocktest.NewAuto()), httpretry.WithRetriesDisabled())...)
			if err := tr.Err(); err != nil {
				t.Fatal(err)
			}
			client := &http.Client{Transport: tr}
			var n int
			ctx := httpretry.CountAttempts(context.Background(), &n)
			if tc.ov != nil {
				ctx = httpretry.Override(ctx, *tc.ov)
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 503 || srv.attempts() != 1 || n != 1 {
				t.Fatalf("got %d; the server saw %d attempts, CountAttempts %d; want 503 after 1", resp.StatusCode, srv.attempts(), n)
			}
		})
	}
}

// TestBudgetShared: WithBudget's budget is one for every host, and it must
// allow each retry beside the host's own (the default token bucket, which
// never runs short here, or none): three retries' worth of tokens, spent
// by whichever hosts fail first.
func TestBudgetShared(t *testing.T) {
	for name, perHost := range map[string][]httpretry.Option{
		"default per host": nil,
		"none per host":    {httpretry.WithBudgetPerHost(nil)},
	} {
		t.Run(name, func(t *testing.T) {
			a := newServer(t, script(503))
			b := newServer(t, script(503))
			shared, err := rebound.NewTokenBucket(rebound.TokenBucketConfig{Capacity: 15, RetryCost: 5, TimeoutCost: 10})
			if err != nil {
				t.Fatal(err)
			}
			client, _ := newClient(t, append(perHost, httpretry.WithBudget(shared))...)
			for i, step := range []struct {
				srv      *server
				attempts int // the server's total after the request
			}{
				{a, 3}, // two retries: one left
				{b, 2}, // b's own budget allows, the shared one one retry
				{a, 4}, // nothing left for either host
				{b, 3},
			} {
				resp, err := client.Get(step.srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 503 || step.srv.attempts() != step.attempts {
					t.Fatalf("request %d: got %d with %d attempts, want 503 with %d", i+1, resp.StatusCode, step.srv.attempts(), step.attempts)
				}
			}
		})
	}
}

// TestBudgetSharedAndPerHost: a retry needs the leave of both the host's
// budget and WithBudget's, and a refusal by one spends nothing of the
// other.
func TestBudgetSharedAndPerHost(t *testing.T) {
	a := newServer(t, script(503))
	b := newServer(t, script(503))
	shared, err := rebound.NewTokenBucket(rebound.TokenBucketConfig{Capacity: 15, RetryCost: 5, TimeoutCost: 10})
	if err != nil {
		t.Fatal(err)
	}
	perHost := func(string) rebound.Budget {
		bucket, err := rebound.NewTokenBucket(rebound.TokenBucketConfig{Capacity: 5, RetryCost: 5, TimeoutCost: 10})
		if err != nil {
			t.Error(err)
		}
		return bucket
	}
	client, _ := newClient(t, httpretry.WithBudget(shared), httpretry.WithBudgetPerHost(perHost))
	for i, step := range []struct {
		srv      *server
		attempts int
	}{
		{a, 2}, // a's own bucket allows one retry; the shared one had three
		{a, 3}, // a's is empty: its refusal took nothing from the shared one
		{b, 2}, // b's own allows one, and the shared one its second
	} {
		resp, err := client.Get(step.srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if step.srv.attempts() != step.attempts {
			t.Fatalf("request %d: server saw %d attempts in all, want %d", i+1, step.srv.attempts(), step.attempts)
		}
	}
	if got := shared.Tokens(); got != 5 {
		t.Errorf("shared bucket holds %d tokens, want 5 (two retries taken)", got)
	}
}

// TestBudgetSharedHedges: hedges spend WithBudget's budget too, across
// hosts.
func TestBudgetSharedHedges(t *testing.T) {
	a := newServer(t, script(503))
	b := newServer(t, script(503))
	shared, err := rebound.NewTokenBucket(rebound.TokenBucketConfig{Capacity: 5, RetryCost: 5, TimeoutCost: 10})
	if err != nil {
		t.Fatal(err)
	}
	client, _ := newClient(t, httpretry.WithHedging(0, 3), httpretry.WithBudget(shared))
	for _, srv := range []*server{a, b} {
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if a.attempts() != 2 || b.attempts() != 1 {
		t.Fatalf("servers saw %d and %d attempts, want 2 (one hedge, all the shared budget allows) and 1", a.attempts(), b.attempts())
	}
}

// TestBudgetWithStrategy: with WithStrategy the strategy decides retries;
// WithBudget and WithBudgetPerHost apply to hedges only.
func TestBudgetWithStrategy(t *testing.T) {
	srv := newServer(t, script(503))
	clk := clocktest.NewAuto()
	policy, err := rebound.NewRetrier(rebound.RetryPolicy{MaxAttempts: 3, Backoff: rebound.DefaultBackoff()},
		rebound.WithClock(clk), rebound.WithRandom(clocktest.NewRand(0.25)))
	if err != nil {
		t.Fatal(err)
	}
	empty, err := rebound.NewTokenBucket(rebound.TokenBucketConfig{Capacity: 4, RetryCost: 5, TimeoutCost: 10})
	if err != nil {
		t.Fatal(err)
	}
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	client := &http.Client{Transport: httpretry.NewTransport(base, httpretry.WithStrategy(policy),
		httpretry.WithBudget(empty), httpretry.WithBudgetPerHost(func(string) rebound.Budget { return empty }))}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if srv.attempts() != 3 {
		t.Fatalf("server saw %d attempts, want the strategy's 3", srv.attempts())
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
		{[]httpretry.Option{httpretry.WithRetryDelayCap(0)}, "httpretry: WithRetryDelayCap: d must be > 0, got 0s"},
		{[]httpretry.Option{httpretry.WithRetryableStatus(503, 600)}, "httpretry: WithRetryableStatus: codes[1] must be in [100, 599], got 600"},
		{[]httpretry.Option{httpretry.WithIdempotent(nil)}, "httpretry: WithIdempotent: nil predicate"},
		{[]httpretry.Option{httpretry.WithStrategy(nil)}, "httpretry: WithStrategy: nil Strategy"},
		{[]httpretry.Option{httpretry.WithHedging(-time.Second, 2)}, "httpretry: WithHedging: delay must be >= 0, got -1s"},
		{[]httpretry.Option{httpretry.WithHedging(0, 0)}, "httpretry: WithHedging: maxAttempts must be >= 1, got 0"},
		{[]httpretry.Option{httpretry.WithClock(nil)}, "httpretry: WithClock: nil Clock"},
		{[]httpretry.Option{httpretry.WithRandom(nil)}, "httpretry: WithRandom: nil Random"},
		{[]httpretry.Option{httpretry.WithBufferLimits(10, 20)}, "httpretry: WithBufferLimits: need 0 < perCall <= total, got total 10, perCall 20"},
		{[]httpretry.Option{httpretry.WithBufferLimits(0, 0)}, "httpretry: WithBufferLimits: need 0 < perCall <= total, got total 0, perCall 0"},
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
