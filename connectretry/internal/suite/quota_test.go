package suite

import (
	"context"
	"errors"
	"io"

	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/quotatest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// quotaServer serves q: each call takes from it, its fields go out as
// response headers, and a refusal is ResourceExhausted.
func quotaServer(t *testing.T, e env, q *quotatest.Quota) *server {
	take := func(c *call) error {
		ok, fields, _ := q.Take(time.Now())
		for k, v := range fields {
			c.setHeader(k, v)
		}
		if !ok {
			return fail(serviceconfig.ResourceExhausted, "quota spent")
		}
		return nil
	}
	return e.start(t, handlers{
		unary: func(c *call) (string, error) { return "ok", take(c) },
		serverStream: func(c *call, send func(string) error) error {
			if err := take(c); err != nil {
				return err
			}
			return send("ok")
		},
	})
}

// TestRateLimitQuotaPaces: as httpretry's, for both majors, unary calls
// and server streams, in the Connect and gRPC protocols: a server that
// allows 15 calls in each 3s window and publishes what is left refuses
// nothing of four callers that loop for 4s (3.5s with -short, see
// quotatest.PacedRun) with WithRateLimitQuota (on a
// busy machine until it has served 15, within 20s), and serves at least
// 15; without it, the server refuses some (the callers stop at its first
// refusal). The cases wait out the window side by side;
// with -short, v1 runs in the Connect protocol and v2 in gRPC.
func TestRateLimitQuotaPaces(t *testing.T) {
	t.Parallel()
	for _, p := range []protocol{{}, grpcH2C} {
		eachMajor(t, p, func(t *testing.T, e env) {
			if testing.Short() && (e.major == v1) != (p == protocol{}) {
				t.Skip("with -short, v1 runs in the Connect protocol and v2 in gRPC")
			}
			t.Parallel()
			for _, shape := range []string{"unary", "server stream"} {
				for _, on := range []bool{true, false} {
					name := shape
					if !on {
						name += " without the option"
					}
					t.Run(name, func(t *testing.T) {
						if !on && shape != "unary" {
							t.Skip("the unary control suffices")
						}
						t.Parallel()
						f := quotatest.IETF
						if shape != "unary" {
							f = quotatest.X
						}
						q := &quotatest.Quota{Limit: 15, Window: 3 * time.Second, Family: f}
						s := quotaServer(t, e, q)
						opts := []option{withServerName("quota-" + uniqueName(t)), withAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})}
						if on {
							opts = append(opts, withRateLimitQuota())
						}
						c, _ := e.dialWith(t, s, nil, opts...)
						start := time.Now()
						var failed atomic.Int64
						var wg sync.WaitGroup
						for range 4 {
							wg.Go(func() {
								for !q.Enough(on, start, quotatest.PacedRun(testing.Short())) && time.Since(start) < 20*time.Second {
									ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
									var err error
									if shape == "unary" {
										_, err = c.unary(ctx, "x", nil)
									} else if st, oerr := c.open(ctx, serverStream, "x", nil); oerr != nil {
										err = oerr
									} else {
										for err == nil {
											_, err = st.Receive()
										}
										if errors.Is(err, io.EOF) {
											err = nil
										}
										_ = st.Close()
										if err != nil {
											t.Logf("stream: %v", err)
										}
									}
									if err != nil {
										failed.Add(1)
									}
									cancel()
								}
							})
						}
						wg.Wait()
						t.Logf("server saw %d, refused %d; %d calls failed in the client", q.Seen(), q.Refused(), failed.Load())
						switch {
						case on && (q.Refused() != 0 || q.Seen()-q.Refused() < 15):
							t.Errorf("with the quota read: the server saw %d and refused %d, want none refused and at least 15 served", q.Seen(), q.Refused())
						case !on && q.Refused() == 0:
							t.Errorf("without the option the server refused nothing of %d", q.Seen())
						}
					})
				}
			}
		})
	}
}
