package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/ratelimit"
)

// This file is the "rate-limited API" scenario of issue 24: processes
// calling a server that accepts a fixed rate with a small burst (a token
// bucket, as a reverse proxy's limiter) and refuses the rest with an
// explicit wait (503 + Retry-After, RESOURCE_EXHAUSTED + pushback). Each
// process runs workers in a closed loop: a worker makes one call at a
// time, each with its own deadline. Time is virtual and the run is
// deterministic for a seed.

// RatePolicy is a client policy of the rate-limited scenario.
type RatePolicy int

// The rate-limited scenario's policies.
const (
	// RateNoRetries sends each call once.
	RateNoRetries RatePolicy = iota
	// RateRetries retries a refused attempt after the server's wait (and
	// at least the backoff), up to MaxAttempts, as rebound's clients do
	// by default.
	RateRetries
	// RateAWS adds the AWS SDKs' adaptive retry mode (its CUBIC token
	// bucket, reimplemented with its constants) to RateRetries.
	RateAWS
	// RateOracle paces each process at its exact share of the server's
	// rate, and never retries.
	RateOracle
	// RateRebound adds rebound's adaptive rate limit
	// (rebound.AdaptiveRateLimit, the real one) to RateRetries.
	RateRebound
)

// RatePolicies lists the rate-limited scenario's policies in table order.
var RatePolicies = [...]RatePolicy{RateNoRetries, RateRetries, RateAWS, RateOracle, RateRebound}

func (p RatePolicy) String() string {
	switch p {
	case RateNoRetries:
		return "no retries"
	case RateRetries:
		return "retries"
	case RateAWS:
		return "AWS adaptive"
	case RateOracle:
		return "oracle"
	case RateRebound:
		return "rebound rate limit"
	}
	return fmt.Sprintf("RatePolicy(%d)", int(p))
}

// RateScenario is one row of the rate-limited table.
type RateScenario struct {
	Name string
	// Processes share the server's limit; each has Workers.
	Processes, Workers int
	// Calls per process; with Duration, calls start until Duration has
	// passed instead.
	Calls    int
	Duration time.Duration
	// Limit is the server's rate in requests per second, Burst its burst.
	Limit float64
	Burst float64
	// Wait is the server's explicit wait on a refusal.
	Wait time.Duration
	// Deadline of each call.
	Deadline time.Duration
	// MaxAttempts of the retrying policies.
	MaxAttempts int
	// Window, when not 0, makes the server count requests in fixed
	// windows of that length (Limit × Window each) instead of a token
	// bucket; a refusal then waits for the window's end.
	Window time.Duration
	// Publish is the quota the server publishes on each answer.
	Publish Publish
	// Phase is how long after a whole second the fixed windows start: a
	// server's windows start at its first request, so that a reset
	// written as a Unix time reads up to a second late.
	Phase time.Duration
	// Late is how long after the others the last process starts.
	Late time.Duration
}

// Publish says which rate-limit fields a scenario's server publishes.
type Publish int

// What a server publishes.
const (
	PublishNone Publish = iota
	PublishIETF
	PublishX
)

// RateScenarios are the rows of `rebound sim -ratelimited`: issue 24's
// benchmark (one process, 20 workers, 200 calls against 20 req/s with a
// burst of 2), and ten processes sharing that limit.
var RateScenarios = []RateScenario{
	{Name: "1 process x 20 workers", Processes: 1, Workers: 20, Calls: 200, Limit: 20, Burst: 2, Wait: time.Second, Deadline: 10 * time.Second, MaxAttempts: 3},
	{Name: "10 processes x 2 workers, 300s", Processes: 10, Workers: 2, Duration: 300 * time.Second, Limit: 20, Burst: 2, Wait: time.Second, Deadline: 10 * time.Second, MaxAttempts: 3},
	{Name: "IETF 1 process x 20 workers, 300s", Processes: 1, Workers: 20, Duration: 300 * time.Second, Limit: 20, Burst: 2, Wait: time.Second, Deadline: 10 * time.Second, MaxAttempts: 3, Window: 10 * time.Second, Publish: PublishIETF},
	{Name: "IETF 10 processes x 2 workers, 300s", Processes: 10, Workers: 2, Duration: 300 * time.Second, Limit: 20, Burst: 2, Wait: time.Second, Deadline: 10 * time.Second, MaxAttempts: 3, Window: 10 * time.Second, Publish: PublishIETF},
	{Name: "X 10 processes x 2 workers, 300s", Processes: 10, Workers: 2, Duration: 300 * time.Second, Limit: 20, Burst: 2, Wait: time.Second, Deadline: 10 * time.Second, MaxAttempts: 3, Window: 10 * time.Second, Publish: PublishX},
}

// RateResult is one policy's outcome in a RateScenario.
type RateResult struct {
	Policy RatePolicy
	// Succeeded is the share of calls that succeeded.
	Succeeded float64
	// Load is the requests the server saw per call made.
	Load float64
	// Elapsed is when the last call ended.
	Elapsed time.Duration
	// MinShare and MaxShare are the least and the most any process got
	// of the server's accepted requests over the second half of the run,
	// in units of a fair share (1 is Limit/Processes): 1 and 1 is fair.
	MinShare, MaxShare float64
	// Jain is Jain's fairness index of the processes' shares over the
	// same half, (Σx)²/(n·Σx²): 1 when every process got as much, 1/n
	// when one got everything.
	Jain float64
}

// rtt is the time from sending an attempt to its answer.
const rtt = 2 * time.Millisecond

// RunRateLimited runs every policy on s with seed, in policy order.
func RunRateLimited(ctx context.Context, s RateScenario, seed uint64) ([]RateResult, error) {
	if s.Processes < 1 || s.Workers < 1 || (s.Calls < 1) == (s.Duration <= 0) || s.Duration > time.Hour || !(s.Limit > 0) || !(s.Burst >= 1) || s.Deadline <= 0 || s.MaxAttempts < 1 || s.Phase < 0 || s.Late < 0 ||
		s.Processes*s.Calls > 100_000 {
		return nil, fmt.Errorf("sim: invalid rate-limited scenario %+v", s)
	}
	var out []RateResult
	for _, p := range RatePolicies {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r, err := runRate(s, p, seed)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// rateRun is the state of one policy's run.
type rateRun struct {
	s      RateScenario
	p      RatePolicy
	q      timedHeap[func(now time.Time)] // at is the time since t0
	seq    uint64
	rng    *rand.Rand
	t0     time.Time
	tokens float64 // the server's bucket
	last   time.Time
	window time.Time // the fixed window's start
	used   int64     // in it
	seen   int64
	ok     int64
	calls  int64
	end    time.Time
	// accepted[i] counts process i's accepted requests in the second
	// half of the run (see the caller).
	acceptedAt [][]time.Time
}

func (r *rateRun) after(at time.Time, do func(time.Time)) {
	r.seq++
	r.q.push(timed[func(time.Time)]{at: at.Sub(r.t0), seq: r.seq, v: do})
}

// serve is the server's limiter: it reports whether it accepts a request
// at now, the quota it publishes, and the wait it names. Only rebound's
// rate limit reads the quota, so the fields are written and parsed for
// its attempts alone: doing so for the millions of refused attempts of
// the policies that ignore them was most of the scenario's time.
func (r *rateRun) serve(now time.Time) (bool, rebound.Quota, time.Duration) {
	r.seen++
	if r.s.Window > 0 {
		off := now.UnixNano() - int64(r.s.Phase)
		start := time.Unix(0, off/int64(r.s.Window)*int64(r.s.Window)+int64(r.s.Phase))
		if !start.Equal(r.window) {
			r.window, r.used = start, 0
		}
		limit := int64(r.s.Limit * r.s.Window.Seconds())
		ok := r.used < limit
		if ok {
			r.used++
		}
		end := start.Add(r.s.Window)
		left := end.Sub(now)
		// The fields as a server writes them, read as a client reads
		// them: the reset in whole seconds, rounded up.
		reset := (left + time.Second - 1) / time.Second
		if r.p != RateRebound {
			return ok, rebound.Quota{}, reset * time.Second
		}
		h := http.Header{}
		switch r.s.Publish {
		case PublishIETF:
			h.Set("RateLimit", fmt.Sprintf(`"default";r=%d;t=%d`, limit-r.used, reset))
			h.Set("RateLimit-Policy", fmt.Sprintf(`"default";q=%d;w=%d`, limit, r.s.Window/time.Second))
		case PublishX:
			h.Set("X-RateLimit-Limit", fmt.Sprint(limit))
			h.Set("X-RateLimit-Remaining", fmt.Sprint(limit-r.used))
			h.Set("X-RateLimit-Reset", fmt.Sprint(end.Add(time.Second-1).Unix()))
		}
		q, err := ratelimit.ParseQuota(h.Values, now)
		if err != nil {
			panic(err) // the sim's own fields
		}
		return ok, q, reset * time.Second
	}
	r.tokens = math.Min(r.s.Burst, r.tokens+now.Sub(r.last).Seconds()*r.s.Limit)
	r.last = now
	if r.tokens >= 1 {
		r.tokens--
		return true, rebound.Quota{}, r.s.Wait
	}
	return false, rebound.Quota{}, r.s.Wait
}

// proc is one process: its limiter, if its policy has one.
type proc struct {
	id    int
	calls int // left to start
	reb   *rebound.AdaptiveRateLimit
	aws   *awsLimiter
	next  time.Time // the oracle's next send
	// waiting are the calls waiting in rebound's slow start for an
	// answer.
	waiting []func(time.Time)
}

func runRate(s RateScenario, p RatePolicy, seed uint64) (RateResult, error) {
	r := &rateRun{s: s, p: p, rng: rand.New(rand.NewPCG(seed, uint64(p))), t0: time.Unix(1_700_000_000, 0), tokens: s.Burst}
	r.last = r.t0
	r.acceptedAt = make([][]time.Time, s.Processes)
	for i := range s.Processes {
		// The oracle's processes take turns: each sends at its share of
		// the rate, out of phase with the others.
		pr := &proc{id: i, calls: s.Calls, next: r.t0.Add(time.Duration(float64(i) / s.Limit * float64(time.Second)))}
		switch p {
		case RateRebound:
			l, err := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})
			if err != nil {
				return RateResult{}, err
			}
			pr.reb = l
		case RateAWS:
			pr.aws = newAWSLimiter(r.t0)
		}
		start := r.t0
		if i == s.Processes-1 {
			start = start.Add(s.Late)
		}
		for range s.Workers {
			// Workers start within the first millisecond, as goroutines do.
			r.after(start.Add(time.Duration(r.rng.Int64N(int64(time.Millisecond)))), func(now time.Time) { r.nextCall(pr, now) })
		}
	}
	for len(r.q) > 0 {
		e := r.q.pop()
		e.v(r.t0.Add(e.at))
		if r.seq > 20_000_000 {
			return RateResult{}, ErrTooManyEvents
		}
	}
	calls := float64(r.calls)
	res := RateResult{Policy: p, Succeeded: float64(r.ok) / calls, Load: float64(r.seen) / calls, Elapsed: r.end.Sub(r.t0)}
	// Shares over the second half of the time the processes were all
	// busy: until the first one ran out of calls.
	stop := r.end
	for _, ts := range r.acceptedAt {
		if len(ts) > 0 && ts[len(ts)-1].Before(stop) {
			stop = ts[len(ts)-1]
		}
	}
	half := r.t0.Add(stop.Sub(r.t0) / 2)
	if stop.After(half) {
		fair := s.Limit / float64(s.Processes) * stop.Sub(half).Seconds()
		res.MinShare = math.Inf(1)
		var sum, sq float64
		for _, ts := range r.acceptedAt {
			n := 0
			for _, t := range ts {
				if !t.Before(half) && t.Before(stop) {
					n++
				}
			}
			res.MinShare = math.Min(res.MinShare, float64(n)/fair)
			res.MaxShare = math.Max(res.MaxShare, float64(n)/fair)
			sum += float64(n)
			sq += float64(n) * float64(n)
		}
		if sq > 0 {
			res.Jain = sum * sum / (float64(s.Processes) * sq)
		}
	}
	return res, nil
}

// nextCall starts the worker's next call, if its process has one left.
func (r *rateRun) nextCall(pr *proc, now time.Time) {
	if r.s.Duration > 0 {
		if now.Sub(r.t0) >= r.s.Duration {
			return
		}
	} else if pr.calls == 0 {
		return
	}
	pr.calls--
	r.calls++
	deadline := now.Add(r.s.Deadline)
	r.attempt(pr, now, deadline, 1)
}

// done ends a call at now.
func (r *rateRun) done(pr *proc, now time.Time, ok bool) {
	if ok {
		r.ok++
	}
	if now.After(r.end) {
		r.end = now
	}
	r.nextCall(pr, now)
}

// attempt makes attempt n of a call at now, after its policy's wait.
func (r *rateRun) attempt(pr *proc, now, deadline time.Time, n int) {
	switch r.p {
	case RateOracle:
		at := now
		if pr.next.After(at) {
			at = pr.next
		}
		if at.After(deadline) {
			r.done(pr, now, false)
			return
		}
		pr.next = at.Add(time.Duration(float64(time.Second) * float64(r.s.Processes) / r.s.Limit))
		r.after(at, func(t time.Time) { r.send(pr, t, deadline, n, rebound.Reservation{}) })
	case RateRebound:
		res, ok := pr.reb.ReserveBy(now, deadline)
		if !ok {
			// rebound.ErrRateLimited, at once; the worker pauses before
			// its next call rather than spin.
			r.after(now.Add(100*time.Millisecond), func(t time.Time) { r.done(pr, t, false) })
			return
		}
		if res.Answer() != nil {
			// The slow start: wait for an answer, or for its end, then
			// reserve again (as Gate.Wait).
			woken := false
			wake := func(t time.Time) {
				if !woken {
					woken = true
					pr.reb.Cancel(res, t)
					r.attempt(pr, t, deadline, n)
				}
			}
			pr.waiting = append(pr.waiting, wake)
			r.after(res.Time(), wake)
			return
		}
		if res.Delay(now) == 0 {
			r.send(pr, now, deadline, n, res)
			return
		}
		// As internal/ratelimit's Gate.Wait: a wait that ends after a
		// cut takes a new turn; one that ends just after another attempt
		// went waits out half a spacing.
		r.after(res.Time(), func(t time.Time) {
			at, ok := pr.reb.Ready(res, t)
			if !ok {
				r.attempt(pr, t, deadline, n)
				return
			}
			if at.After(t) {
				r.after(at, func(t time.Time) { r.send(pr, t, deadline, n, res) })
				return
			}
			r.send(pr, t, deadline, n, res)
		})
	case RateAWS:
		// The SDK's GetAttemptToken: sleep for the wait it names, then
		// ask again, within the call's context.
		ok, wait := pr.aws.acquire(now)
		if ok {
			r.send(pr, now, deadline, n, rebound.Reservation{})
			return
		}
		wait = max(wait, time.Microsecond) // the clock moves while it sleeps
		if now.Add(wait).After(deadline) {
			r.after(deadline, func(t time.Time) { r.done(pr, t, false) })
			return
		}
		r.after(now.Add(wait), func(t time.Time) { r.attempt(pr, t, deadline, n) })
	default:
		r.send(pr, now, deadline, n, rebound.Reservation{})
	}
}

// send sends attempt n at now; its answer comes back rtt later.
func (r *rateRun) send(pr *proc, now, deadline time.Time, n int, res rebound.Reservation) {
	ok, quota, wait := r.serve(now)
	if ok {
		r.acceptedAt[pr.id] = append(r.acceptedAt[pr.id], now)
	}
	// The network's delay varies, 1-5ms, as it does between processes.
	r.after(now.Add(rtt/2+time.Duration(r.rng.Int64N(int64(2*rtt)))), func(t time.Time) {
		switch {
		case pr.reb != nil:
			f := rebound.RateFeedback{SlowDown: !ok, Wait: wait}
			if ok {
				f.Wait = 0
			}
			f.Quota = quota
			pr.reb.Observe(res, t, f)
			// The answer closes the slow start's channel: its waiters
			// reserve again.
			waiting := pr.waiting
			pr.waiting = nil
			for _, w := range waiting {
				w(t)
			}
		case pr.aws != nil:
			pr.aws.update(t, !ok)
		}
		if ok {
			r.done(pr, t, true)
			return
		}
		if r.p == RateNoRetries || r.p == RateOracle || n >= r.s.MaxAttempts {
			r.done(pr, t, false)
			return
		}
		// rebound's default backoff (0.1s × 2^(n-1), jittered, at most
		// 20s) with the server's wait as a minimum; the AWS SDK's
		// exponential jitter (at most 20s) as its retryer gives it.
		var d time.Duration
		if r.p == RateAWS {
			d = time.Duration(r.rng.Float64() * math.Min(20, math.Pow(2, float64(n))) * float64(time.Second))
		} else {
			d = max(time.Duration(r.rng.Float64()*0.1*math.Pow(2, float64(n-1))*float64(time.Second)), wait)
		}
		if t.Add(d).After(deadline) {
			r.done(pr, t, false)
			return
		}
		r.after(t.Add(d), func(u time.Time) { r.attempt(pr, u, deadline, n+1) })
	})
}

// awsLimiter is the AWS SDKs' adaptive rate limit (aws-sdk-go-v2
// aws/retry/adaptive_ratelimit.go, botocore's and aws-sdk-java-v2's
// alike), with their constants, on the virtual clock.
type awsLimiter struct {
	enabled                        bool
	fillRate, calculated, measured float64
	lastBucket                     float64
	count                          int64
	lastMax                        float64
	lastThrottle, lastRefill       time.Time
	window                         float64
	tokens, capacity               float64
}

func newAWSLimiter(now time.Time) *awsLimiter {
	return &awsLimiter{lastBucket: math.Floor(secs(now)), lastThrottle: now, capacity: 1}
}

func secs(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func (a *awsLimiter) refill(now time.Time) {
	if a.lastRefill.IsZero() {
		a.lastRefill = now
		return
	}
	a.tokens = math.Min(a.tokens+now.Sub(a.lastRefill).Seconds()*a.fillRate, a.capacity)
	a.lastRefill = now
}

func (a *awsLimiter) acquire(now time.Time) (bool, time.Duration) {
	if !a.enabled {
		return true, 0
	}
	a.refill(now)
	if a.tokens < 1 {
		return false, time.Duration((1 - a.tokens) / a.fillRate * float64(time.Second))
	}
	a.tokens--
	return true, 0
}

func (a *awsLimiter) update(now time.Time, throttled bool) {
	const beta, scale, smooth, minRate = 0.7, 0.4, 0.8, 0.5
	b := math.Floor(secs(now)*2) / 2
	a.count++
	if b > a.lastBucket {
		a.measured = float64(a.count)/(b-a.lastBucket)*smooth + a.measured*(1-smooth)
		a.count, a.lastBucket = 0, b
	}
	if throttled {
		use := a.measured
		if a.enabled {
			use = math.Min(a.measured, a.fillRate)
		}
		a.lastMax = use
		a.window = math.Cbrt(a.lastMax * (1 - beta) / scale)
		a.lastThrottle = now
		a.calculated = use * beta
		a.enabled = true
	} else {
		a.window = math.Cbrt(a.lastMax * (1 - beta) / scale)
		a.calculated = scale*math.Pow(now.Sub(a.lastThrottle).Seconds()-a.window, 3) + a.lastMax
	}
	r := math.Min(a.calculated, 2*a.measured)
	a.refill(now)
	a.fillRate = math.Max(r, minRate)
	a.capacity = math.Max(r, 1)
	a.tokens = math.Min(a.tokens, a.capacity)
}
