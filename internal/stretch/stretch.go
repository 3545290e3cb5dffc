// Package stretch runs, for tests, a scenario whose outcome depends on the
// machine keeping up with a time margin (an attempt answering within its
// per-attempt timeout, a request reaching the server before a deadline)
// with a margin that stretches until the machine keeps up: short on an
// idle machine, so that the test is fast, and as long as it needs to be
// on a busy one, so that it passes there too (net/http's tests do the same
// with runTimeSensitiveTest).
//
// The scenario tells the two kinds of outcome apart. One that only a slow
// machine explains (an attempt that was to answer was cut by its timer,
// one that was to reach the server did not get there in time) it returns
// as an error, and [Run] tries again with twice the margin. Any other
// (a wrong code, an attempt too many with no timer to account for it) it
// reports with t.Fatal or t.Error, and that ends the test.
package stretch

import (
	"testing"
	"time"
)

// Run calls scenario with margin d, and again with twice the margin while
// it returns an error, up to limit. It fails the test with the last error
// when even limit was too short, and stops at once when the scenario has
// failed the test.
func Run(t testing.TB, d, limit time.Duration, scenario func(d time.Duration) error) {
	t.Helper()
	for {
		err := scenario(d)
		if err == nil || t.Failed() {
			return
		}
		if 2*d > limit {
			t.Fatalf("with a margin of %v: %v", d, err)
			return
		}
		t.Logf("with a margin of %v: %v; again with %v", d, err, 2*d)
		d *= 2
	}
}
