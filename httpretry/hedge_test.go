package httpretry_test

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rebound-go/rebound/httpretry"
	"github.com/rebound-go/rebound/internal/clocktest"
)

func TestHedgeFirstSuccessWins(t *testing.T) {
	started := make(chan struct{})
	canceled := make(chan struct{})
	srv := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			// A straggler: it answers only once the hedge has won.
			close(started)
			<-r.Context().Done()
			close(canceled)
			return
		}
		io.WriteString(w, "hedge "+strconv.Itoa(n))
	})
	clk := clocktest.New()
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	client := &http.Client{Transport: httpretry.NewTransport(base, httpretry.WithClock(clk), httpretry.WithHedging(100*time.Millisecond, 3))}

	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := client.Get(srv.URL)
		done <- result{resp, err}
	}()
	<-started
	if !clk.WaitPending(1) {
		t.Fatal("no hedge was scheduled")
	}
	clk.Advance(100 * time.Millisecond)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	// The winner's body is read after RoundTrip returned: its context lives
	// on until the body is closed.
	if got := readAll(t, r.resp); got != "hedge 2" {
		t.Fatalf("got %q, want the hedge's answer", got)
	}
	select {
	case <-canceled:
	case <-time.After(10 * time.Second):
		t.Fatal("the losing attempt was not cancelled")
	}
	if srv.attempts() != 2 {
		t.Fatalf("server saw %d attempts, want 2", srv.attempts())
	}
}

// tracking records every response of its base RoundTripper and whether its
// body was closed.
type tracking struct {
	base http.RoundTripper

	mu     sync.Mutex
	bodies map[*http.Response]*closeRecorder
}

func (tr *tracking) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := tr.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body := &closeRecorder{Reader: resp.Body}
	inner := resp.Body
	resp.Body = struct {
		io.Reader
		io.Closer
	}{body, closerFunc(func() error { body.Close(); return inner.Close() })}
	tr.mu.Lock()
	tr.bodies[resp] = body
	tr.mu.Unlock()
	return resp, nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

func TestHedgeLosersClosed(t *testing.T) {
	// All three attempts reach the server before any is answered.
	var arrived sync.WaitGroup
	arrived.Add(3)
	srv := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		arrived.Wait()
		script(200)(n, w, r)
	})
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	tr := &tracking{base: base, bodies: map[*http.Response]*closeRecorder{}}
	client := &http.Client{Transport: httpretry.NewTransport(tr, httpretry.WithHedging(0, 3))}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	tr.mu.Lock()
	for r, body := range tr.bodies {
		if r == resp && body.closed.Load() {
			t.Error("the winning response was closed")
		}
		if r != resp && !body.closed.Load() {
			t.Error("a losing response was left open")
		}
	}
	tr.mu.Unlock()
	if got := readAll(t, resp); !strings.HasPrefix(got, "attempt ") {
		t.Fatalf("got %q, want one attempt's body", got)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, body := range tr.bodies {
		if !body.closed.Load() {
			t.Error("a response was left open")
		}
	}
	if srv.attempts() != 3 || len(tr.bodies) == 0 {
		t.Fatalf("server saw %d attempts, want 3", srv.attempts())
	}
}

func TestHedgeAllFailReturnsLastResponse(t *testing.T) {
	srv := newServer(t, script(503))
	client, _ := newClient(t, httpretry.WithHedging(0, 3))
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); resp.StatusCode != 503 || !strings.HasPrefix(got, "attempt ") {
		t.Fatalf("got %d %q, want a 503 with its body", resp.StatusCode, got)
	}
	if srv.attempts() != 3 {
		t.Fatalf("server saw %d attempts, want 3", srv.attempts())
	}
}

func TestHedgeOnlyIdempotent(t *testing.T) {
	srv := newServer(t, script(503, 200))
	client, _ := newClient(t, httpretry.WithHedging(0, 3))
	resp, err := client.Post(srv.URL, "text/plain", strings.NewReader("once"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 503 || readAll(t, resp) != "attempt 1" || srv.attempts() != 1 {
		t.Fatalf("got %d after %d attempts, want 503 after 1", resp.StatusCode, srv.attempts())
	}
}

func TestHedgeBodies(t *testing.T) {
	srv := newServer(t, script(503, 503, 200))
	client, _ := newClient(t, httpretry.WithHedging(0, 3))
	req, _ := http.NewRequest(http.MethodPut, srv.URL, strings.NewReader("same bytes"))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || srv.attempts() != 3 {
		t.Fatalf("got %d after %d attempts, want 200 after 3", resp.StatusCode, srv.attempts())
	}
	for i := range 3 {
		if got := string(srv.body(i)); got != "same bytes" {
			t.Errorf("attempt %d sent %q", i+1, got)
		}
	}
}
