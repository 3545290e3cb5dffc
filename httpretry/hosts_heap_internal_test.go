package httpretry

import (
	"fmt"
	"net/http"
	"runtime"
	"testing"

	"github.com/rebound-go/rebound/internal/bounded"
)

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A Transport that sends requests to ever new hosts keeps a bounded
// number of them: a second run through 20 times its bound of hosts leaves
// the heap where the first left it, since the budgets and statistics of
// evicted hosts are freed (issue 13.3). BENCHMARKS.md quotes the figures
// this logs.
func TestHostsHeapFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("sends requests to 40,960 hosts")
	}
	tr := NewTransport(ok{})
	n := 0
	churn := func() {
		for range 20 * bounded.DefaultMax {
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://host-%d.example/", n), nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			n++
		}
	}
	before := heapAlloc()
	churn()
	first := heapAlloc()
	churn()
	second := heapAlloc()
	t.Logf("heap: %d B before, %d B after %d hosts (%d kept), %d B after %d more",
		before, first, 20*bounded.DefaultMax, tr.hosts.Len(), second, 20*bounded.DefaultMax)
	// Unbounded, the second run's hosts would hold about 18 MB.
	if growth := int64(second) - int64(first); growth > 256<<10 {
		t.Fatalf("heap grew by %d B over %d more hosts, want under 256 KiB", growth, 20*bounded.DefaultMax)
	}
	runtime.KeepAlive(tr)
}
