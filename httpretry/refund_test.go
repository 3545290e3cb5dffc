package httpretry_test

import (
	"net/http"
	"testing"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
)

// TestTokenBucketRefund: against a server that fails every first attempt
// with 503, a bucket with RefundRetryCost keeps paying for the retries; the
// Smithy default drains and then refuses them.
func TestTokenBucketRefund(t *testing.T) {
	for _, refund := range []bool{true, false} {
		srv := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
			if n%2 == 1 {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		})
		b, _ := rebound.NewTokenBucket(rebound.TokenBucketConfig{Capacity: 10, RetryCost: 5, TimeoutCost: 10, SuccessRefund: 1, RefundRetryCost: refund})
		client, _ := newClient(t, httpretry.WithBudgetPerHost(func(string) rebound.Budget { return b }))
		var codes []int
		for range 3 {
			resp, err := client.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			codes = append(codes, resp.StatusCode)
			readAll(t, resp)
		}
		// With the refund every call's retry is paid for; without, the
		// bucket goes 10, 6, 2, and the third call's retry is refused.
		want, attempts, tokens := []int{200, 200, 200}, 6, int64(10)
		if !refund {
			want, attempts, tokens = []int{200, 200, 503}, 5, 2
		}
		if len(codes) != 3 || codes[0] != want[0] || codes[1] != want[1] || codes[2] != want[2] {
			t.Errorf("refund %v: statuses %v, want %v", refund, codes, want)
		}
		if got := srv.attempts(); got != attempts {
			t.Errorf("refund %v: server saw %d attempts, want %d", refund, got, attempts)
		}
		if got := b.Tokens(); got != tokens {
			t.Errorf("refund %v: %d tokens left, want %d", refund, got, tokens)
		}
	}
}
