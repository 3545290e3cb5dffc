package adaptive

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
)

func TestThrottleSharedAndReleased(t *testing.T) {
	name := fmt.Sprint("adaptive-test-", time.Now().UnixNano())
	c := rebound.AdaptiveThrottleConfig{}
	a, b := Throttle(name, c), Throttle(name, c)
	if a == nil || a != b {
		t.Fatal("one name, one config: not shared")
	}
	if Throttle(name, rebound.AdaptiveThrottleConfig{K: 1.5}) == a || Throttle(name+"x", c) == a {
		t.Fatal("another name or config shares the throttle")
	}
	if Throttle(name, rebound.AdaptiveThrottleConfig{K: 0.5}) != nil {
		t.Fatal("an invalid config made a throttle")
	}
	for i := range 1000 {
		Throttle(fmt.Sprint(name, "-", i), c)
	}
	deadline := time.Now().Add(10 * time.Second)
	for Count() > 10 {
		if time.Now().After(deadline) {
			t.Fatalf("%d throttles of dropped names remain", Count())
		}
		runtime.GC()
		runtime.Gosched()
	}
	if Throttle(name, c) != a {
		t.Fatal("a throttle still held was dropped")
	}
	runtime.KeepAlive(a)
}

func TestAccepted(t *testing.T) {
	for code, want := range map[uint32]bool{0: true, 1: true, 4: false, 5: true, 8: false, 13: true, 14: false} {
		if AcceptedCode(code) != want {
			t.Errorf("AcceptedCode(%d) = %v", code, !want)
		}
	}
	for status, want := range map[int]bool{200: true, 404: true, 500: true, 429: false, 502: false, 503: false, 504: false} {
		if AcceptedStatus(status) != want {
			t.Errorf("AcceptedStatus(%d) = %v", status, !want)
		}
	}
	var g *Gate
	if _, ok := g.Allow(); !ok {
		t.Error("a nil Gate refused")
	}
	g.Accepted()
	g.Withdraw(time.Now())
}
