// Package sim is a deterministic discrete-event simulation of many clients
// retrying against one server of finite capacity through an outage. It
// compares retry policies by the load they offer the server and the
// requests they complete, using rebound's real strategies and budgets.
//
// # Model
//
// Time is virtual: a run of minutes takes milliseconds, and the same
// [Config] (seed included) always gives the same [Report].
//
//   - Clients: [Config.Clients] processes, each sending new requests as a
//     Poisson process of [Config.Rate] requests per second during
//     [0, Config.Duration). Every policy sees the same arrivals.
//   - Server: [Config.Capacity] × [Config.Latency] workers (rounded), so it
//     completes up to Capacity attempts per second. An attempt that finds a
//     worker free holds it for Latency and succeeds. What happens to one
//     that finds none depends on [Config.Shape]: in the default, Refuse,
//     it is refused at once, as a server whose handler fails fast answers
//     UNAVAILABLE (there is no queue, so load beyond capacity is refused,
//     never delayed); in every other shape it queues, first come first
//     served, and is dropped when its request's deadline passes, as a
//     handler that watches its context drops the request of a client that
//     has gone. A refusal reaches the client 1ms later and is retryable.
//   - Outage: during [OutageStart, OutageStart+OutageLength) the shape
//     acts: only [Config.OutageCapacity] of the workers serve (Refuse and
//     Slow; 0 means none); attempts hang until it ends (Hang) or fail at
//     once (FailFast), sparing OutageCapacity of them; or an attacker
//     calls beside the clients (FastCalls, SlowClients). Attempts already
//     being served finish normally.
//   - Clients retry through a [rebound.Strategy] of their own, as a process
//     does, so each has its own budget (A6 throttles per server name per
//     client process). A retry waits the delay its token gives, which the
//     shared [Config.Backoff] jitters with a seeded random source. A request
//     with a [Config.Deadline] makes no attempt that would start after it;
//     the strategies see the deadline through the virtual clock.
//
// The policies, see [Policy], are: no retries; naive retries (up to
// MaxAttempts, no budget); A6 retryPolicy with a per-client
// [rebound.Throttle]; the Smithy standard strategy with a per-client
// [rebound.TokenBucket]; A6 retryPolicy behind a per-client
// [rebound.AdaptiveThrottle]; the server's shedder with pushback (package
// shed), obeyed by A6 retryPolicy; and both; and A6 retryPolicy with the
// budgets of service meshes, a per-client [rebound.RatioBudget] (Finagle,
// Linkerd) or [rebound.ConcurrencyBudget] (Envoy).
//
// The shedder is package shed's own limiter (internal/shedrule) on virtual
// time, with shed.DefaultConfig and [Config.RetryShare]: it admits an
// attempt while the attempts in flight are below its limit, and learns
// the limit from the latency of those served whole, which grows once a
// queueing server's workers are all busy; it sheds the others with its
// pushback, a delay or "don't retry" once more than RetryShare of the last
// second's attempts were shed or refused; it speaks, by the same rule, for
// the server's own refusals (no worker free in Refuse, FailFast); an
// attempt that fails or is dropped teaches it nothing, and a slow client's
// wait holds no slot. It starts warm: before time 0 it has served the
// healthy load for 20s, so that a run begins from its steady state. Each
// client's requests come from a peer of its own, the attacker's from one
// more. A full outage is then a server that still answers, as one whose
// database is down does; a server whose process is gone gives no pushback,
// and only the client-side policies remain.
//
// Load amplification is attempts sent per new request; during the outage it
// is the attempts sent within the window per request that arrived in it.
// Goodput is requests that succeeded per second of virtual time, counted
// when their successful attempt completes. Recovery (see
// [Result.Recovery]) is the time after the outage until the requests
// arriving succeed again at 90% of their share before it.
//
// In the default scenario the model reproduces the claim of the SRE book's
// "Handling Overload" chapter: per-request retry limits alone multiply the
// load on a failing server several times over (here up to MaxAttempts×),
// while a per-client retry budget keeps it near 1.1×.
package sim

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/rebound-go/rebound"
)

// Limits on a [Config], so that no setting can make a run take unbounded
// time or memory.
const (
	// MaxRequests bounds the expected number of new requests,
	// Clients × Rate × Duration.
	MaxRequests = 2_000_000
	// MaxEvents bounds the events of one [Run], all policies together; a
	// run that would need more stops with [ErrTooManyEvents].
	MaxEvents = 20_000_000
	// MaxClients bounds Config.Clients.
	MaxClients = 100_000
	// MaxAttempts bounds Config.MaxAttempts.
	MaxAttempts = 10
	// MaxWorkers bounds the server's workers, Capacity × Latency.
	MaxWorkers = 10_000_000
)

// ErrTooManyEvents is returned by [Run] when the simulation needs more than
// [MaxEvents] events.
var ErrTooManyEvents = fmt.Errorf("sim: more than %d events", MaxEvents)

// Config describes one scenario. The zero value is invalid; start from
// [DefaultConfig].
type Config struct {
	// Clients is the number of client processes, in [1, MaxClients].
	Clients int
	// Rate is the new requests per second of each client, > 0.
	Rate float64
	// Duration is how long new requests arrive; the run continues until
	// every request has ended. In (0, 24h].
	Duration time.Duration
	// Capacity is the attempts per second the healthy server completes,
	// > 0.
	Capacity float64
	// Latency is how long a served attempt takes, in (0, 1m]. Capacity ×
	// Latency, rounded, is the number of workers and must be at least 1.
	Latency time.Duration
	// OutageStart is when the outage begins, >= 0.
	OutageStart time.Duration
	// OutageLength is how long it lasts, >= 0, ending by Duration.
	OutageLength time.Duration
	// OutageCapacity is the fraction of workers that serve during the
	// outage (shapes Refuse and Slow), or of the attempts it spares
	// (Hang and FailFast), in [0, 1]; the attackers' shapes leave the
	// server its capacity and need 0.
	OutageCapacity float64
	// Shape is what the outage does; the zero value is Refuse, a server
	// that refuses what its workers cannot take. See [Shape].
	Shape Shape
	// AttackRate is, for the attackers' shapes, the attacker's calls
	// (FastCalls) or streams (SlowClients) per second, in (0, 1e5]; 0
	// otherwise.
	AttackRate float64
	// Seed selects the arrivals and the jitter.
	Seed uint64
	// MaxAttempts is the limit of attempts per request, the first
	// included, for every policy that retries. In [1, MaxAttempts].
	MaxAttempts int
	// Backoff is the delay between attempts of every policy that retries.
	Backoff rebound.Backoff
	// Deadline, if > 0, is each request's deadline from its arrival;
	// at most 24h.
	Deadline time.Duration
	// Throttle configures each client's A6 throttle.
	Throttle rebound.ThrottleConfig
	// Bucket configures each client's token bucket.
	Bucket rebound.TokenBucketConfig
	// Adaptive configures each client's adaptive throttle (policies
	// [Adaptive] and [ShedAdaptive]); zero fields mean the SRE book's
	// defaults, K 2 and a 2-minute window.
	Adaptive rebound.AdaptiveThrottleConfig
	// RetryShare is the share of recent attempts the server's shedder
	// (policies [Shed] and [ShedAdaptive]) may refuse and still invite a
	// retry, as shed.Config.RetryShare, in [0, 1).
	RetryShare float64
	// Ratio configures each client's ratio budget (policy [Ratio]); its
	// Clock is the simulation's.
	Ratio rebound.RatioBudgetConfig
	// Concurrency configures each client's concurrency budget (policy
	// [Concurrency]).
	Concurrency rebound.ConcurrencyBudgetConfig
}

// DefaultConfig is the default scenario: 50 clients at 20 requests per
// second each (1000/s) against a server that completes 1250/s, which is
// down for 30s of a 90s run; 5 attempts with [rebound.DefaultBackoff], a
// 10s deadline, A6's example throttle (10 tokens, ratio 0.1), the
// Smithy example bucket, and the default budgets of Finagle (retries 20%
// of the last 10s's requests, plus 10/s) and Envoy (20% of the requests in
// flight, at least 3).
var DefaultConfig = Config{
	Clients:        50,
	Rate:           20,
	Duration:       90 * time.Second,
	Capacity:       1250,
	Latency:        100 * time.Millisecond,
	OutageStart:    30 * time.Second,
	OutageLength:   30 * time.Second,
	OutageCapacity: 0,
	Seed:           1,
	MaxAttempts:    5,
	Backoff:        rebound.DefaultBackoff(),
	Deadline:       10 * time.Second,
	Throttle:       rebound.ThrottleConfig{MaxTokens: 10, TokenRatio: 0.1},
	Bucket:         rebound.DefaultTokenBucket(),
	RetryShare:     0.1,
	Ratio:          rebound.DefaultRatioBudget(),
	Concurrency:    rebound.DefaultConcurrencyBudget(),
}

// FieldError reports an invalid [Config] field.
type FieldError struct {
	// Field is the field's path in Config, such as "Throttle.MaxTokens".
	Field string
	// Problem says what is wrong, such as "must be >= 1, got 0".
	Problem string
}

func (e *FieldError) Error() string { return "sim: Config." + e.Field + " " + e.Problem }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Validate reports the first invalid field as a [*FieldError], or nil.
func (c Config) Validate() error {
	switch {
	case c.Clients < 1 || c.Clients > MaxClients:
		return fieldErr("Clients", "must be in [1, %d], got %d", MaxClients, c.Clients)
	case !(c.Rate > 0) || math.IsInf(c.Rate, 0):
		return fieldErr("Rate", "must be a finite number > 0, got %v", c.Rate)
	case c.Duration <= 0 || c.Duration > 24*time.Hour:
		return fieldErr("Duration", "must be in (0, 24h], got %v", c.Duration)
	}
	if n := float64(c.Clients) * c.Rate * c.Duration.Seconds(); n > MaxRequests {
		return fieldErr("Rate", "is too high: %d clients × %v/s × %v = %.3g expected requests, more than %d", c.Clients, c.Rate, c.Duration, n, MaxRequests)
	}
	switch {
	case !(c.Capacity > 0) || math.IsInf(c.Capacity, 0):
		return fieldErr("Capacity", "must be a finite number > 0, got %v", c.Capacity)
	case c.Latency <= 0 || c.Latency > time.Minute:
		return fieldErr("Latency", "must be in (0, 1m], got %v", c.Latency)
	}
	if w := c.Capacity * c.Latency.Seconds(); !(w >= 0.5 && w < MaxWorkers+0.5) {
		return fieldErr("Capacity", "does not fit the latency: %v/s × %v = %.3g server workers, want 1 to %d", c.Capacity, c.Latency, w, MaxWorkers)
	}
	switch {
	case c.OutageStart < 0:
		return fieldErr("OutageStart", "must be >= 0, got %v", c.OutageStart)
	case c.OutageLength < 0:
		return fieldErr("OutageLength", "must be >= 0, got %v", c.OutageLength)
	case c.OutageStart > c.Duration || c.OutageLength > c.Duration-c.OutageStart:
		return fieldErr("OutageLength", "must end by the end of the run: %v + %v > %v", c.OutageStart, c.OutageLength, c.Duration)
	case !(c.OutageCapacity >= 0 && c.OutageCapacity <= 1):
		return fieldErr("OutageCapacity", "must be in [0, 1], got %v", c.OutageCapacity)
	case c.Shape < Refuse || c.Shape > SlowClients:
		return fieldErr("Shape", "must be one of %v, got %v", Shapes, c.Shape)
	case c.Shape.attacks() && c.OutageCapacity != 0:
		return fieldErr("OutageCapacity", "must be 0 for the attacker of shape %v: the server keeps its capacity, got %v", c.Shape, c.OutageCapacity)
	case c.Shape.attacks() && !(c.AttackRate > 0 && c.AttackRate <= 1e5):
		return fieldErr("AttackRate", "must be in (0, 100000] for shape %v, got %v", c.Shape, c.AttackRate)
	case !c.Shape.attacks() && c.AttackRate != 0:
		return fieldErr("AttackRate", "applies only to the attackers' shapes (%v, %v), got %v with %v", FastCalls, SlowClients, c.AttackRate, c.Shape)
	case c.AttackRate*c.OutageLength.Seconds() > MaxRequests:
		return fieldErr("AttackRate", "is too high: %v/s × %v = %.3g attacker requests, more than %d", c.AttackRate, c.OutageLength, c.AttackRate*c.OutageLength.Seconds(), MaxRequests)
	case c.MaxAttempts < 1 || c.MaxAttempts > MaxAttempts:
		return fieldErr("MaxAttempts", "must be in [1, %d], got %d", MaxAttempts, c.MaxAttempts)
	case c.Backoff.Initial <= 0 || c.Backoff.Initial > time.Hour:
		return fieldErr("Backoff.Initial", "must be in (0, 1h], got %v", c.Backoff.Initial)
	case c.Backoff.Max < c.Backoff.Initial || c.Backoff.Max > time.Hour:
		return fieldErr("Backoff.Max", "must be in [%v, 1h], got %v", c.Backoff.Initial, c.Backoff.Max)
	case !(c.Backoff.Multiplier > 0 && c.Backoff.Multiplier <= 1000):
		return fieldErr("Backoff.Multiplier", "must be in (0, 1000], got %v", c.Backoff.Multiplier)
	case !(c.Backoff.Proportional >= 0 && c.Backoff.Proportional <= 1):
		return fieldErr("Backoff.Proportional", "must be in [0, 1], got %v", c.Backoff.Proportional)
	case c.Deadline < 0 || c.Deadline > 24*time.Hour:
		return fieldErr("Deadline", "must be in [0, 24h] (0 for none), got %v", c.Deadline)
	case c.Throttle.MaxTokens < 1 || c.Throttle.MaxTokens > 1000:
		return fieldErr("Throttle.MaxTokens", "must be in [1, 1000], got %d", c.Throttle.MaxTokens)
	case !(c.Throttle.TokenRatio >= 0.001 && c.Throttle.TokenRatio <= 1000):
		return fieldErr("Throttle.TokenRatio", "must be in [0.001, 1000] (A6 keeps 3 decimals), got %v", c.Throttle.TokenRatio)
	case c.Bucket.Capacity < 1 || c.Bucket.Capacity > 1e9:
		return fieldErr("Bucket.Capacity", "must be in [1, 1e9], got %d", c.Bucket.Capacity)
	case c.Bucket.RetryCost < 1 || c.Bucket.RetryCost > 1e9:
		return fieldErr("Bucket.RetryCost", "must be in [1, 1e9], got %d", c.Bucket.RetryCost)
	case c.Bucket.TimeoutCost < 1 || c.Bucket.TimeoutCost > 1e9:
		return fieldErr("Bucket.TimeoutCost", "must be in [1, 1e9], got %d", c.Bucket.TimeoutCost)
	case c.Bucket.SuccessRefund < 0 || c.Bucket.SuccessRefund > 1e9:
		return fieldErr("Bucket.SuccessRefund", "must be in [0, 1e9], got %d", c.Bucket.SuccessRefund)
	case c.Adaptive.K != 0 && !(c.Adaptive.K >= 1 && c.Adaptive.K <= 1000):
		return fieldErr("Adaptive.K", "must be in [1, 1000] (0 for 2), got %v", c.Adaptive.K)
	case c.Adaptive.Window != 0 && (c.Adaptive.Window < time.Second || c.Adaptive.Window > 24*time.Hour):
		return fieldErr("Adaptive.Window", "must be in [1s, 24h] (0 for 2m), got %v", c.Adaptive.Window)
	case !(c.RetryShare >= 0 && c.RetryShare < 1):
		return fieldErr("RetryShare", "must be in [0, 1), got %v", c.RetryShare)
	case !(c.Ratio.Ratio >= 0 && c.Ratio.Ratio <= 1000):
		return fieldErr("Ratio.Ratio", "must be in [0, 1000], got %v", c.Ratio.Ratio)
	case !(c.Ratio.MinRetriesPerSecond >= 0 && c.Ratio.MinRetriesPerSecond <= 1e9):
		return fieldErr("Ratio.MinRetriesPerSecond", "must be in [0, 1e9], got %v", c.Ratio.MinRetriesPerSecond)
	case c.Ratio.TTL < time.Second || c.Ratio.TTL > time.Hour:
		return fieldErr("Ratio.TTL", "must be in [1s, 1h], got %v", c.Ratio.TTL)
	case !(c.Concurrency.Percent >= 0 && c.Concurrency.Percent <= 100000):
		return fieldErr("Concurrency.Percent", "must be in [0, 100000], got %v", c.Concurrency.Percent)
	case c.Concurrency.MinConcurrency < 0 || c.Concurrency.MinConcurrency > 1e9:
		return fieldErr("Concurrency.MinConcurrency", "must be in [0, 1e9], got %d", c.Concurrency.MinConcurrency)
	}
	return nil
}

// Workers returns the number of server workers, Capacity × Latency rounded.
// It is meaningful only for a valid Config.
func (c Config) Workers() int {
	return int(math.Round(c.Capacity * c.Latency.Seconds()))
}

// Policy is a client retry policy; the zero value is [NoRetries].
type Policy int

// The policies, in the order [Run] reports them.
const (
	// NoRetries makes one attempt per request.
	NoRetries Policy = iota
	// Naive retries every failure up to MaxAttempts, with backoff and no
	// budget: the per-request limit alone.
	Naive
	// Throttled is A6's retryPolicy with each client's own
	// [rebound.Throttle].
	Throttled
	// Bucket is the Smithy standard strategy ([rebound.Standard]) with
	// each client's own [rebound.TokenBucket].
	Bucket
	// Adaptive is A6's retryPolicy without a budget, behind each
	// client's own [rebound.AdaptiveThrottle], which every attempt asks,
	// the first included.
	Adaptive
	// Shed puts the server's shedder (package shed's limiter) in front:
	// an attempt it sheds, or one the server refuses at once, carries its
	// pushback, a delay or "don't retry". Clients run A6's retryPolicy
	// without a budget, and obey the pushback.
	Shed
	// ShedAdaptive is Shed with each client's adaptive throttle too.
	ShedAdaptive
	// Ratio is A6's retryPolicy with each client's own
	// [rebound.RatioBudget].
	Ratio
	// Concurrency is A6's retryPolicy with each client's own
	// [rebound.ConcurrencyBudget].
	Concurrency
)

// Policies lists every policy in the order [Run] reports them.
var Policies = [...]Policy{NoRetries, Naive, Throttled, Bucket, Adaptive, Shed, ShedAdaptive, Ratio, Concurrency}

// String returns a short name without spaces: "no-retries", "naive",
// "a6-throttle" or "token-bucket".
func (p Policy) String() string {
	switch p {
	case NoRetries:
		return "no-retries"
	case Naive:
		return "naive"
	case Throttled:
		return "a6-throttle"
	case Bucket:
		return "token-bucket"
	case Adaptive:
		return "adaptive"
	case Shed:
		return "shed"
	case ShedAdaptive:
		return "shed+adaptive"
	case Ratio:
		return "ratio-budget"
	case Concurrency:
		return "concurrency-budget"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// Describe returns a one-line account of p under c, for a legend.
func (p Policy) Describe(c Config) string {
	switch p {
	case NoRetries:
		return "no retries: 1 attempt per request"
	case Naive:
		return fmt.Sprintf("naive retries: up to %d attempts, no budget", c.MaxAttempts)
	case Throttled:
		return fmt.Sprintf("A6 throttle per client: maxTokens %d, tokenRatio %v, up to %d attempts",
			c.Throttle.MaxTokens, c.Throttle.TokenRatio, c.MaxAttempts)
	case Bucket:
		return fmt.Sprintf("token bucket per client (standard): %d tokens, retry costs %d, success refunds %d, up to %d attempts",
			c.Bucket.Capacity, c.Bucket.RetryCost, c.Bucket.SuccessRefund, c.MaxAttempts)
	case Adaptive:
		return fmt.Sprintf("adaptive throttle per client (SRE book): K %v, window %v, every attempt; up to %d attempts, no budget",
			adaptiveK(c), adaptiveWindow(c), c.MaxAttempts)
	case Shed:
		return fmt.Sprintf("server sheds above a limit it learns from latency, with pushback (package shed): retries invited while at most %v of the last second was shed or refused, else \"don't retry\"; clients: up to %d attempts, no budget",
			c.RetryShare, c.MaxAttempts)
	case ShedAdaptive:
		return fmt.Sprintf("server sheds with pushback, and each client has an adaptive throttle (K %v, window %v)", adaptiveK(c), adaptiveWindow(c))
	case Ratio:
		return fmt.Sprintf("ratio budget per client (Finagle, Linkerd): retries at most %v of the last %v's requests plus %v/s, up to %d attempts",
			c.Ratio.Ratio, c.Ratio.TTL, c.Ratio.MinRetriesPerSecond, c.MaxAttempts)
	case Concurrency:
		return fmt.Sprintf("concurrency budget per client (Envoy): retries in flight at most %v%% of the requests in flight, or %d, up to %d attempts",
			c.Concurrency.Percent, c.Concurrency.MinConcurrency, c.MaxAttempts)
	}
	return p.String()
}

// Result is the outcome of one policy. Counts are of requests unless they
// say attempts.
type Result struct {
	// Policy is the policy simulated.
	Policy Policy
	// Requests is the number of new requests; Attempts the attempts they
	// made, retries included.
	Requests, Attempts int
	// OutageRequests arrived during the outage; OutageAttempts were sent
	// during it, whenever their request arrived.
	OutageRequests, OutageAttempts int
	// Succeeded is the number of requests that succeeded.
	Succeeded int
	// Exhausted, Throttled, PastDeadline and PushedBack count the failed
	// requests by why retrying stopped: attempts exhausted, budget or
	// adaptive throttle refused, the next attempt would have passed the
	// deadline, or the server's pushback said not to retry.
	Exhausted, Throttled, PastDeadline, PushedBack int
	// RejectedLocally counts the attempts an adaptive throttle kept home;
	// they are not in Attempts. Each ended its request, as Throttled.
	RejectedLocally int
	// Amplification is Attempts / Requests; OutageAmplification is
	// OutageAttempts / OutageRequests (0 without outage requests).
	Amplification, OutageAmplification float64
	// Goodput is the requests per second that succeeded during
	// [0, Duration); RecoveryGoodput the same after the outage,
	// [OutageStart+OutageLength, Duration) (0 if that is empty).
	Goodput, RecoveryGoodput float64
	// SuccessRate is Succeeded / Requests.
	SuccessRate float64
	// P50 and P99 are percentiles of the time from a request's arrival to
	// its success, over the requests that succeeded (0 if none did).
	P50, P99 time.Duration
	// Offered is the attempts per second sent in each interval of
	// [Report.Interval], from time 0 to Duration.
	Offered []float64
	// Shed counts the attempts the shedder rejected before they started;
	// Refused those the server's handler failed at once with UNAVAILABLE
	// (Refuse with no worker free, FailFast), which a shedder speaks for.
	Shed, Refused int
	// Recovery is the time from the outage's end until the requests
	// arriving succeed about as often as before it: until the share of
	// those arriving in a [RecoveryWindow] that succeed, whenever they
	// do, is back to 90% of the share of those that arrived in the 10s
	// before the outage (of all, when none did), in steps of 10ms.
	// Recovered is false when that never happens before the run ends.
	// The clients' load is the same throughout, so this is the goodput of
	// new requests back to 90% of what it was. Without an outage,
	// Recovery is 0 and Recovered true.
	Recovery  time.Duration
	Recovered bool
	// Limit is the shedder's concurrency limit at the end of each
	// interval of [Report.Interval]; nil for a policy without one.
	Limit []float64
}

// RecoveryWindow is the span of arrivals over which [Result.Recovery]
// measures the share that succeed.
const RecoveryWindow = time.Second

// preOutage is how far before the outage Recovery's yardstick reaches.
const preOutage = 10 * time.Second

// recoveryStep is the step of Recovery: 10ms, or a 20,000th of a long
// run.
func recoveryStep(c Config) time.Duration { return max(10*time.Millisecond, c.Duration/20000) }

func recoverySteps(c Config) int {
	st := recoveryStep(c)
	return int((c.Duration + st - 1) / st)
}

func recoveryStepOf(c Config, at time.Duration) int { return int(at / recoveryStep(c)) }

// recovery computes Result.Recovery from the arrivals and the successes
// of each step, counted by arrival.
func recovery(c Config, arr []arrival, succeeded []int32) (time.Duration, bool) {
	if c.OutageLength == 0 {
		return 0, true
	}
	step := recoveryStep(c)
	n := len(succeeded)
	arrived, ok := make([]int64, n+1), make([]int64, n+1) // prefix sums
	for _, a := range arr {
		arrived[recoveryStepOf(c, a.at)+1]++
	}
	for i := range n {
		arrived[i+1] += arrived[i]
		ok[i+1] = ok[i] + int64(succeeded[i])
	}
	want := 0.9
	from, to := recoveryStepOf(c, max(0, c.OutageStart-preOutage)), recoveryStepOf(c, c.OutageStart)
	if a := arrived[to] - arrived[from]; a > 0 {
		want = 0.9 * float64(ok[to]-ok[from]) / float64(a)
	}
	end := c.OutageStart + c.OutageLength
	w := max(1, int(RecoveryWindow/step))
	for i := int((end + step - 1) / step); i+w <= n; i++ {
		if a := arrived[i+w] - arrived[i]; a > 0 && float64(ok[i+w]-ok[i]) >= want*float64(a) {
			return time.Duration(i)*step - end, true
		}
	}
	return 0, false
}

// Report is the outcome of [Run].
type Report struct {
	// Config is the scenario simulated.
	Config Config
	// Interval is the width of the intervals of [Result.Offered].
	Interval time.Duration
	// Results holds one Result per policy, in the order of [Policies].
	Results []Result
	// Arrivals is the new requests per second that arrived in each
	// interval of Interval, from time 0 to Duration: the same for every
	// policy. [Result.Offered] divided by it is the load amplification over
	// time.
	Arrivals []float64
	// Events is the number of events simulated, all policies together.
	Events int
}

// Run simulates every policy of [Policies] on the scenario c. It returns
// c's [*FieldError] if c is invalid, [ErrTooManyEvents] if the run would be
// too long, or ctx's cause if ctx ends first. The result depends only on c.
// Run keeps no state between calls and is safe for concurrent use.
func Run(ctx context.Context, c Config) (*Report, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	arr := arrivals(c)
	r := &Report{Config: c, Interval: interval(c.Duration)}
	r.Arrivals = perInterval(c.Duration, r.Interval, func(count []int) {
		for _, a := range arr {
			count[a.at/r.Interval]++
		}
	})
	for _, p := range Policies {
		e, err := newEngine(c, p, arr, r.Interval, MaxEvents-r.Events)
		if err != nil {
			return nil, err
		}
		res, err := e.run(ctx)
		r.Events += e.events
		if err != nil {
			return nil, err
		}
		r.Results = append(r.Results, res)
	}
	return r, nil
}

// interval picks a round interval for the offered-load series that gives
// at most 300 points.
func interval(d time.Duration) time.Duration {
	for _, iv := range []time.Duration{
		100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
		time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second,
		30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute,
	} {
		if d/iv <= 300 {
			return iv
		}
	}
	return 10 * time.Minute
}

// perInterval returns the rate per second in each interval of iv from 0 to
// d, of the counts that add fills in.
func perInterval(d, iv time.Duration, add func(count []int)) []float64 {
	count := make([]int, (d+iv-1)/iv)
	add(count)
	out := make([]float64, len(count))
	for i, n := range count {
		width := min(iv, d-time.Duration(i)*iv)
		out[i] = float64(n) / width.Seconds()
	}
	return out
}
