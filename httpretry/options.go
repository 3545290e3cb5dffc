package httpretry

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/replay"
)

// DefaultMaxAttempts is the number of attempts, the first included, that
// [NewTransport] makes when no option says otherwise.
const DefaultMaxAttempts = 3

// DefaultRetryableStatus lists the status codes retried by default: 429 Too
// Many Requests, 502 Bad Gateway, 503 Service Unavailable and 504 Gateway
// Timeout. The slice is a copy on each call.
func DefaultRetryableStatus() []int {
	return []int{http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout}
}

// Option configures a [Transport]. Options are applied in order, so a later
// option overrides an earlier one.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is the Transport's settings after the options ran. errs records
// invalid options, in order.
type config struct {
	maxAttempts   int
	disabled      bool // WithRetriesDisabled
	backoff       rebound.Backoff
	retryDelayCap time.Duration
	status        statusSet
	idempotent    func(*http.Request) bool
	budgetPerHost func(host string) rebound.Budget // WithBudgetPerHost's
	budget        rebound.Budget                   // WithBudget's; nil for none
	strategy      rebound.Strategy
	hedge         *rebound.HedgingPolicy
	clock         rebound.Clock
	random        rebound.Random
	buffers       replay.Limits
	meters        metric.MeterProvider
	// attemptTimeout is WithPerAttemptTimeout's, 0 for none;
	// trustedOverrides is WithTrustedOverrides.
	attemptTimeout   time.Duration
	trustedOverrides bool
	logger           *slog.Logger
	// adaptiveThrottle is WithAdaptiveThrottle's config; nil when off.
	adaptiveThrottle *rebound.AdaptiveThrottleConfig
	// rateLimit is WithAdaptiveRateLimit's settings; nil when off.
	rateLimit *rebound.AdaptiveRateLimitConfig
	tracer    trace.TracerProvider

	// headers are WithIdempotencyKey's and WithPreviousAttemptsHeader's.
	headers requestHeaders
	// rateLimitReset is WithRateLimitReset.
	rateLimitReset bool
	// classify is WithClassifier's; nil for none.
	classify func(Failure, rebound.RetryInfo) rebound.RetryInfo

	// set records which options configure the built-in strategy, to reject
	// them next to WithStrategy.
	set  []string
	errs []error
}

func (c *config) fail(option, format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("httpretry: "+option+": "+format, args...))
}

// WithMaxAttempts sets how many attempts a request gets, the first included.
// n must be >= 1; 1 disables retries, but not hedging ([WithRetriesDisabled]
// turns off both). The default is [DefaultMaxAttempts].
func WithMaxAttempts(n int) Option {
	return optionFunc(func(c *config) {
		c.set = append(c.set, "WithMaxAttempts")
		if n < 1 {
			c.fail("WithMaxAttempts", "n must be >= 1, got %d", n)
			return
		}
		c.maxAttempts = n
	})
}

// WithRetriesDisabled turns retries and hedging off entirely: every
// request is sent once, whatever [WithMaxAttempts], [WithHedging],
// [WithStrategy] or an [Override] (even under [WithTrustedOverrides])
// ask, as grpcretry's and connectretry's WithRetriesDisabled make every
// call once. The rest still applies to that one attempt: the per-attempt
// timeout, the adaptive throttle and rate limit, the idempotency key,
// statistics, metrics, traces and the decision log.
func WithRetriesDisabled() Option {
	return optionFunc(func(c *config) { c.disabled = true })
}

// WithBackoff sets the backoff between attempts; it must pass
// [rebound.Backoff.Validate]. The default is [rebound.DefaultBackoff]:
// exponential with full jitter, ceilings of 1s, 2s, 4s, … capped at 20s.
func WithBackoff(b rebound.Backoff) Option {
	return optionFunc(func(c *config) {
		c.set = append(c.set, "WithBackoff")
		if err := b.Validate(); err != nil {
			c.fail("WithBackoff", "%v", err)
			return
		}
		c.backoff = b
	})
}

// WithRetryDelayCap sets the longest server hint the Transport waits out:
// a Retry-After, or a rate-limit reset ([WithRateLimitReset]). A response
// whose hint is longer is returned at once, without another attempt, and
// retrying stops with [rebound.ErrRetryDelayTooLong], the reason a
// google.rpc.RetryInfo beyond grpcretry's or connectretry's cap gives.
// d must be > 0; the default is [rebound.DefaultRetryDelayCap].
func WithRetryDelayCap(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.fail("WithRetryDelayCap", "d must be > 0, got %v", d)
			return
		}
		c.retryDelayCap = d
	})
}

// WithRetryableStatus replaces the set of response status codes that are
// retried (see [DefaultRetryableStatus]). Each code must be in [100, 599].
// With no codes, no response is retried; connection errors still are.
func WithRetryableStatus(codes ...int) Option {
	return optionFunc(func(c *config) {
		var s statusSet
		for i, code := range codes {
			if code < 100 || code > 599 {
				c.fail("WithRetryableStatus", "codes[%d] must be in [100, 599], got %d", i, code)
				return
			}
			s.add(code)
		}
		c.status = s
	})
}

// WithIdempotent sets the predicate that says whether a request may be sent
// again after it may have reached the server. It must be safe for
// concurrent use and must not modify the request. The default,
// [Idempotent], accepts the idempotent methods of RFC 9110 and requests
// with an Idempotency-Key header.
func WithIdempotent(f func(req *http.Request) bool) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.fail("WithIdempotent", "nil predicate")
			return
		}
		c.idempotent = f
	})
}

// WithBudget adds b to what retries and hedges must get past: every retry
// and every hedge of the Transport's requests, to any host, needs b's
// leave as well as its host's budget ([WithBudgetPerHost]), as grpcretry's
// and connectretry's WithBudget add one beside the service config's
// retryThrottling ([rebound.AllBudgets]). b is shared by every host; it
// hears of every request's failures and successes. A nil b means none,
// the default. With [WithStrategy], s decides retries and spends its own
// budget, and b applies to hedges only.
func WithBudget(b rebound.Budget) Option {
	return optionFunc(func(c *config) {
		c.budget = b
	})
}

// WithBudgetPerHost sets each host's own budget, which replaces the
// default: f is called once per host (the request URL's host[:port]) and
// its result shared by every request to that host. An f that returns nil
// gives that host no budget of its own; a nil f gives none to any host.
// The default gives each host its own [rebound.TokenBucket] with
// [rebound.DefaultTokenBucket]. f must be safe for concurrent use. A
// budget of [WithBudget] must allow each retry and hedge as well.
//
// Budgets are kept for the 1024 hosts used most recently, so that a client
// that talks to an unbounded set of hosts keeps bounded state: a new host
// evicts hosts not used since the last eviction, and an evicted host that
// comes back gets a new budget from f.
//
// A [rebound.Throttle] works as in gRPC A6: every retryable failure takes a
// token and retries stop while the throttle is at or below half full. With
// [WithStrategy], s decides retries and spends its own budget, and the
// hosts' budgets apply to hedges only.
func WithBudgetPerHost(f func(host string) rebound.Budget) Option {
	return optionFunc(func(c *config) {
		c.budgetPerHost = f
	})
}

// WithStrategy replaces the built-in strategy with s, shared by every
// request (and so every host). s then decides attempts, delays and budgets
// of retries; it cannot be combined with [WithMaxAttempts], [WithBackoff] or
// [WithRandom], which configure the built-in one. [WithBudget] and
// [WithBudgetPerHost] then apply to hedges only: s's own budget, if any,
// is what limits retries. The Transport waits on s's clock when s has a Clock()
// rebound.Clock method, as [rebound.Do] does, and on the [WithClock] one
// otherwise.
func WithStrategy(s rebound.Strategy) Option {
	return optionFunc(func(c *config) {
		if s == nil {
			c.fail("WithStrategy", "nil Strategy")
			return
		}
		c.strategy = s
	})
}

// WithHedging sends idempotent requests as hedges (gRPC A6 hedgingPolicy)
// instead of retrying them: a further copy of the request goes out every
// delay, up to maxAttempts in all, while none has succeeded and the budget
// allows; the first success wins, and the other attempts are cancelled and
// their responses closed. A retryable status or connection error sends the
// next hedge at once (after the Retry-After hint, if any); any other
// response ends hedging and is returned. Requests that are not idempotent,
// or whose body cannot be replayed, are retried as usual. delay must be >=
// 0 and maxAttempts >= 1.
func WithHedging(delay time.Duration, maxAttempts int) Option {
	return optionFunc(func(c *config) {
		switch {
		case delay < 0:
			c.fail("WithHedging", "delay must be >= 0, got %v", delay)
		case maxAttempts < 1:
			c.fail("WithHedging", "maxAttempts must be >= 1, got %d", maxAttempts)
		default:
			c.hedge = &rebound.HedgingPolicy{MaxAttempts: maxAttempts, HedgingDelay: delay}
		}
	})
}

// WithClock sets the clock for waits, hedging delays, deadlines and
// HTTP-date Retry-After hints. The default is the real clock.
func WithClock(c rebound.Clock) Option {
	return optionFunc(func(cfg *config) {
		if c == nil {
			cfg.fail("WithClock", "nil Clock")
			return
		}
		cfg.clock = c
	})
}

// WithRandom sets the source of backoff jitter of the built-in strategy.
func WithRandom(r rebound.Random) Option {
	return optionFunc(func(c *config) {
		c.set = append(c.set, "WithRandom")
		if r == nil {
			c.fail("WithRandom", "nil Random")
			return
		}
		c.random = r
	})
}

// WithBufferLimits sets the memory that may hold request bodies for
// replay, as grpcretry's WithBufferLimits does: total bytes for the whole
// Transport, and bytes for one request. The Transport reads a body into
// memory, to send it again, when the request has a Body but no GetBody; a
// request whose body is larger than perCall, or than what is left of total
// while other requests hold theirs, is committed: it is sent once, without
// retries or hedges, and fails with [rebound.ErrCommitted] as the reason
// if that attempt fails. A body is held until its RoundTrip returns. A
// body with GetBody (http.NewRequest sets one for a *bytes.Buffer,
// *bytes.Reader or *strings.Reader) is the caller's to replay and takes no
// room. The defaults are [rebound.DefaultBufferTotal] (16 MiB) and
// [rebound.DefaultBufferPerCall] (1 MiB). Both must be > 0 and perCall <=
// total.
func WithBufferLimits(total, perCall int) Option {
	return optionFunc(func(c *config) {
		if err := replay.Check(total, perCall); err != nil {
			c.fail("WithBufferLimits", "%v", err)
			return
		}
		c.buffers = replay.Limits{Total: total, PerCall: perCall}
	})
}

// WithMeterProvider records rebound's retry instruments with mp, once per
// request when its RoundTrip returns: rebound.client.call.retries,
// rebound.client.call.hedges and rebound.client.call.retry_delay (gRFC
// A96's three, for HTTP), with the attributes http.request.method,
// server.address, server.port and http.response.status_code (see the
// package documentation), and the counter
// rebound.client.call.retries_throttled of requests whose retries the
// budget refused. HTTP has no server signal that stops retrying, so
// rebound.client.call.retries_pushback_stopped counts only a
// [WithStrategy] strategy's [rebound.ErrPushback]. The counter
// rebound.client.call.attempt_timeouts counts attempts cut by
// [WithPerAttemptTimeout]. The meter's scope is
// "github.com/rebound-go/rebound/httpretry".
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp == nil {
			c.fail("WithMeterProvider", "nil MeterProvider")
			return
		}
		c.meters = mp
	})
}

// WithTracerProvider traces every request that goes through the retry
// loop or hedging with tp: a client span for the request, named by its
// method ("GET") as the OpenTelemetry HTTP conventions name a client span,
// the child of the request context's span, and a child "Attempt.GET" for
// each attempt, hedges included, with the conventions' attributes
// (http.request.method, server.address, server.port, url.full,
// http.request.resend_count from the second attempt on,
// http.response.status_code, error.type). An attempt's span ends when its
// response (headers) or error arrives; the request's ends when RoundTrip
// returns. Events on the request's span tell what retrying decided:
// "backoff started" (with rebound.delay in seconds), "pushback received"
// (a Retry-After hint), "hedge sent", "hedge throttled" or "retry
// throttled", "hedge cancelled" (another attempt won), "committed"
// (rebound.why: a Retry-After or rate-limit reset beyond the cap, a body
// that cannot be replayed) and "retrying stopped" (rebound.reason).
//
// Each attempt's request carries its span in its context, so the base
// RoundTripper's own spans (otelhttp.NewTransport's) and the traceparent
// header it sends hang under the attempt. rebound sends no trace context
// itself: wrap the base RoundTripper with otelhttp for that. Without this
// option nothing is traced, and requests cost nothing more.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp == nil {
			c.fail("WithTracerProvider", "nil TracerProvider")
			return
		}
		c.tracer = tp
	})
}

// WithLogger logs each retry decision to l at debug level, one record per
// decision: a retry scheduled (with its delay and the failure that caused
// it, and whether a Retry-After hint set it), a hedge sent, a response
// returned as it is because its Retry-After or rate-limit reset is beyond
// the cap or because the request's body cannot be replayed, and giving up
// (budget exhausted, or why else). Nothing is logged, and nothing is spent on
// logging, while l does not log at debug level.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l == nil {
			c.fail("WithLogger", "nil Logger")
			return
		}
		c.logger = l
	})
}

// WithPerAttemptTimeout cuts an attempt that has not received its response
// headers within d of being sent, and retries it, within the attempts, the
// backoff, the budget (which counts the attempt as a failed timeout) and
// the request context's deadline. d must be > 0.
//
// The timer runs from handing the request to the base RoundTripper until
// its response headers arrive; reading the body is never cut. The attempt
// is cancelled alone, through a context of its own; the request's
// deadline, if any, still bounds every attempt. A request that may have
// reached the server (its headers were written, as net/http's
// httptrace.WroteHeaders reports: a handler may act on them before the
// body ends) is retried only when it is idempotent ([WithIdempotent]);
// one cut before its headers were written is retried whatever its method. When no attempt follows, RoundTrip fails with an error for
// which errors.Is(err, rebound.ErrAttemptTimeout) holds, and whose
// Timeout method reports true, as http.Client expects of a timeout. Hedged
// requests ([WithHedging]) are not timed: the hedging delay sends the next
// attempt without cutting the first.
func WithPerAttemptTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.fail("WithPerAttemptTimeout", "d must be > 0, got %v", d)
			return
		}
		c.attemptTimeout = d
	})
}

// WithTrustedOverrides lets [Override] loosen the Transport's
// policy: retry status codes it does not retry, or wait longer per
// attempt. Without it, an override only tightens, and what it asks beyond
// the Transport's options is held to them and logged at debug level
// ([WithLogger]). Give it only when every caller that can set an override
// is trusted: an override taken from an incoming request could otherwise
// multiply the load on a struggling backend. The number of attempts
// ([WithMaxAttempts]), the budget and the buffer limit hold either way.
func WithTrustedOverrides() Option {
	return optionFunc(func(c *config) { c.trustedOverrides = true })
}

func newConfig(opts []Option) *config {
	c := &config{
		maxAttempts:   DefaultMaxAttempts,
		backoff:       rebound.DefaultBackoff(),
		retryDelayCap: rebound.DefaultRetryDelayCap,
		idempotent:    Idempotent,
		budgetPerHost: defaultBudget,
		clock:         rebound.RealClock(),
		buffers:       replay.Limits{Total: rebound.DefaultBufferTotal, PerCall: rebound.DefaultBufferPerCall},
	}
	for _, code := range DefaultRetryableStatus() {
		c.status.add(code)
	}
	for i, o := range opts {
		if o == nil {
			c.errs = append(c.errs, fmt.Errorf("httpretry: opts[%d]: nil Option", i))
			continue
		}
		o.apply(c)
	}
	if c.strategy != nil && len(c.set) > 0 {
		c.fail("WithStrategy", "cannot be combined with %s, which configures the built-in strategy", c.set[0])
	}
	if c.disabled {
		// One attempt, which is also the cap of every override.
		c.maxAttempts, c.hedge, c.strategy = 1, nil, nil
	}
	return c
}

func (c *config) err() error { return errors.Join(c.errs...) }

func defaultBudget(string) rebound.Budget {
	b, _ := rebound.NewTokenBucket(rebound.DefaultTokenBucket())
	return b
}

// statusSet holds status codes 0-639 as bits.
type statusSet [10]uint64

func (s *statusSet) add(code int) { s[code/64] |= 1 << (code % 64) }
func (s *statusSet) has(code int) bool {
	return code >= 0 && code < 640 && s[code/64]&(1<<(code%64)) != 0
}
