package engine

import (
	"fmt"
	"testing"

	"github.com/rebound-go/rebound/internal/bounded"
	"github.com/rebound-go/rebound/serviceconfig"
)

// An Interceptor used with ever new hosts keeps the state of the recent
// ones only (issue 13).
func TestTargetsBounded(t *testing.T) {
	cfg, err := serviceconfig.Parse([]byte(`{"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}`))
	if err != nil {
		t.Fatal(err)
	}
	i, err := New(cfg, NewOptions(), testMajor{}, "test")
	if err != nil {
		t.Fatal(err)
	}
	for n := range 3 * bounded.DefaultMax {
		if tg := i.Target(fmt.Sprint("host-", n, ":443")); tg.throttle == nil {
			t.Fatal("no throttle")
		}
	}
	if n := i.Targets(); n > bounded.DefaultMax {
		t.Fatalf("%d server names kept, want at most %d", n, bounded.DefaultMax)
	}
	// The latest host's state is kept, and found again.
	last := fmt.Sprint("host-", 3*bounded.DefaultMax-1, ":443")
	a, b := i.Target(last), i.Target("other:443")
	if i.Target(last) != a || i.Target("other:443") != b {
		t.Fatal("recent state was not kept")
	}
}
