// Package observe records what the front doors' retries did: A6 statistics
// for Stats snapshots, the gRFC A96 OpenTelemetry instruments, and debug
// logs of each decision.
package observe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/rebound-go/rebound"
)

// Instrument names: gRFC A96, and two counters of ours in the same style.
const (
	RetriesName            = "grpc.client.call.retries"
	TransparentRetriesName = "grpc.client.call.transparent_retries"
	HedgesName             = "grpc.client.call.hedges"
	RetryDelayName         = "grpc.client.call.retry_delay"
	ThrottledName          = "grpc.client.call.retries_throttled"
	PushbackStoppedName    = "grpc.client.call.retries_pushback_stopped"
)

// Attribute keys of A66.
const (
	MethodKey = attribute.Key("grpc.method")
	TargetKey = attribute.Key("grpc.target")
)

// Recommended bucket boundaries (A96 for counts, A66 latency for delays).
var (
	countBuckets       = []float64{1, 2, 3, 4, 5}
	transparentBuckets = []float64{1, 2, 3, 4, 5, 10}
	latencyBuckets     = []float64{0, 0.00001, 0.00005, 0.0001, 0.0003, 0.0006, 0.0008, 0.001, 0.002,
		0.003, 0.004, 0.005, 0.006, 0.008, 0.01, 0.013, 0.016, 0.02, 0.025, 0.03, 0.04, 0.05, 0.065,
		0.08, 0.1, 0.13, 0.16, 0.2, 0.25, 0.3, 0.4, 0.5, 0.65, 0.8, 1, 2, 5, 10, 20, 50, 100}
)

// Call is what a front door learned about one call, recorded at its end.
type Call struct {
	Method, Target string
	// Attempts counts every attempt, the first included, transparent
	// retries excluded.
	Attempts int
	// Hedged says the attempts after the first were hedges, not retries.
	Hedged bool
	// FailedLater counts the attempts after the first that failed.
	FailedLater int
	// Transparent counts transparent retries.
	Transparent int
	// Delay is the time spent with no attempt in flight.
	Delay time.Duration
	// Pushbacks counts retries or hedges delayed by server pushback.
	Pushbacks int
	// Throttled says the budget refused a retry or hedge, even if the
	// call went on to succeed with the attempts already sent.
	Throttled bool
	// Reason is why retrying stopped, nil after a success.
	Reason error
}

// Recorder records calls. The zero value is not usable; a nil *Recorder
// records nothing. It is safe for concurrent use.
type Recorder struct {
	methods sync.Map // string -> *counters
	inst    *instruments
	logger  *slog.Logger
}

type instruments struct {
	retries, transparent, hedges metric.Int64Histogram
	delay                        metric.Float64Histogram
	throttled, pushback          metric.Int64Counter
}

// New returns a Recorder. mp and logger may be nil; scope names the meter.
func New(mp metric.MeterProvider, logger *slog.Logger, scope string) (*Recorder, error) {
	r := &Recorder{logger: logger}
	if mp == nil {
		return r, nil
	}
	m := mp.Meter(scope)
	var in instruments
	var errs [6]error
	in.retries, errs[0] = m.Int64Histogram(RetriesName, metric.WithUnit("{retry}"),
		metric.WithDescription("Number of retries during the client call. If there were no retries, 0 is not reported."),
		metric.WithExplicitBucketBoundaries(countBuckets...))
	in.transparent, errs[1] = m.Int64Histogram(TransparentRetriesName, metric.WithUnit("{transparent_retry}"),
		metric.WithDescription("Number of transparent retries during the client call. If there were no transparent retries, 0 is not reported."),
		metric.WithExplicitBucketBoundaries(transparentBuckets...))
	in.hedges, errs[2] = m.Int64Histogram(HedgesName, metric.WithUnit("{hedge}"),
		metric.WithDescription("Number of hedges during the client call. If there were no hedges, 0 is not reported."),
		metric.WithExplicitBucketBoundaries(countBuckets...))
	in.delay, errs[3] = m.Float64Histogram(RetryDelayName, metric.WithUnit("s"),
		metric.WithDescription("Total time of delay while there is no active attempt during the client call."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	in.throttled, errs[4] = m.Int64Counter(ThrottledName, metric.WithUnit("{retry}"),
		metric.WithDescription("Number of retries or hedges not made because retry throttling or the retry budget refused them."))
	in.pushback, errs[5] = m.Int64Counter(PushbackStoppedName, metric.WithUnit("{retry}"),
		metric.WithDescription("Number of retries or hedges not made because server pushback said not to retry."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("creating instruments: %w", err)
	}
	r.inst = &in
	return r, nil
}

// counters are one method's statistics.
type counters struct {
	calls, transparent, throttled, stops, pushbacks atomic.Uint64
	delay                                           atomic.Int64
	retries, hedges                                 attemptCounters
}

type attemptCounters struct {
	attempts, failed atomic.Uint64
	histogram        [8]atomic.Uint64
}

func (a *attemptCounters) add(attempts, failed int) {
	if attempts <= 0 {
		return
	}
	a.attempts.Add(uint64(attempts))
	a.failed.Add(uint64(failed))
	for k := 1; k <= attempts; k++ {
		a.histogram[rebound.StatsBucket(k)].Add(1)
	}
}

func (a *attemptCounters) snapshot() rebound.AttemptStats {
	s := rebound.AttemptStats{Attempts: a.attempts.Load(), Failed: a.failed.Load()}
	for i := range a.histogram {
		s.Histogram[i] = a.histogram[i].Load()
	}
	return s
}

func (r *Recorder) method(name string) *counters {
	if v, ok := r.methods.Load(name); ok {
		return v.(*counters)
	}
	v, _ := r.methods.LoadOrStore(name, new(counters))
	return v.(*counters)
}

// End records a finished call.
func (r *Recorder) End(ctx context.Context, c *Call) {
	if r == nil {
		return
	}
	m := r.method(c.Method)
	m.calls.Add(1)
	later := max(c.Attempts-1, 0)
	if c.Hedged {
		m.hedges.add(later, c.FailedLater)
	} else {
		m.retries.add(later, c.FailedLater)
	}
	throttled := c.Throttled || errors.Is(c.Reason, rebound.ErrBudgetExhausted)
	stopped := errors.Is(c.Reason, rebound.ErrPushback)
	if c.Transparent > 0 {
		m.transparent.Add(uint64(c.Transparent))
	}
	if throttled {
		m.throttled.Add(1)
	}
	if stopped {
		m.stops.Add(1)
	}
	if c.Pushbacks > 0 {
		m.pushbacks.Add(uint64(c.Pushbacks))
	}
	if c.Delay > 0 {
		m.delay.Add(int64(c.Delay))
	}
	if r.inst == nil || (later == 0 && c.Transparent == 0 && c.Delay == 0 && !throttled && !stopped) {
		return
	}
	attrs := metric.WithAttributes(MethodKey.String(c.Method), TargetKey.String(c.Target))
	switch {
	case later > 0 && c.Hedged:
		r.inst.hedges.Record(ctx, int64(later), attrs)
	case later > 0:
		r.inst.retries.Record(ctx, int64(later), attrs)
	}
	if c.Transparent > 0 {
		r.inst.transparent.Record(ctx, int64(c.Transparent), attrs)
	}
	r.inst.delay.Record(ctx, c.Delay.Seconds(), attrs)
	if throttled {
		r.inst.throttled.Add(ctx, 1, attrs)
	}
	if stopped {
		r.inst.pushback.Add(ctx, 1, attrs)
	}
}

// Stats returns a snapshot of every method's statistics.
func (r *Recorder) Stats() rebound.Stats {
	s := rebound.Stats{}
	if r == nil {
		return s
	}
	r.methods.Range(func(k, v any) bool {
		c := v.(*counters)
		s[k.(string)] = rebound.MethodStats{
			Calls:              c.calls.Load(),
			Retries:            c.retries.snapshot(),
			Hedges:             c.hedges.snapshot(),
			TransparentRetries: c.transparent.Load(),
			Throttled:          c.throttled.Load(),
			PushbackStops:      c.stops.Load(),
			Pushbacks:          c.pushbacks.Load(),
			RetryDelay:         time.Duration(c.delay.Load()),
		}
		return true
	})
	return s
}

// Observer returns ctx with a [rebound.Observer] that logs each decision of
// the call at debug level, when r has a logger that logs at that level;
// otherwise ctx unchanged.
func (r *Recorder) Observer(ctx context.Context, method, target string) context.Context {
	if r == nil || r.logger == nil || !r.logger.Enabled(ctx, slog.LevelDebug) {
		return ctx
	}
	return rebound.WithObserver(ctx, &logObserver{ctx: ctx, l: r.logger, method: method, target: target, next: rebound.ObserverFrom(ctx)})
}

// Log writes one debug record about a decision the front door made itself
// (such as a commit), when r logs at debug level.
func (r *Recorder) Log(ctx context.Context, msg, method, target string, attrs ...slog.Attr) {
	if r == nil || r.logger == nil || !r.logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	r.logger.LogAttrs(ctx, slog.LevelDebug, msg, append([]slog.Attr{slog.String("method", method), slog.String("target", target)}, attrs...)...)
}

// logObserver logs each decision, then tells the observer the caller had
// attached, if any.
type logObserver struct {
	ctx            context.Context
	l              *slog.Logger
	method, target string
	next           rebound.Observer
}

func (o *logObserver) log(msg string, attrs ...slog.Attr) {
	o.l.LogAttrs(o.ctx, slog.LevelDebug, msg, append([]slog.Attr{slog.String("method", o.method), slog.String("target", o.target)}, attrs...)...)
}

func (o *logObserver) Retrying(attempt int, err error, delay time.Duration) {
	attrs := []slog.Attr{slog.Int("attempt", attempt), slog.Duration("delay", delay), slog.String("error", err.Error())}
	if info := rebound.Classify(err); info.HasRetryAfter {
		o.log("rebound: retry scheduled, obeying server pushback", attrs...)
	} else {
		o.log("rebound: retry scheduled", attrs...)
	}
	if o.next != nil {
		o.next.Retrying(attempt, err, delay)
	}
}

func (o *logObserver) Hedging(attempt int) {
	o.log("rebound: hedge sent", slog.Int("attempt", attempt))
	if o.next != nil {
		o.next.Hedging(attempt)
	}
}

func (o *logObserver) Throttled(attempt int) {
	o.log("rebound: throttled, hedge not sent", slog.Int("attempt", attempt))
	if o.next != nil {
		o.next.Throttled(attempt)
	}
}

func (o *logObserver) GaveUp(attempts int, err, reason error) {
	attrs := []slog.Attr{slog.Int("attempts", attempts), slog.String("reason", reasonText(reason))}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	msg := "rebound: gave up"
	switch {
	case errors.Is(reason, rebound.ErrBudgetExhausted):
		msg = "rebound: throttled, gave up"
	case errors.Is(reason, rebound.ErrPushback):
		msg = "rebound: server pushback said stop, gave up"
	case errors.Is(reason, rebound.ErrCommitted):
		msg = "rebound: committed, gave up"
	}
	o.log(msg, attrs...)
	if o.next != nil {
		o.next.GaveUp(attempts, err, reason)
	}
}

func reasonText(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	const p = "rebound: "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// Tracker gathers what one call's attempts did, for [Recorder.End]. The
// zero value is ready; Start and Failed may be called from the goroutines
// of hedged attempts at once. Delay is measured only between sequential
// retries (a hedged call always has an attempt in flight, except while a
// pushback holds the next hedge back, which is not counted).
//
// A Tracker is also a [rebound.Observer] (see [Tracker.Observe]), so that it
// hears of a hedge the budget refused.
type Tracker struct {
	next         rebound.Observer // the observer the call had before Observe
	mu           sync.Mutex
	throttled    bool
	transparent  int
	attempts     int
	failed       int // failed attempts after the first
	pushbacks    int // attempts that followed a pushback
	delay        time.Duration
	lastFail     time.Time
	lastPushback bool // the last failure carried a pushback delay
}

// Start notes an attempt starting at now (a zero now skips the delay
// measurement).
func (t *Tracker) Start(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.attempts++
	if t.attempts > 1 && !t.lastFail.IsZero() && !now.IsZero() && now.After(t.lastFail) {
		t.delay += now.Sub(t.lastFail)
	}
	if t.lastPushback {
		t.pushbacks++
	}
	t.lastFail, t.lastPushback = time.Time{}, false
}

// Failed notes that attempt number attempt failed at now with the given
// classification.
func (t *Tracker) Failed(attempt int, info rebound.RetryInfo, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if attempt > 1 {
		t.failed++
	}
	t.lastPushback = info.HasRetryAfter
	t.lastFail = now
}

// Observe returns ctx with t as its [rebound.Observer]; t passes every
// event on to the observer ctx had.
func (t *Tracker) Observe(ctx context.Context) context.Context {
	t.next = rebound.ObserverFrom(ctx)
	return rebound.WithObserver(ctx, t)
}

// Retrying passes the event on.
func (t *Tracker) Retrying(attempt int, err error, delay time.Duration) {
	if t.next != nil {
		t.next.Retrying(attempt, err, delay)
	}
}

// Hedging passes the event on.
func (t *Tracker) Hedging(attempt int) {
	if t.next != nil {
		t.next.Hedging(attempt)
	}
}

// Throttled notes that the budget refused an attempt, and passes the event
// on.
func (t *Tracker) Throttled(attempt int) {
	t.mu.Lock()
	t.throttled = true
	t.mu.Unlock()
	if t.next != nil {
		t.next.Throttled(attempt)
	}
}

// GaveUp passes the event on.
func (t *Tracker) GaveUp(attempts int, err, reason error) {
	if t.next != nil {
		t.next.GaveUp(attempts, err, reason)
	}
}

// Transparent notes a transparent retry.
func (t *Tracker) Transparent() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.transparent++
}

// Attempts returns the number of attempts started.
func (t *Tracker) Attempts() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.attempts
}

// Call returns the summary for Recorder.End.
func (t *Tracker) Call(method, target string, hedged bool, reason error) Call {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Call{Method: method, Target: target, Attempts: t.attempts, Hedged: hedged, FailedLater: t.failed,
		Transparent: t.transparent, Delay: t.delay, Pushbacks: t.pushbacks, Throttled: t.throttled, Reason: reason}
}

// Reason returns why retrying stopped, from a loop's error: the
// rebound.Error's reason, or nil.
func Reason(err error) error {
	if err == nil {
		return nil
	}
	var re *rebound.Error
	if errors.As(err, &re) {
		return re.Reason
	}
	return nil
}
