package httpretry_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
	"github.com/rebound-go/rebound/internal/clocktest"
)

// TestRatioBudget: against a server that always answers 503, a ratio
// budget of 0.5 per host lets one retry through per two requests, and a
// concurrency budget beside it ends with nothing in flight.
func TestRatioBudget(t *testing.T) {
	srv := newServer(t, script(http.StatusServiceUnavailable))
	ratio, _ := rebound.NewRatioBudget(rebound.RatioBudgetConfig{Ratio: 0.5, TTL: time.Minute, Clock: clocktest.New()})
	conc, _ := rebound.NewConcurrencyBudget(rebound.DefaultConcurrencyBudget())
	client, _ := newClient(t, httpretry.WithBudgetPerHost(func(string) rebound.Budget { return rebound.AllBudgets(ratio, conc) }))
	const requests = 20
	for range requests {
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
	}
	if got := srv.attempts() - requests; got != requests/2 {
		t.Fatalf("server saw %d retries for %d requests, want %d", got, requests, requests/2)
	}
	if c, r := ratio.Counts(); c != requests || r != requests/2 {
		t.Fatalf("ratio budget counted %d requests, %d retries", c, r)
	}
	if c, r := conc.InFlight(); c != 0 || r != 0 {
		t.Fatalf("concurrency budget: %d requests, %d retries in flight after all ended", c, r)
	}
}
