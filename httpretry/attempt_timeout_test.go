package httpretry_test

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/rebound-go/rebound/internal/stretch"
)

// attemptTimeout is short, so that hung attempts end quickly; tests
// assert counts and errors, never how long anything took. An attempt that
// is to answer, or to reach the server, must do so within it, which a busy
// machine may not: the tests that need it stretch it (see package
// stretch), up to maxAttemptTimeout, and tell that outcome (tooSlow) from
// any other.
const (
	attemptTimeout    = 100 * time.Millisecond
	maxAttemptTimeout = 7 * time.Second
)

// attempts returns how many attempts client made for its one request to
// method srv, and how many of them their timers cut.
func attempts(client *http.Client, method string, srv *server) (n int, cut uint64) {
	st := stats(client)[method+" "+strings.TrimPrefix(srv.URL, "http://")]
	return 1 + int(st.Retries.Attempts), st.AttemptTimeouts
}

// getBody gets url with client and returns the response's body, read and
// closed, so that a try that ends early leaves no connection behind.
func getBody(t *testing.T, client *http.Client, url string) (string, error) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	return readAll(t, resp), nil
}

// allCut reports whether a request's n attempts are accounted for when
// only their timers cut them: all but the last when it succeeded, all of
// them when it failed with ErrAttemptTimeout.
func allCut(err error, n int, cut uint64) bool {
	if err == nil {
		return cut == uint64(n-1)
	}
	return errors.Is(err, rebound.ErrAttemptTimeout) && cut == uint64(n)
}

// tooSlow is a stretch scenario's outcome that only a slow machine
// explains: want attempts were to be made, n were, cut of them were cut by
// their timers, every one past want among them, or the server saw fewer
// than the client made because some were cut on the way.
func tooSlow(what string, n, want int, cut uint64) error {
	return fmt.Errorf("%s: %d attempts, %d cut by their timers, where %d were to be made", what, n, cut, want)
}

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
	t.Parallel()
	stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(d time.Duration) error {
		srv := newServer(t, hangFirst(1))
		client, _ := newClient(t, httpretry.WithPerAttemptTimeout(d))
		got, err := getBody(t, client, srv.URL)
		n, cut := attempts(client, http.MethodGet, srv)
		if !allCut(err, n, cut) {
			t.Fatalf("%v after %d attempts, %d cut: every attempt but one that answered must have been cut", err, n, cut)
		}
		if err != nil || n > 2 {
			return tooSlow(fmt.Sprint(err), n, 2, cut)
		}
		if got != "attempt 2" || srv.attempts() != 2 || n != 2 {
			t.Fatalf("got %q after %d attempts, server saw %d; want attempt 2 after 2", got, n, srv.attempts())
		}
		return nil
	})
}

// TestPerAttemptTimeoutNeverCutsBody: the timer stops at the response
// headers; a body that comes slowly after them is read to its end.
func TestPerAttemptTimeoutNeverCutsBody(t *testing.T) {
	t.Parallel()
	// The headers must come within the timeout; on a busy machine they
	// may not, and the attempt is cut before them, as it should be.
	stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(d time.Duration) error {
		srv := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			select {
			case <-time.After(5 * d):
			case <-r.Context().Done():
				return
			}
			io.WriteString(w, "late")
		})
		client, _ := newClient(t, httpretry.WithPerAttemptTimeout(d))
		resp, err := client.Get(srv.URL)
		n, cut := attempts(client, http.MethodGet, srv)
		if !allCut(err, n, cut) {
			t.Fatalf("%v after %d attempts, %d cut: every attempt but one that answered must have been cut", err, n, cut)
		}
		if err != nil {
			return tooSlow(err.Error(), n, 1, cut)
		}
		if got := readAll(t, resp); got != "late" {
			t.Fatalf("got %q after %d attempts, want late", got, n)
		}
		if n > 1 {
			return tooSlow("late", n, 1, cut)
		}
		if srv.attempts() != 1 {
			t.Fatalf("server saw %d attempts, want 1", srv.attempts())
		}
		return nil
	})
}

func TestPerAttemptTimeoutEveryAttemptHangs(t *testing.T) {
	t.Parallel()
	stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(d time.Duration) error {
		srv := newServer(t, hangFirst(1<<30))
		client, _ := newClient(t, httpretry.WithPerAttemptTimeout(d))
		_, err := client.Get(srv.URL)
		if !errors.Is(err, rebound.ErrAttemptTimeout) || !errors.Is(err, rebound.ErrAttemptsExhausted) {
			t.Fatalf("err %v, want the per-attempt timeout, attempts exhausted", err)
		}
		var ue *url.Error
		if !errors.As(err, &ue) || !ue.Timeout() || !strings.Contains(err.Error(), fmt.Sprintf("per-attempt timeout (%v)", d)) {
			t.Fatalf("err %v: want a url.Error that is a timeout and names the per-attempt timeout", err)
		}
		if n, cut := attempts(client, http.MethodGet, srv); n != 3 || cut != 3 {
			t.Fatalf("%d attempts, %d cut; want 3, all cut", n, cut)
		}
		switch got := srv.attempts(); {
		case got < 3:
			return tooSlow(fmt.Sprint("the server saw ", got), 3, 3, 3)
		case got > 3:
			t.Fatalf("server saw %d attempts, want 3", got)
		}
		return nil
	})
}

// TestPerAttemptTimeoutNotIdempotent: a POST whose request was written may
// have been acted on: it is not sent again, unless it carries an
// Idempotency-Key.
func TestPerAttemptTimeoutNotIdempotent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		key      bool
		attempts int
	}{
		{"plain", false, 1},
		{"idempotency key", true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(d time.Duration) error {
				srv := newServer(t, hangFirst(1))
				client, _ := newClient(t, httpretry.WithPerAttemptTimeout(d))
				req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("order"))
				if err != nil {
					t.Fatal(err)
				}
				if tc.key {
					req.Header.Set("Idempotency-Key", "k1")
				}
				resp, err := client.Do(req)
				if err == nil {
					readAll(t, resp)
				}
				n, cut := attempts(client, http.MethodPost, srv)
				if tc.key {
					if !allCut(err, n, cut) {
						t.Fatalf("%v after %d attempts, %d cut: every attempt but one that answered must have been cut", err, n, cut)
					}
					if err != nil || n > tc.attempts {
						return tooSlow(fmt.Sprint(err), n, tc.attempts, cut)
					}
				} else if !errors.Is(err, rebound.ErrAttemptTimeout) || !errors.Is(err, rebound.ErrNotRetryable) {
					t.Fatalf("err %v, want the per-attempt timeout, not retryable", err)
				}
				// The server counts a request once it has read its body,
				// which may come after the client gave up on it.
				switch got := srv.attempts(); {
				case got < tc.attempts:
					return tooSlow(fmt.Sprint("the server saw ", got), n, tc.attempts, cut)
				case got > tc.attempts:
					t.Fatalf("server saw %d attempts, want %d", got, tc.attempts)
				}
				return nil
			})
		})
	}
}

// TestPerAttemptTimeoutNotWritten: a POST cut before it was written (here,
// while its connection was being dialled) never reached the server, so it
// is sent again though it is not idempotent.
func TestPerAttemptTimeoutNotWritten(t *testing.T) {
	t.Parallel()
	stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(timeout time.Duration) error {
		srv := newServer(t, script(http.StatusOK))
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		var dials atomic.Int32
		var d net.Dialer
		base := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials.Add(1) == 1 {
				// The first dial hangs until the test ends or its context
				// does.
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
		tr := httpretry.NewTransport(base, httpretry.WithPerAttemptTimeout(timeout))
		if err := tr.Err(); err != nil {
			t.Fatal(err)
		}
		resp, err := (&http.Client{Transport: tr}).Post(srv.URL, "text/plain", strings.NewReader("order"))
		st := tr.Stats()["POST "+strings.TrimPrefix(srv.URL, "http://")]
		if err != nil {
			// The second attempt, written, was cut before its answer
			// came, and a POST that may have been acted on is not sent
			// again.
			if errors.Is(err, rebound.ErrAttemptTimeout) && errors.Is(err, rebound.ErrNotRetryable) && dials.Load() == 2 && st.AttemptTimeouts == 2 {
				return tooSlow(err.Error(), 2, 2, st.AttemptTimeouts)
			}
			t.Fatal(err)
		}
		if got := readAll(t, resp); got != "attempt 1" || srv.attempts() != 1 || dials.Load() != 2 {
			t.Fatalf("got %q, server saw %d requests after %d dials; want attempt 1, 1 request, 2 dials", got, srv.attempts(), dials.Load())
		}
		if st.AttemptTimeouts != 1 {
			t.Fatalf("stats %+v, want 1 attempt timeout", st)
		}
		return nil
	})
}

// stallingBody is a replayable request body that sends a few bytes and
// then stalls, as an upload from a slow source does: until it is closed,
// or for stall, after which its source fails (net/http waits for a body's
// Read to return before it ends a cut request).
type stallingBody struct {
	sent   bool
	stall  time.Duration
	closed chan struct{}
	once   sync.Once
}

func newStallingBody(stall time.Duration) *stallingBody {
	return &stallingBody{stall: stall, closed: make(chan struct{})}
}

func (b *stallingBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, "par"), nil
	}
	select {
	case <-b.closed:
	case <-time.After(b.stall):
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
	t.Parallel()
	stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(d time.Duration) error {
		handled := make(chan struct{}, 2)
		srv := newServer(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			select {
			case handled <- struct{}{}:
			default:
			}
		})
		client, _ := newClient(t, httpretry.WithPerAttemptTimeout(d))
		var bodies []*stallingBody
		t.Cleanup(func() {
			for _, b := range bodies {
				b.Close()
			}
		})
		body := func() (io.ReadCloser, error) {
			b := newStallingBody(10 * d)
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
		switch n, cut := attempts(client, http.MethodPost, srv); {
		case cut != uint64(n):
			t.Fatalf("%d attempts, %d cut; want every one cut", n, cut)
		case n > 1:
			// The first was cut before its headers were written, and so
			// sent again.
			return tooSlow(err.Error(), n, 1, cut)
		}
		// The server's handler runs once it has read the body the client
		// gave up on, which it may not have yet.
		select {
		case <-handled:
		case <-time.After(10 * time.Second):
			t.Fatal("the server never saw the request")
		}
		if got := srv.attempts(); got != 1 {
			t.Fatalf("server saw %d attempts, want 1", got)
		}
		return nil
	})
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
	t.Parallel()
	stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(d time.Duration) error {
		base := &lateRoundTripper{}
		tr := httpretry.NewTransport(base, httpretry.WithPerAttemptTimeout(d))
		if err := tr.Err(); err != nil {
			t.Fatal(err)
		}
		got, err := getBody(t, &http.Client{Transport: tr}, "http://example.test/")
		n, cut := int(base.n.Load()), tr.Stats()["GET example.test"].AttemptTimeouts
		if !allCut(err, n, cut) {
			t.Fatalf("%v after %d attempts, %d cut: every attempt but one that answered must have been cut", err, n, cut)
		}
		if err != nil || n > 2 {
			return tooSlow(fmt.Sprint(err), n, 2, cut)
		}
		if got != "attempt 2" || n != 2 {
			t.Fatalf("got %q after %d attempts, want attempt 2", got, n)
		}
		return nil
	})
}

// TestPerAttemptTimeoutRequestDeadlineFirst: the request's own deadline,
// when it comes first, is what ends the request.
func TestPerAttemptTimeoutRequestDeadlineFirst(t *testing.T) {
	t.Parallel()
	// The request's deadline must pass while the attempt is at the server.
	stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(d time.Duration) error {
		srv := newServer(t, hangFirst(1<<30))
		client, _ := newClient(t, httpretry.WithPerAttemptTimeout(time.Hour))
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		_, err := client.Do(req)
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rebound.ErrAttemptTimeout) {
			t.Fatalf("err %v, want the request's deadline, not the per-attempt timeout", err)
		}
		if n, _ := attempts(client, http.MethodGet, srv); n != 1 {
			t.Fatalf("%d attempts, want 1", n)
		}
		switch got := srv.attempts(); {
		case got == 0:
			return errors.New("the request did not reach the server before its deadline")
		case got > 1:
			t.Fatalf("server saw %d attempts, want 1", got)
		}
		return nil
	})
}

func TestWithPerAttemptTimeoutInvalid(t *testing.T) {
	err := httpretry.NewTransport(nil, httpretry.WithPerAttemptTimeout(-time.Second)).Err()
	if err == nil || !strings.Contains(err.Error(), "WithPerAttemptTimeout") {
		t.Fatalf("WithPerAttemptTimeout(-1s): %v, want an error naming it", err)
	}
}
