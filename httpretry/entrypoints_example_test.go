package httpretry_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
)

// Whether a request may be sent more than once: an idempotent method of
// RFC 9110, or an idempotency key. It is what WithIdempotent defaults to.
func ExampleIdempotent() {
	get, _ := http.NewRequest(http.MethodGet, "https://api.example.com/books/1", nil)
	post, _ := http.NewRequest(http.MethodPost, "https://api.example.com/books", strings.NewReader("{}"))
	keyed := post.Clone(post.Context())
	keyed.Header.Set("Idempotency-Key", "book-42")
	fmt.Println(httpretry.Idempotent(get), httpretry.Idempotent(post), httpretry.Idempotent(keyed))
	// Output: true false true
}

// A handler learns how many attempts of a request came before the one it
// is serving, from the header the client names with
// WithPreviousAttemptsHeader: what A6's grpc-previous-rpc-attempts says
// for gRPC.
func ExamplePreviousAttempts() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("attempts before this one:", httpretry.PreviousAttempts(r.Header, "Rebound-Previous-Attempts"))
		http.Error(w, "try again", http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	client := &http.Client{Transport: httpretry.NewTransport(nil,
		httpretry.WithPreviousAttemptsHeader("Rebound-Previous-Attempts"),
		httpretry.WithBackoff(rebound.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 2}),
	)}
	defer client.CloseIdleConnections()
	resp, err := client.Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	// Output:
	// attempts before this one: 0
	// attempts before this one: 1
	// attempts before this one: 2
	// 503
}

// One request may narrow its policy through its context: here, to a
// single attempt.
func ExampleOverride() {
	url, stop := serveFlaky(100)
	defer stop()
	client := &http.Client{Transport: httpretry.NewTransport(nil,
		httpretry.WithBackoff(rebound.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 2}),
	)}
	defer client.CloseIdleConnections()

	var n int
	ctx := httpretry.CountAttempts(context.Background(), &n)
	req, _ := http.NewRequestWithContext(httpretry.Override(ctx, rebound.Override{MaxAttempts: 1}), http.MethodGet, url, nil)
	resp, err := client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", n, "attempt")

	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err = client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", n, "attempts")
	// Output:
	// 503 after 1 attempt
	// 503 after 3 attempts
}

// Hedging: a second copy of a slow request goes out after the delay, and
// the first answer wins.
func ExampleWithHedging() {
	var mu sync.Mutex
	requests := 0
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests++
		n := requests
		mu.Unlock()
		if n == 1 {
			// The first copy hangs until the hedge has answered.
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		fmt.Fprint(w, "from the hedge")
	}))
	defer srv.Close()
	defer close(release)

	client := &http.Client{Transport: httpretry.NewTransport(nil, httpretry.WithHedging(10*time.Millisecond, 2))}
	defer client.CloseIdleConnections()
	var n int
	req, _ := http.NewRequestWithContext(httpretry.CountAttempts(context.Background(), &n), http.MethodGet, srv.URL, nil)
	resp, err := client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(string(body), "after", n, "attempts")
	// Output: from the hedge after 2 attempts
}
