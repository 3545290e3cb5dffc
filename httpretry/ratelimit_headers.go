package httpretry

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// WithRateLimitReset makes a retryable response without a Retry-After
// header wait for the rate limit it reports to reset: RateLimit-Reset (the
// IETF draft's) or, failing that, X-RateLimit-Reset (GitHub's, Twitter's
// and many gateways'). A value is delta-seconds, or a Unix time in seconds
// when it is 1000000000 or more (no rate limit resets 31 years from now),
// as Envoy's rate_limited_retry_back_off reads them. The reset is a
// minimum wait, as Retry-After is: the next attempt waits max(backoff,
// reset), and a hedge waits for it. A reset beyond the Retry-After cap
// ([WithRetryDelayCap]) returns the response at once, and retrying stops
// with [rebound.ErrRetryDelayTooLong], as a Retry-After beyond it does;
// one past the request context's deadline returns it too, with
// [rebound.ErrDeadline]. A value that is neither form, or a Unix time
// not in the future, is ignored. Off by default: many servers send these
// headers on every response, and their reset is the window's, not a
// request to wait.
func WithRateLimitReset() Option {
	return optionFunc(func(c *config) { c.rateLimitReset = true })
}

// resetHeaders are the headers WithRateLimitReset reads, in order: the
// key of http.Header, and the name logs give.
var resetHeaders = [...]struct{ key, name string }{
	{"Ratelimit-Reset", "RateLimit-Reset"},
	{"X-Ratelimit-Reset", "X-RateLimit-Reset"},
}

// rateLimitReset returns the wait a response's rate-limit reset header
// asks for, from the first header that holds a valid one, and that
// header's name.
func rateLimitReset(h http.Header, now time.Time) (time.Duration, string, bool) {
	for _, r := range resetHeaders {
		if vs := h[r.key]; len(vs) > 0 {
			if d, ok := parseReset(vs[0], now); ok {
				return d, r.name, true
			}
		}
	}
	return 0, "", false
}

// unixThreshold is where a reset value stops being delta-seconds and
// becomes a Unix time (2001-09-09).
const unixThreshold = 1_000_000_000

// parseReset parses a reset value: digits only, surrounding spaces and
// tabs ignored; delta-seconds below unixThreshold, else a Unix time,
// which must be after now. Too large a value saturates at the longest
// time.Duration. The duration is never negative.
func parseReset(v string, now time.Time) (time.Duration, bool) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return 0, false
	}
	n, ok := parseSeconds(v)
	switch {
	case !ok:
		return 0, false
	case n > maxSeconds:
		return math.MaxInt64, true
	case n < unixThreshold:
		return time.Duration(n) * time.Second, true
	}
	d := time.Unix(n, 0).Sub(now)
	if d <= 0 {
		return 0, false
	}
	return d, true
}
