package httpretry_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
)

// Calling a rate-limited API: the host's first 429 starts the limit;
// from then on every request waits for its turn, and one that could not
// get it before its deadline fails at once, without reaching the host.
func ExampleWithAdaptiveRateLimit() {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if requests.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "slow down", http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()

	client := &http.Client{Transport: httpretry.NewTransport(nil,
		httpretry.WithRetriesDisabled(), // to show the 429; retries wait for their turn too
		httpretry.WithAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{MinRate: 10}),
	)}
	defer client.CloseIdleConnections()
	get := func(timeout time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := client.Do(req)
		switch {
		case errors.Is(err, rebound.ErrRateLimited):
			fmt.Println("not sent: its turn would come after its deadline")
		case err != nil:
			log.Fatal(err)
		default:
			resp.Body.Close()
			fmt.Println(resp.StatusCode)
		}
	}
	get(time.Second)           // the throttle: the limit starts at 10 req/s
	get(10 * time.Millisecond) // its turn is 100ms away
	get(time.Second)           // waits for its turn
	fmt.Println(requests.Load(), "requests reached the server")
	// Output:
	// 429
	// not sent: its turn would come after its deadline
	// 200
	// 2 requests reached the server
}
