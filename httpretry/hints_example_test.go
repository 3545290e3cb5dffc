package httpretry_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
)

// A POST with an idempotency key is retried, and hedged, like a GET: the
// server keeps the outcome of each key and answers a repeat with it. Each
// retry also says how many attempts came before it; the first says
// nothing.
func ExampleWithIdempotencyKey() {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.Header.Get("Rebound-Previous-Attempts")+":"+r.Header.Get("Idempotency-Key"))
		if len(seen) == 1 {
			http.Error(w, "try again", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()

	client := &http.Client{Transport: httpretry.NewTransport(nil,
		httpretry.WithIdempotencyKey("Idempotency-Key", func() string { return "order-42" }), // nil: a random UUID
		httpretry.WithPreviousAttemptsHeader("Rebound-Previous-Attempts"),
		httpretry.WithBackoff(rebound.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 2}),
	)}
	defer client.CloseIdleConnections()
	resp, err := client.Post(srv.URL, "application/json", strings.NewReader(`{"amount":10}`))
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, seen)
	// Output: 200 [:order-42 1:order-42]
}

// An API gateway that says when its rate limit resets: the retry waits
// for it (here 1 second), however short the backoff.
func ExampleWithRateLimitReset() {
	var mu sync.Mutex
	var at []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if at = append(at, time.Now()); len(at) == 1 {
			w.Header().Set("X-RateLimit-Reset", "1") // or a Unix time
			http.Error(w, "slow down", http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()

	client := &http.Client{Transport: httpretry.NewTransport(nil,
		httpretry.WithRateLimitReset(),
		httpretry.WithBackoff(rebound.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 2}),
	)}
	defer client.CloseIdleConnections()
	resp, err := client.Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after waiting at least a second:", at[1].Sub(at[0]) >= time.Second)
	// Output: 200 after waiting at least a second: true
}
