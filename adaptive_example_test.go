package rebound_test

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/rebound-go/rebound"
)

// A client asks for 10 requests a second from a server that accepts only
// 2 a second. Once the window holds more than K (2) requests per accept,
// the throttle keeps requests home, and the client settles at about K
// times what the server accepts.
func ExampleAdaptiveThrottle() {
	th, err := rebound.NewAdaptiveThrottle(rebound.AdaptiveThrottleConfig{}) // K 2, 2 minutes
	if err != nil {
		panic(err)
	}
	draws := rand.New(rand.NewPCG(1, 2))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sentLastMinute := 0
	for s := range 600 { // 10 minutes
		accepted := 0
		for i := range 10 {
			at := now.Add(time.Duration(s)*time.Second + time.Duration(i)*100*time.Millisecond)
			if !th.Allow(at, draws.Float64()) {
				continue // kept home
			}
			if s >= 540 {
				sentLastMinute++
			}
			if accepted < 2 {
				accepted++
				th.Accepted(at)
			}
		}
	}
	fmt.Printf("sent %.1f requests/s for 2 accepted/s\n", float64(sentLastMinute)/60)
	// Output: sent 3.7 requests/s for 2 accepted/s
}
