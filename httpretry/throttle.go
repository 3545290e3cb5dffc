package httpretry

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/adaptive"
	"github.com/rebound-go/rebound/internal/bounded"
	"github.com/rebound-go/rebound/internal/ratelimit"
)

// WithAdaptiveThrottle turns on client-side adaptive throttling (see
// [rebound.AdaptiveThrottle]) with c: every attempt, the first included,
// asks the throttle of its URL's host whether to go out. One it keeps home
// fails at once, without reaching the server, with an error that unwraps
// to [rebound.ErrRejectedLocally]; it is not retried, so RoundTrip fails
// with [rebound.ErrThrottled]. Every response but 429, 502, 503 and 504
// counts as accepted; so does a request the caller cancelled. A request
// that [WithAdaptiveRateLimit] keeps home counts neither way: it never
// reached the host. Every Transport of the process shares one throttle per
// host and c; a Transport keeps the throttles of the 1024
// hosts it used last. c's fields must be valid; the zero value
// means the SRE book's defaults.
func WithAdaptiveThrottle(c rebound.AdaptiveThrottleConfig) Option {
	return optionFunc(func(cfg *config) {
		if err := c.Validate(); err != nil {
			cfg.fail("WithAdaptiveThrottle", "%v", err)
			return
		}
		cfg.adaptiveThrottle = &c
	})
}

// gatedBase is the base RoundTripper behind an adaptive throttle per host.
type gatedBase struct {
	base  http.RoundTripper
	gates *bounded.Map[string, *adaptive.Gate]
	mk    func(host string) *adaptive.Gate
}

func newGatedBase(base http.RoundTripper, cfg *config) *gatedBase {
	c := *cfg.adaptiveThrottle
	return &gatedBase{
		base:  base,
		gates: bounded.New[string, *adaptive.Gate](bounded.DefaultMax),
		mk: func(host string) *adaptive.Gate {
			return &adaptive.Gate{Throttle: adaptive.Throttle(host, c), Clock: cfg.clock, Random: cfg.random}
		},
	}
}

func (g *gatedBase) RoundTrip(r *http.Request) (*http.Response, error) {
	gate, _ := g.gates.Get(r.URL.Host, func() (*adaptive.Gate, error) { return g.mk(r.URL.Host), nil })
	at, ok := gate.Allow()
	if !ok {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		return nil, fmt.Errorf("httpretry: %s %s: %w", r.Method, r.URL.Host, rebound.ErrRejectedLocally)
	}
	resp, err := g.base.RoundTrip(r)
	switch {
	case ratelimit.IsKeptHome(err):
		// The rate limit behind the throttle kept it home: not the
		// server's refusal, nor, cancelled, its answer.
		gate.Withdraw(at)
	case err == nil && resp != nil && adaptive.AcceptedStatus(resp.StatusCode),
		err != nil && errors.Is(err, context.Canceled):
		gate.Accepted()
	}
	return resp, err
}
