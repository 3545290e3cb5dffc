package httpretry_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
)

func ExampleNewTransport() {
	// A server that is unavailable for its first two requests.
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) <= 2 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "hello")
	}))
	defer srv.Close()

	client := &http.Client{Transport: httpretry.NewTransport(nil,
		httpretry.WithMaxAttempts(4),
		httpretry.WithBackoff(rebound.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 2}),
	)}
	defer client.CloseIdleConnections()

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body), "after", requests.Load(), "requests")
	// Output: 200 hello after 3 requests
}

func ExampleTransport_Stats() {
	// A server that is unavailable for its first two requests.
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) <= 2 {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "hello")
	}))
	defer srv.Close()

	// Add httpretry.WithMeterProvider for OpenTelemetry metrics, and
	// httpretry.WithLogger for a debug log of each decision.
	tr := httpretry.NewTransport(nil,
		httpretry.WithBackoff(rebound.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 2}))
	client := &http.Client{Transport: tr}
	defer client.CloseIdleConnections()

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()

	// Requests are counted by method and host.
	s := tr.Stats()["GET "+strings.TrimPrefix(srv.URL, "http://")]
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
