package httpretry_test

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
)

// serveFlaky starts a server that answers 503 to its first `failures`
// requests, and returns its URL and a function that stops it.
func serveFlaky(failures int32) (url string, stop func()) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) <= failures {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "hello")
	}))
	return srv.URL, srv.Close
}

// The transport that retries an http.Client's requests, and how to count a
// request's attempts.
func ExampleNewTransport() {
	url, stop := serveFlaky(2)
	defer stop()

	client := &http.Client{Transport: httpretry.NewTransport(nil,
		httpretry.WithMaxAttempts(4),
		httpretry.WithBackoff(rebound.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 2}),
	)}
	defer client.CloseIdleConnections()

	var attempts int
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req = req.WithContext(httpretry.CountAttempts(req.Context(), &attempts))
	resp, err := client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body), "after", attempts, "attempts")
	// Output: 200 hello after 3 attempts
}

// When attempts run out on a retryable status, the last response is
// returned as it is; when they run out on a connection error, the error
// says why retrying stopped.
func ExampleNew() {
	url, stop := serveFlaky(10)
	defer stop()

	retries, err := httpretry.New(nil,
		httpretry.WithMaxAttempts(3),
		httpretry.WithBackoff(rebound.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 2}))
	if err != nil {
		log.Fatal(err) // the first invalid option, by name
	}
	client := &http.Client{Transport: retries}
	defer client.CloseIdleConnections()

	var attempts int
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req = req.WithContext(httpretry.CountAttempts(req.Context(), &attempts))
	resp, err := client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", attempts, "attempts")

	stop() // now every attempt fails to connect
	_, err = client.Get(url)
	var gaveUp *rebound.Error
	if errors.As(err, &gaveUp) {
		fmt.Println(gaveUp.Attempts, "attempts:", gaveUp.Reason)
	}
	fmt.Println(errors.Is(err, rebound.ErrAttemptsExhausted))
	// Output:
	// 503 after 3 attempts
	// 3 attempts: rebound: attempts exhausted
	// true
}

// Where the statistics of the requests are.
func ExampleTransport_Stats() {
	url, stop := serveFlaky(2)
	defer stop()

	// Add httpretry.WithMeterProvider for OpenTelemetry metrics, and
	// httpretry.WithLogger for a debug log of each decision.
	transport := httpretry.NewTransport(nil,
		httpretry.WithBackoff(rebound.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 2}))
	client := &http.Client{Transport: transport}
	defer client.CloseIdleConnections()

	resp, err := client.Get(url)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()

	// Requests are counted by method and host.
	s := transport.Stats()["GET "+strings.TrimPrefix(url, "http://")]
	fmt.Println(s.Calls, "request,", s.Retries.Attempts, "retries,", s.Retries.Failed, "failed")
	// Output: 1 request, 2 retries, 1 failed
}

func ExampleParseRetryAfter() {
	now := time.Date(2015, 10, 21, 7, 28, 0, 0, time.UTC)
	for _, v := range []string{"120", "Wed, 21 Oct 2015 07:29:00 GMT", "soon"} {
		d, ok := httpretry.ParseRetryAfter(v, now)
		fmt.Println(d, ok)
	}
	// Output:
	// 2m0s true
	// 1m0s true
	// 0s false
}
