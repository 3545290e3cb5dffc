package httpretry_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
)

// BenchmarkTricklingBody prices a retry after a 503 whose body (no
// Content-Length) trickles a byte every 10 ms for 20 s: the time of a
// request that gets that 503, then 200 on its retry. The Transport drains
// such a body for at most 50 ms, then closes it; the backoff is 1 µs, so
// the drain is what the figure shows (issue 13.4; before, the retry waited
// for the whole body).
func BenchmarkTricklingBody(b *testing.B) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%2 == 0 {
			return // 200
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for range 2000 {
			if _, err := w.Write([]byte("x")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-tick.C:
			case <-r.Context().Done():
				return
			}
		}
	}))
	defer srv.Close()
	tr, err := httpretry.New(nil, httpretry.WithBackoff(rebound.Backoff{Initial: time.Microsecond, Max: time.Microsecond, Multiplier: 1}))
	if err != nil {
		b.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Get(srv.URL)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d, want 200 after the retry", resp.StatusCode)
		}
	}
}
