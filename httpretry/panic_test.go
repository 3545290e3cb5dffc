package httpretry_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
)

var errBoom = errors.New("boom from a callback")

// raised runs f and returns what it panicked with on this goroutine.
func raised(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

// carried checks that v is the panic of a callback carried from another
// goroutine: an error that keeps the original value (errors.Is finds
// errBoom) and whose message holds it and the stack where it happened,
// down to fn.
func carried(t *testing.T, v any, fn string) {
	t.Helper()
	err, ok := v.(error)
	if !ok || !errors.Is(err, errBoom) {
		t.Fatalf("recovered %#v, want a panic carrying errBoom", v)
	}
	if msg := err.Error(); !strings.Contains(msg, errBoom.Error()) || !strings.Contains(msg, fn) {
		t.Fatalf("panic message %q lacks the value or the frame %s", msg, fn)
	}
}

func panicInHTTPClassifier() { panic(errBoom) }

// TestPanicInClassifierJudgingHedge: a classifier that panics while
// judging a hedge, off the caller's goroutine, does not end the process:
// the request panics on the caller's goroutine with it, and the other
// attempts are cancelled (the server sees their requests end).
func TestPanicInClassifierJudgingHedge(t *testing.T) {
	var cancelled atomic.Int32
	srv := newServer(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Attempt") == "1" { // the second attempt: one before it
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		<-r.Context().Done()
		cancelled.Add(1)
	})
	var calls atomic.Int32
	classify := httpretry.WithClassifier(func(_ httpretry.Failure, info rebound.RetryInfo) rebound.RetryInfo {
		if calls.Add(1) == 1 {
			panicInHTTPClassifier()
		}
		return info
	})
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	client := &http.Client{Transport: httpretry.NewTransport(base, httpretry.WithHedging(time.Millisecond, 3), httpretry.WithPreviousAttemptsHeader("Attempt"), classify)}
	v := raised(func() {
		if resp, err := client.Get(srv.URL); err == nil {
			resp.Body.Close()
		}
	})
	carried(t, v, "panicInHTTPClassifier")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		n := srv.attempts()
		if n >= 1 && n <= 3 && int(cancelled.Load()) == n-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server saw %d attempts, %d of them cancelled; want 1 to 3, all but the failed one cancelled", n, cancelled.Load())
		}
	}
}

// panickyBody is a response body of the application's transport whose
// Read panics.
type panickyBody struct{ io.ReadCloser }

func (panickyBody) Read([]byte) (int, error) { panicInBodyRead(); return 0, nil }

func panicInBodyRead() { panic(errBoom) }

// panickyBodies gives every 503 response a panickyBody.
type panickyBodies struct{ base http.RoundTripper }

func (p panickyBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := p.base.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusServiceUnavailable {
		resp.Body = panickyBody{resp.Body}
	}
	return resp, err
}

// TestPanicDrainingABody: the body of a response that will not be
// returned is drained on a goroutine of its own; a base transport whose
// body panics there does not end the process: the request panics on the
// caller's goroutine, after the body is closed, and no retry is made.
func TestPanicDrainingABody(t *testing.T) {
	srv := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "busy")
	})
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	client := &http.Client{Transport: httpretry.NewTransport(panickyBodies{base},
		httpretry.WithBackoff(rebound.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Multiplier: 1}))}
	v := raised(func() {
		if resp, err := client.Get(srv.URL); err == nil {
			resp.Body.Close()
		}
	})
	carried(t, v, "panicInBodyRead")
	if got := srv.attempts(); got != 1 {
		t.Fatalf("server saw %d attempts, want 1: the panic ends the request", got)
	}
}
