package httpretry_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
	"github.com/rebound-go/rebound/internal/clocktest"
)

// See grpcretry's TestAdaptiveThrottle: two attempts reach a server that
// answers 503 to everything, then every request fails locally. Accepted
// answers keep the throttle open.
func TestAdaptiveThrottle(t *testing.T) {
	var seen atomic.Int32
	down := atomic.Bool{}
	down.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		seen.Add(1)
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	client := &http.Client{Transport: httpretry.NewTransport(srv.Client().Transport,
		httpretry.WithClock(clocktest.NewAuto()), httpretry.WithRandom(clocktest.NewRand(0.5)),
		httpretry.WithAdaptiveThrottle(rebound.AdaptiveThrottleConfig{}))}
	for i := range 10 {
		resp, err := client.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
			if i == 0 {
				continue // the 503 itself comes back when retrying stops
			}
			t.Fatalf("request %d: %d, want a local rejection", i, resp.StatusCode)
		}
		if !errors.Is(err, rebound.ErrRejectedLocally) || !errors.Is(err, rebound.ErrThrottled) {
			t.Fatalf("request %d: %v, want a local rejection", i, err)
		}
	}
	if n := seen.Load(); n != 2 {
		t.Fatalf("server saw %d requests, want 2", n)
	}
	if _, err := httpretry.New(nil, httpretry.WithAdaptiveThrottle(rebound.AdaptiveThrottleConfig{Window: 1})); err == nil {
		t.Fatal("a 1ns window accepted")
	}
}
