package shed_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/rebound-go/rebound/httpretry"
	"github.com/rebound-go/rebound/shed"
)

// Item 4: HTTP clients shed together do not come back together. 40
// httpretry clients shed in the same instant used to hear "Retry-After:
// 1" and come back within a millisecond of each other, a second later.
// The Shedder rounds its delay to whole seconds at random, and httpretry
// waits up to half a second beyond a Retry-After: their retries reach
// the server spread over many 10ms steps.
func TestHTTPRetriesSpread(t *testing.T) {
	c := shed.DefaultConfig()
	c.InitialLimit, c.MinLimit, c.MaxLimit = 1, 1, 1
	c.RetryShare = 0.99
	s, _ := shed.New(c)
	var (
		mu       sync.Mutex
		arrivals []time.Time
		hold     = make(chan struct{})
		held     = make(chan struct{})
	)
	srv := httptest.NewServer(s.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			close(held)
			<-hold
			return
		}
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
	})))
	defer srv.Close()
	var release sync.Once
	defer release.Do(func() { close(hold) }) // before srv.Close, which waits for it
	// 50 requests served: the Shedder may invite up to 49 retries.
	for range 50 {
		resp, err := srv.Client().Get(srv.URL + "/warm")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	mu.Lock()
	arrivals = nil
	mu.Unlock()
	go func() {
		if resp, err := srv.Client().Get(srv.URL + "/hold"); err == nil {
			resp.Body.Close()
		}
	}()
	<-held
	const n = 40
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		client := &http.Client{Transport: httpretry.NewTransport(srv.Client().Transport, httpretry.WithMaxAttempts(2))}
		wg.Go(func() {
			<-start
			resp, err := client.Get(srv.URL)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("status %d, want the retry served", resp.StatusCode)
			}
		})
	}
	close(start)
	waitFor(t, "every client to be shed", func() bool { return s.Stats().ShedRetry == n })
	release.Do(func() { close(hold) })
	wg.Wait()
	steps := map[int64]bool{}
	for _, a := range arrivals {
		steps[a.UnixMilli()/10] = true
	}
	t.Logf("%d retries over %d steps of 10ms, from first to last %v", len(arrivals), len(steps), arrivals[len(arrivals)-1].Sub(arrivals[0]))
	if len(arrivals) != n || len(steps) < 10 {
		t.Fatalf("%d retries arrived in %d steps of 10ms; want %d over at least 10", len(arrivals), len(steps), n)
	}
}
