package httpretry_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
)

// attemptTimeout is short, so that hung attempts end quickly; tests
// assert counts and errors, never how long anything took.
const attemptTimeout = 100 * time.Millisecond

// hangFirst hangs the first n requests until the client gives up on them,
// and answers the others 200 "attempt n".
func hangFirst(n int) func(int, http.ResponseWriter, *http.Request) {
	return func(i int, w http.ResponseWriter, r *http.Request) {
		if i <= n {
			<-r.Context().Done()
			return
		}
		io.WriteString(w, "attempt "+string(rune('0'+i)))
	}
}

func stats(c *http.Client) rebound.Stats { return c.Transport.(*httpretry.Transport).Stats() }

func TestPerAttemptTimeoutRetries(t *testing.T) {
	srv := newServer(t, hangFirst(1))
	client, _ := newClient(t, httpretry.WithPerAttemptTimeout(attemptTimeout))
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "attempt 2" || srv.attempts() != 2 {
		t.Fatalf("got %q, server saw %d attempts; want attempt 2", got, srv.attempts())
	}
	if st := stats(client)["GET "+strings.TrimPrefix(srv.URL, "http://")]; st.AttemptTimeouts != 1 || st.Retries.Attempts != 1 {
		t.Fatalf("stats %+v, want 1 attempt timeout and 1 retry", st)
	}
}

// TestPerAttemptTimeoutNeverCutsBody: the timer stops at the response
// headers; a body that comes slowly after them is read to its end.
func TestPerAttemptTimeoutNeverCutsBody(t *testing.T) {
	srv := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-time.After(5 * attemptTimeout):
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "late")
	})
	client, _ := newClient(t, httpretry.WithPerAttemptTimeout(attemptTimeout))
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "late" || srv.attempts() != 1 {
		t.Fatalf("got %q after %d attempts, want late after 1", got, srv.attempts())
	}
}

func TestPerAttemptTimeoutEveryAttemptHangs(t *testing.T) {
	srv := newServer(t, hangFirst(1<<30))
	client, _ := newClient(t, httpretry.WithPerAttemptTimeout(attemptTimeout))
	_, err := client.Get(srv.URL)
	if !errors.Is(err, rebound.ErrAttemptTimeout) || !errors.Is(err, rebound.ErrAttemptsExhausted) {
		t.Fatalf("err %v, want the per-attempt timeout, attempts exhausted", err)
	}
	var ue *url.Error
	if !errors.As(err, &ue) || !ue.Timeout() || !strings.Contains(err.Error(), "per-attempt timeout (100ms)") {
		t.Fatalf("err %v: want a url.Error that is a timeout and names the per-attempt timeout", err)
	}
	if got := srv.attempts(); got != 3 {
		t.Fatalf("server saw %d attempts, want 3", got)
	}
}

// TestPerAttemptTimeoutNotIdempotent: a POST whose request was written may
// have been acted on: it is not sent again, unless it carries an
// Idempotency-Key.
func TestPerAttemptTimeoutNotIdempotent(t *testing.T) {
	for _, tc := range []struct {
		name     string
		key      bool
		attempts int
	}{
		{"plain", false, 1},
		{"idempotency key", true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, hangFirst(1))
			client, _ := newClient(t, httpretry.WithPerAttemptTimeout(attemptTimeout))
			req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("order"))
			if err != nil {
				t.Fatal(err)
			}
			if tc.key {
				req.Header.Set("Idempotency-Key", "k1")
			}
			resp, err := client.Do(req)
			if tc.key {
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
			} else if !errors.Is(err, rebound.ErrAttemptTimeout) || !errors.Is(err, rebound.ErrNotRetryable) {
				t.Fatalf("err %v, want the per-attempt timeout, not retryable", err)
			}
			if got := srv.attempts(); got != tc.attempts {
				t.Fatalf("server saw %d attempts, want %d", got, tc.attempts)
			}
		})
	}
}

// TestPerAttemptTimeoutNotWritten: a POST cut before it was written (here,
// while its connection was being dialled) never reached the server, so it
// is sent again though it is not idempotent.
func TestPerAttemptTimeoutNotWritten(t *testing.T) {
	srv := newServer(t, script(http.StatusOK))
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var dials atomic.Int32
	var d net.Dialer
	base := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials.Add(1) == 1 {
			// The first dial hangs until the test ends or its context does.
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-release:
				return nil, errors.New("released")
			}
		}
		return d.DialContext(ctx, network, addr)
	}}
	t.Cleanup(base.CloseIdleConnections)
	tr := httpretry.NewTransport(base, httpretry.WithPerAttemptTimeout(attemptTimeout))
	if err := tr.Err(); err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr}).Post(srv.URL, "text/plain", strings.NewReader("order"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "attempt 1" || srv.attempts() != 1 || dials.Load() != 2 {
		t.Fatalf("got %q, server saw %d requests after %d dials; want attempt 1, 1 request, 2 dials", got, srv.attempts(), dials.Load())
	}
	if st := tr.Stats()["POST "+strings.TrimPrefix(srv.URL, "http://")]; st.AttemptTimeouts != 1 {
		t.Fatalf("stats %+v, want 1 attempt timeout", st)
	}
}

// stallingBody is a replayable request body that sends a few bytes and
// then stalls, as an upload from a slow source does: until it is closed,
// or for ten per-attempt timeouts, after which its source fails (net/http
// waits for a body's Read to return before it ends a cut request).
type stallingBody struct {
	sent   bool
	closed chan struct{}
	once   sync.Once
}

func newStallingBody() *stallingBody { return &stallingBody{closed: make(chan struct{})} }

func (b *stallingBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, "par"), nil
	}
	select {
	case <-b.closed:
	case <-time.After(10 * attemptTimeout):
	}
	return 0, io.ErrClosedPipe
}

func (b *stallingBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

// TestPerAttemptTimeoutHeadersWritten: a POST cut while its body was still
// being written has reached the server (its handler runs on the headers),
// so it is not sent again, though the whole request was never written.
func TestPerAttemptTimeoutHeadersWritten(t *testing.T) {
	srv := newServer(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // ends when the client gives up
	})
	client, _ := newClient(t, httpretry.WithPerAttemptTimeout(attemptTimeout))
	var bodies []*stallingBody
	t.Cleanup(func() {
		for _, b := range bodies {
			b.Close()
		}
	})
	body := func() (io.ReadCloser, error) {
		b := newStallingBody()
		bodies = append(bodies, b)
		return b, nil
	}
	first, _ := body()
	req, err := http.NewRequest(http.MethodPost, srv.URL, first)
	if err != nil {
		t.Fatal(err)
	}
	req.GetBody = body
	req.ContentLength = 1 << 20
	_, err = client.Do(req)
	if !errors.Is(err, rebound.ErrAttemptTimeout) || !errors.Is(err, rebound.ErrNotRetryable) {
		t.Fatalf("err %v, want the per-attempt timeout, not retryable", err)
	}
	if got := srv.attempts(); got != 1 {
		t.Fatalf("server saw %d attempts, want 1", got)
	}
}

// lateRoundTripper answers its first request only once the request's
// context has ended, as a response that arrives just as the per-attempt
// timer fires would, and the others at once. A real server cannot time a
// response to that instant.
type lateRoundTripper struct{ n atomic.Int32 }

func (l *lateRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	n := l.n.Add(1)
	if n == 1 {
		<-r.Context().Done()
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Request: r,
		Body: io.NopCloser(strings.NewReader("attempt " + string(rune('0'+n))))}, nil
}

// TestPerAttemptTimeoutFiredAsResponseCame: a response that comes as the
// timer fires belongs to a cut attempt, whose context (and so its body) is
// gone: the attempt is retried, not handed to the caller.
func TestPerAttemptTimeoutFiredAsResponseCame(t *testing.T) {
	base := &lateRoundTripper{}
	tr := httpretry.NewTransport(base, httpretry.WithPerAttemptTimeout(attemptTimeout))
	if err := tr.Err(); err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr}).Get("http://example.test/")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "attempt 2" || base.n.Load() != 2 {
		t.Fatalf("got %q after %d attempts, want attempt 2", got, base.n.Load())
	}
	if st := tr.Stats()["GET example.test"]; st.AttemptTimeouts != 1 {
		t.Fatalf("stats %+v, want 1 attempt timeout", st)
	}
}

// TestPerAttemptTimeoutRequestDeadlineFirst: the request's own deadline,
// when it comes first, is what ends the request.
func TestPerAttemptTimeoutRequestDeadlineFirst(t *testing.T) {
	srv := newServer(t, hangFirst(1<<30))
	client, _ := newClient(t, httpretry.WithPerAttemptTimeout(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	_, err := client.Do(req)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rebound.ErrAttemptTimeout) {
		t.Fatalf("err %v, want the request's deadline, not the per-attempt timeout", err)
	}
	if got := srv.attempts(); got != 1 {
		t.Fatalf("server saw %d attempts, want 1", got)
	}
}

func TestWithPerAttemptTimeoutInvalid(t *testing.T) {
	err := httpretry.NewTransport(nil, httpretry.WithPerAttemptTimeout(-time.Second)).Err()
	if err == nil || !strings.Contains(err.Error(), "WithPerAttemptTimeout") {
		t.Fatalf("WithPerAttemptTimeout(-1s): %v, want an error naming it", err)
	}
}
