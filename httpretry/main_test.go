package httpretry_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rebound-go/rebound/httpretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/paralleltest"
	"github.com/rebound-go/rebound/internal/testmain"
)

func TestMain(m *testing.M) {
	// The tests that run in parallel wait out timeouts, quota windows and
	// rate limits on the real clock: they wait, they hardly compute.
	paralleltest.Set()
	testmain.Run(m)
}

// server is an httptest.Server that records what every attempt brought and
// counts the connections made to it. handle gets the 1-based number of the
// request.
type server struct {
	*httptest.Server
	conns atomic.Int32

	mu     sync.Mutex
	bodies [][]byte
	hdrs   []http.Header
}

func newServer(t testing.TB, handle func(n int, w http.ResponseWriter, r *http.Request)) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.bodies = append(s.bodies, body)
		s.hdrs = append(s.hdrs, r.Header.Clone())
		n := len(s.bodies)
		s.mu.Unlock()
		handle(n, w, r)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// attempts returns how many requests reached the server.
func (s *server) attempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.bodies)
}

func (s *server) body(i int) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bodies[i]
}

// script answers request n with statuses[n-1] (the last one repeats) and
// the body "attempt n".
func script(statuses ...int) func(n int, w http.ResponseWriter, r *http.Request) {
	return func(n int, w http.ResponseWriter, r *http.Request) {
		code := statuses[min(n, len(statuses))-1]
		w.WriteHeader(code)
		io.WriteString(w, "attempt "+strconv.Itoa(n))
	}
}

// newClient returns a client whose Transport retries on a fresh
// http.Transport, waits on an auto-advancing fake clock and draws jitter
// 0.5, so the default backoff waits 500ms, then 1s.
func newClient(t testing.TB, opts ...httpretry.Option) (*http.Client, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.NewAuto()
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	opts = append([]httpretry.Option{httpretry.WithClock(clk), httpretry.WithRandom(clocktest.NewRand(0.5))}, opts...)
	tr := httpretry.NewTransport(base, opts...)
	if err := tr.Err(); err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: tr}, clk
}

// readAll reads and closes resp's body.
func readAll(t testing.TB, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the response body: %v", err)
	}
	return string(b)
}
