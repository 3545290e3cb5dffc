package connectretry

import (
	"fmt"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/serviceconfig"
)

// Option configures an [Interceptor]. Options are applied in order; the
// first invalid one makes [New] fail.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

type options struct {
	maxAttempts int
	disabled    bool
	serverName  string
	clock       rebound.Clock
	random      rebound.Random
	err         error
}

func (o *options) fail(format string, args ...any) {
	if o.err == nil {
		o.err = fmt.Errorf("connectretry: "+format, args...)
	}
}

// WithMaxAttempts sets the client-side maximum of attempts (A6 "Limits"):
// a retryPolicy or hedgingPolicy that asks for more is held to n. The
// default is 5. n must be >= 1.
func WithMaxAttempts(n int) Option {
	return optionFunc(func(o *options) {
		if n < 1 {
			o.fail("WithMaxAttempts: n must be >= 1, got %d", n)
			return
		}
		o.maxAttempts = n
	})
}

// WithRetriesDisabled turns retries and hedging off entirely (A6 "Disabling
// Retries"): every call is made once, as if no policy were configured. The
// method config's timeout still applies.
func WithRetriesDisabled() Option {
	return optionFunc(func(o *options) { o.disabled = true })
}

// WithServerName sets the server name that retry throttling is kept under.
// By default it is the host (or host:port) of the client's URL, as
// connect.Peer.Addr reports it. Every interceptor of the process with the
// same server name and throttling config shares one throttle, and so do
// grpcretry clients whose target has that name.
func WithServerName(name string) Option {
	return optionFunc(func(o *options) {
		if name == "" {
			o.fail("WithServerName: name must not be empty")
			return
		}
		o.serverName = name
	})
}

// WithClock sets the clock that backoff, pushback and hedging delays wait
// on.
func WithClock(c rebound.Clock) Option {
	return optionFunc(func(o *options) {
		if c == nil {
			o.fail("WithClock: nil clock")
			return
		}
		o.clock = c
	})
}

// WithRandom sets the source of backoff jitter.
func WithRandom(r rebound.Random) Option {
	return optionFunc(func(o *options) {
		if r == nil {
			o.fail("WithRandom: nil source")
			return
		}
		o.random = r
	})
}

func buildOptions(opts []Option) options {
	o := options{maxAttempts: serviceconfig.DefaultMaxAttempts}
	for _, opt := range opts {
		if opt == nil {
			o.fail("nil Option")
			continue
		}
		opt.apply(&o)
	}
	return o
}
