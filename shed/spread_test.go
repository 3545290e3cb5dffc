package shed_test

import (
	"fmt"
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
//
// A retry may come back within milliseconds (a Retry-After of 0), before
// a busy machine has shed the last of the 40 first attempts: it is shed
// again, and comes back later still. So each client may make a few
// attempts, and the test holds each to one request served, after it was
// shed, and the served requests to their spread.
func TestHTTPRetriesSpread(t *testing.T) {
	c := shed.DefaultConfig()
	c.InitialLimit, c.MinLimit, c.MaxLimit = 1, 1, 1
	c.RetryShare = 0.99
	// The requests served before the sheds count, however long the
	// machine takes to shed them all.
	c.Window = time.Minute
	s, _ := shed.New(c)
	const n = 40
	var (
		mu       sync.Mutex
		arrivals []time.Time
		served   = map[string]int{} // by client
		shed     = map[string]bool{}
		hold     = make(chan struct{})
		held     = make(chan struct{})
	)
	inner := s.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			close(held)
			<-hold
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if client := r.Header.Get("Client"); client != "" {
			arrivals = append(arrivals, time.Now())
			served[client]++
		}
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		inner.ServeHTTP(rec, r)
		if client := r.Header.Get("Client"); client != "" && rec.code == http.StatusServiceUnavailable {
			mu.Lock()
			shed[client] = true
			mu.Unlock()
		}
	}))
	defer srv.Close()
	var release sync.Once
	defer release.Do(func() { close(hold) }) // before srv.Close, which waits for it
	// 100 requests served: the Shedder may invite up to 99 retries, room
	// for every client to be shed twice.
	for range 100 {
		resp, err := srv.Client().Get(srv.URL + "/warm")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	go func() {
		if resp, err := srv.Client().Get(srv.URL + "/hold"); err == nil {
			resp.Body.Close()
		}
	}()
	<-held
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		client := &http.Client{Transport: httpretry.NewTransport(srv.Client().Transport, httpretry.WithMaxAttempts(5))}
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			req.Header.Set("Client", fmt.Sprint(i))
			<-start
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("client %d: status %d, want a retry served", i, resp.StatusCode)
			}
		})
	}
	close(start)
	waitFor(t, "every client to be shed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(shed) == n
	})
	release.Do(func() { close(hold) })
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if k := served[fmt.Sprint(i)]; k != 1 {
			t.Errorf("client %d served %d times, want once", i, k)
		}
	}
	if len(arrivals) != n {
		t.Fatalf("%d requests served, want %d", len(arrivals), n)
	}
	steps := map[int64]bool{}
	for _, a := range arrivals {
		steps[a.UnixMilli()/10] = true
	}
	t.Logf("%d retries over %d steps of 10ms, from first to last %v; %d sheds", len(arrivals), len(steps), arrivals[len(arrivals)-1].Sub(arrivals[0]), s.Stats().ShedRetry)
	if len(steps) < 10 {
		t.Fatalf("%d retries arrived in %d steps of 10ms; want them over at least 10", len(arrivals), len(steps))
	}
}

// statusRecorder records the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}
