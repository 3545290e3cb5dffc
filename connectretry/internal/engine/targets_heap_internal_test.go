package engine

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/rebound-go/rebound/internal/bounded"
	"github.com/rebound-go/rebound/serviceconfig"
)

func heapAlloc() uint64 {
	for range 5 { // cleanups of collected throttles run after the cycle that found them
		runtime.GC()
		runtime.Gosched()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// An Interceptor that talks to ever new server names, each with its A6
// throttle, keeps a bounded number of them: a second run through 20 times
// its bound of names leaves the heap where the first left it, since
// evicted names and their throttles are freed (issue 13.3). (The first run
// also grows the process-wide map of throttles to its peak, which Go maps
// keep.) BENCHMARKS.md quotes the figures this logs.
func TestTargetsHeapFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("makes 40,960 server names")
	}
	cfg, err := serviceconfig.Parse([]byte(`{"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}`))
	if err != nil {
		t.Fatal(err)
	}
	i, err := New(cfg, NewOptions(), testMajor{}, "test")
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("%s-%p-", t.Name(), i)
	n := 0
	churn := func() {
		for range 20 * bounded.DefaultMax {
			i.Target(fmt.Sprint(prefix, n, ":443"))
			n++
		}
	}
	before := heapAlloc()
	churn()
	first := heapAlloc()
	churn()
	second := heapAlloc()
	t.Logf("heap: %d B before, %d B after %d server names (%d kept), %d B after %d more",
		before, first, 20*bounded.DefaultMax, i.Targets(), second, 20*bounded.DefaultMax)
	// Unbounded, the second run's names would hold about 18 MB. The slack
	// is for the map of throttles, whose size follows how many collected
	// throttles await their cleanup at its peak.
	if growth := int64(second) - int64(first); growth > 1<<20 {
		t.Fatalf("heap grew by %d B over %d more server names, want under 1 MiB", growth, 20*bounded.DefaultMax)
	}
	runtime.KeepAlive(i)
}
