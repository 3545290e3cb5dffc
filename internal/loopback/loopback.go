// Package loopback gives tests listeners on 127.0.0.1 whose addresses
// never repeat within a process.
//
// rebound keeps some state per server name for the whole process: an A6
// retry throttle, an adaptive rate limit, a published quota. A test's
// server name is often its listener's address, and the kernel hands out
// the port of a closed listener again (on Linux about 1 in 7,000 ports
// each time), so a test whose server got an earlier test's port would
// find that test's throttle with its tokens spent. A listener from Listen
// has an address no earlier one had.
package loopback

import (
	"log"
	"net"
	"sync"
)

var (
	mu     sync.Mutex
	handed = map[string]bool{}
)

// Listen listens on a port of 127.0.0.1 that it has not handed out before
// in this process. It exits the process if it cannot listen, as the
// examples that call it have no *testing.T to fail.
func Listen() net.Listener {
	mu.Lock()
	defer mu.Unlock()
	var again []net.Listener // held open, so that the kernel picks another port
	defer func() {
		for _, l := range again {
			l.Close()
		}
	}()
	for {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatalf("loopback: %v", err)
		}
		if a := lis.Addr().String(); !handed[a] {
			handed[a] = true
			return lis
		}
		again = append(again, lis)
	}
}
