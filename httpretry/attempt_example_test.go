package httpretry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
)

// A request whose response headers do not come within the per-attempt
// timeout is cut and sent again; one request can narrow its policy: here,
// to a single attempt.
func ExampleWithPerAttemptTimeout() {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := requests.Add(1); n == 1 || n == 3 {
			<-r.Context().Done() // stuck until the client gives up
			return
		}
		fmt.Fprint(w, "hello")
	}))
	defer srv.Close()

	client := &http.Client{Transport: httpretry.NewTransport(nil,
		httpretry.WithPerAttemptTimeout(time.Second),
		httpretry.WithBackoff(rebound.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 2}),
	)}
	defer client.CloseIdleConnections()

	resp, err := client.Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body), "after", requests.Load(), "attempts")

	ctx := httpretry.Override(context.Background(), rebound.Override{MaxAttempts: 1})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	_, err = client.Do(req)
	fmt.Println("per-attempt timeout:", errors.Is(err, rebound.ErrAttemptTimeout), "after", requests.Load()-2, "attempt")
	// Output:
	// 200 hello after 2 attempts
	// per-attempt timeout: true after 1 attempt
}
