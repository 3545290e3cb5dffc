// Package observe records what the front doors' retries did: A6 statistics
// for Stats snapshots, the gRFC A96 OpenTelemetry instruments and
// rebound's own, and debug logs of each decision.
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

// gRFC A96's instruments, which gRPC and Connect calls record.
const (
	RetriesName            = "grpc.client.call.retries"
	TransparentRetriesName = "grpc.client.call.transparent_retries"
	HedgesName             = "grpc.client.call.hedges"
	RetryDelayName         = "grpc.client.call.retry_delay"
)

// rebound's own instruments, in a namespace of its own (the OpenTelemetry
// naming guidance: no library's names in another's namespace, lowercase,
// dots and underscores, the unit apart, no _total). HTTP requests record
// A96's three in it, since neither A96 nor the OpenTelemetry HTTP
// conventions define them for HTTP; every protocol records the other
// three, which no standard defines.
const (
	HTTPRetriesName     = "rebound.client.call.retries"
	HTTPHedgesName      = "rebound.client.call.hedges"
	HTTPRetryDelayName  = "rebound.client.call.retry_delay"
	ThrottledName       = "rebound.client.call.retries_throttled"
	PushbackStoppedName = "rebound.client.call.retries_pushback_stopped"
	AttemptTimeoutsName = "rebound.client.call.attempt_timeouts"
)

// Attribute keys of A66, and the OpenTelemetry RPC conventions' name of
// the RPC system, which tells a gRPC call from a Connect one.
const (
	MethodKey     = attribute.Key("grpc.method")
	TargetKey     = attribute.Key("grpc.target")
	RPCSystemKey  = attribute.Key("rpc.system.name")
	RPCSystemGRPC = "grpc"
	RPCSystemConn = "connectrpc"
)

// Attribute keys of the OpenTelemetry HTTP semantic conventions.
const (
	HTTPMethodKey     = attribute.Key("http.request.method")
	ServerAddressKey  = attribute.Key("server.address")
	ServerPortKey     = attribute.Key("server.port")
	HTTPStatusCodeKey = attribute.Key("http.response.status_code")
)

// Protocol chooses the instruments and attributes a Recorder records.
type Protocol int

const (
	// GRPC records gRFC A96's instruments (transparent retries included)
	// and rebound's, with A66's attributes and rpc.system.name grpc.
	GRPC Protocol = iota
	// Connect records what GRPC records but transparent retries, which
	// connect-go does not make, with rpc.system.name connectrpc.
	Connect
	// HTTP records rebound's instruments with the HTTP semantic
	// conventions' attributes.
	HTTP
)

// Recommended bucket boundaries (A96 for counts, A66 latency for delays).
var (
	countBuckets       = []float64{1, 2, 3, 4, 5}
	transparentBuckets = []float64{1, 2, 3, 4, 5, 10}
	latencyBuckets     = []float64{0, 0.00001, 0.00005, 0.0001, 0.0003, 0.0006, 0.0008, 0.001, 0.002,
		0.003, 0.004, 0.005, 0.006, 0.008, 0.01, 0.013, 0.016, 0.02, 0.025, 0.03, 0.04, 0.05, 0.065,
		0.08, 0.1, 0.13, 0.16, 0.2, 0.25, 0.3, 0.4, 0.5, 0.65, 0.8, 1, 2, 5, 10, 20, 50, 100}
)

// Buckets are the lower bounds of A6's retry-attempt histogram: the k-th
// retry attempt of a call is counted in the last bucket whose bound is
// <= k, so the 1st retry lands in ">=1", the 7th in ">=5", the 42nd in
// ">=10".
var Buckets = [8]int{1, 2, 3, 4, 5, 10, 100, 1000}

// Bucket returns the index in [Buckets] of the k-th retry attempt (k >= 1;
// smaller k count as 1).
func Bucket(k int) int {
	for i := len(Buckets) - 1; i > 0; i-- {
		if k >= Buckets[i] {
			return i
		}
	}
	return 0
}

// Call is what a front door learned about one call, recorded at its end.
type Call struct {
	// Method names the call in Stats; for gRPC and Connect it is the
	// grpc.method attribute and Target grpc.target.
	Method, Target string
	// HTTP holds an HTTP request's attributes.
	HTTP HTTPAttributes
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
	// AttemptTimeouts counts the attempts cut by the per-attempt timeout.
	AttemptTimeouts int
	// Reason is why retrying stopped, nil after a success.
	Reason error
}

// HTTPAttributes are an HTTP request's metric attributes, named by the
// OpenTelemetry HTTP semantic conventions. The caller bounds their values:
// a method the conventions do not know is "_OTHER", and hosts beyond the
// caller's bound share the address "(other)" and no port.
type HTTPAttributes struct {
	Method        string // http.request.method
	ServerAddress string // server.address
	ServerPort    int    // server.port; 0 leaves it out
	StatusCode    int    // http.response.status_code of the response returned; 0 for none
}

// Recorder records calls. The zero value is not usable; a nil *Recorder
// records nothing. It is safe for concurrent use.
type Recorder struct {
	methods sync.Map // string -> *counters
	inst    *instruments
	logger  *slog.Logger
	proto   Protocol
}

type instruments struct {
	retries, transparent, hedges metric.Int64Histogram
	delay                        metric.Float64Histogram
	throttled, pushback          metric.Int64Counter
	timeouts                     metric.Int64Counter
}

// New returns a Recorder of proto's instruments. mp and logger may be nil;
// scope names the meter.
func New(mp metric.MeterProvider, logger *slog.Logger, scope string, proto Protocol) (*Recorder, error) {
	r := &Recorder{logger: logger, proto: proto}
	if mp == nil {
		return r, nil
	}
	m := mp.Meter(scope)
	var in instruments
	var errs [7]error
	names := [...]string{RetriesName, HedgesName, RetryDelayName}
	what := "client call"
	if proto == HTTP {
		names = [...]string{HTTPRetriesName, HTTPHedgesName, HTTPRetryDelayName}
		what = "client request"
	}
	in.retries, errs[0] = m.Int64Histogram(names[0], metric.WithUnit("{retry}"),
		metric.WithDescription("Number of retries during the "+what+". If there were no retries, 0 is not reported."),
		metric.WithExplicitBucketBoundaries(countBuckets...))
	in.hedges, errs[1] = m.Int64Histogram(names[1], metric.WithUnit("{hedge}"),
		metric.WithDescription("Number of hedges during the "+what+". If there were no hedges, 0 is not reported."),
		metric.WithExplicitBucketBoundaries(countBuckets...))
	in.delay, errs[2] = m.Float64Histogram(names[2], metric.WithUnit("s"),
		metric.WithDescription("Total time of delay while there is no active attempt during the "+what+"."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	in.throttled, errs[3] = m.Int64Counter(ThrottledName, metric.WithUnit("{retry}"),
		metric.WithDescription("Number of retries or hedges not made because retry throttling or the retry budget refused them."))
	in.pushback, errs[4] = m.Int64Counter(PushbackStoppedName, metric.WithUnit("{retry}"),
		metric.WithDescription("Number of retries or hedges not made because the server said not to retry."))
	in.timeouts, errs[5] = m.Int64Counter(AttemptTimeoutsName, metric.WithUnit("{attempt}"),
		metric.WithDescription("Number of attempts cut by the per-attempt timeout before their response started."))
	if proto == GRPC {
		in.transparent, errs[6] = m.Int64Histogram(TransparentRetriesName, metric.WithUnit("{transparent_retry}"),
			metric.WithDescription("Number of transparent retries during the client call. If there were no transparent retries, 0 is not reported."),
			metric.WithExplicitBucketBoundaries(transparentBuckets...))
	}
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("creating instruments: %w", err)
	}
	r.inst = &in
	return r, nil
}

// counters are one method's statistics.
type counters struct {
	calls, transparent, throttled, stops, pushbacks atomic.Uint64
	timeouts                                        atomic.Uint64
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
	if failed > 0 {
		a.failed.Add(uint64(failed))
	}
	for k := 1; k <= attempts; k++ {
		a.histogram[Bucket(k)].Add(1)
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

// Method is the handle of one method's statistics, from [Recorder.Method].
// The zero value, from a nil Recorder, records nothing.
type Method struct{ c *counters }

// Method returns the handle of method name's statistics, for a caller that
// keeps it so as not to look the method up on every call.
func (r *Recorder) Method(name string) Method {
	if r == nil {
		return Method{}
	}
	return Method{r.method(name)}
}

// Succeeded records a call of m that succeeded at its first attempt with
// nothing else to tell (no transparent retry, no tracker): what End
// records for it, which is nothing but the call.
func (m Method) Succeeded() {
	if m.c != nil {
		m.c.calls.Add(1)
	}
}

// End records a finished call.
func (r *Recorder) End(ctx context.Context, c *Call) {
	if r == nil {
		return
	}
	r.end(ctx, r.method(c.Method), c)
}

// EndOf is End for a call of the method of m, which it need not look up.
func (r *Recorder) EndOf(ctx context.Context, m Method, c *Call) {
	if r == nil || m.c == nil {
		return
	}
	r.end(ctx, m.c, c)
}

func (r *Recorder) end(ctx context.Context, m *counters, c *Call) {
	m.calls.Add(1)
	later := max(c.Attempts-1, 0)
	if c.Hedged {
		m.hedges.add(later, c.FailedLater)
	} else {
		m.retries.add(later, c.FailedLater)
	}
	throttled := c.Throttled || errors.Is(c.Reason, rebound.ErrThrottled)
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
	if c.AttemptTimeouts > 0 {
		m.timeouts.Add(uint64(c.AttemptTimeouts))
	}
	if r.inst == nil || (later == 0 && c.Transparent == 0 && c.Delay == 0 && !throttled && !stopped && c.AttemptTimeouts == 0) {
		return
	}
	attrs := r.attributes(c)
	switch {
	case later > 0 && c.Hedged:
		r.inst.hedges.Record(ctx, int64(later), attrs)
	case later > 0:
		r.inst.retries.Record(ctx, int64(later), attrs)
	}
	if c.Transparent > 0 && r.inst.transparent != nil {
		r.inst.transparent.Record(ctx, int64(c.Transparent), attrs)
	}
	r.inst.delay.Record(ctx, c.Delay.Seconds(), attrs)
	if throttled {
		r.inst.throttled.Add(ctx, 1, attrs)
	}
	if stopped {
		r.inst.pushback.Add(ctx, 1, attrs)
	}
	if c.AttemptTimeouts > 0 {
		r.inst.timeouts.Add(ctx, int64(c.AttemptTimeouts), attrs)
	}
}

// attributes returns the metric attributes of c.
func (r *Recorder) attributes(c *Call) metric.MeasurementOption {
	switch r.proto {
	case GRPC:
		return metric.WithAttributes(MethodKey.String(c.Method), TargetKey.String(c.Target), RPCSystemKey.String(RPCSystemGRPC))
	case Connect:
		return metric.WithAttributes(MethodKey.String(c.Method), TargetKey.String(c.Target), RPCSystemKey.String(RPCSystemConn))
	}
	kv := make([]attribute.KeyValue, 2, 4)
	kv[0], kv[1] = HTTPMethodKey.String(c.HTTP.Method), ServerAddressKey.String(c.HTTP.ServerAddress)
	if c.HTTP.ServerPort > 0 {
		kv = append(kv, ServerPortKey.Int(c.HTTP.ServerPort))
	}
	if c.HTTP.StatusCode > 0 {
		kv = append(kv, HTTPStatusCodeKey.Int(c.HTTP.StatusCode))
	}
	return metric.WithAttributes(kv...)
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
			AttemptTimeouts:    c.timeouts.Load(),
		}
		return true
	})
	return s
}

// Decisions is what one call's retry loop tells its decision log and its
// tracker, as rebound.Call hooks (see [Hooks]) or, for a loop of a front
// door's own, by calling its methods. The zero value tells nothing.
type Decisions struct {
	ctx            context.Context
	log            *slog.Logger // nil unless r logs at debug level
	method, target string
	// Tracker, when set, notes a hedge the budget refused.
	Tracker *Tracker
}

// Decisions returns the decisions of one call, logged when r logs at debug
// level.
func (r *Recorder) Decisions(ctx context.Context, method, target string) Decisions {
	var d Decisions
	d.Reset(r, ctx, method, target)
	return d
}

// Reset sets d to what r.Decisions returns, in place: a caller on a hot
// path keeps its Decisions where it is, since copying one is made of
// 16-byte moves that each stall on the 8-byte stores they read.
func (d *Decisions) Reset(r *Recorder, ctx context.Context, method, target string) {
	d.ctx, d.method, d.target, d.log, d.Tracker = ctx, method, target, nil, nil
	if r != nil && r.logger != nil && r.logger.Enabled(ctx, slog.LevelDebug) {
		d.log = r.logger
	}
}

// Active reports whether anything hears d.
func (d *Decisions) Active() bool { return d.log != nil || d.Tracker != nil }

// Hooks returns the rebound.Call that tells d, or a Call without hooks
// when nothing hears d: then it costs nothing.
func Hooks[T any](d *Decisions) rebound.Call[T] {
	if !d.Active() {
		return rebound.Call[T]{}
	}
	if d.log == nil {
		// Only the tracker listens, and it hears of refused hedges
		// alone: one hook costs one allocation, not four.
		return rebound.Call[T]{OnThrottled: d.Throttled}
	}
	return rebound.Call[T]{OnRetry: d.Retry, OnHedge: d.Hedge, OnThrottled: d.Throttled, OnGiveUp: d.GaveUp}
}

// Log writes one debug record about a decision the front door made itself
// (such as a commit), when r logs at debug level.
func (r *Recorder) Log(ctx context.Context, msg, method, target string, attrs ...slog.Attr) {
	if r == nil || r.logger == nil || !r.logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	r.logger.LogAttrs(ctx, slog.LevelDebug, msg, append([]slog.Attr{slog.String("method", method), slog.String("target", target)}, attrs...)...)
}

func (d *Decisions) logf(msg string, attrs ...slog.Attr) {
	if d.log != nil {
		d.log.LogAttrs(d.ctx, slog.LevelDebug, msg, append([]slog.Attr{slog.String("method", d.method), slog.String("target", d.target)}, attrs...)...)
	}
}

// Retry: attempt failed with err, and the next follows after delay.
func (d *Decisions) Retry(attempt int, err error, delay time.Duration) {
	if d.log == nil {
		return
	}
	attrs := []slog.Attr{slog.Int("attempt", attempt), slog.Duration("delay", delay), slog.String("error", err.Error())}
	switch info := rebound.Classify(err); {
	case errors.Is(err, rebound.ErrAttemptTimeout):
		d.logf("rebound: per-attempt timeout, retry scheduled", attrs...)
	case info.HasRetryAfter:
		d.logf("rebound: retry scheduled, obeying server pushback", attrs...)
	default:
		d.logf("rebound: retry scheduled", attrs...)
	}
}

// Hedge: hedged attempt number attempt is being sent.
func (d *Decisions) Hedge(attempt int) {
	d.logf("rebound: hedge sent", slog.Int("attempt", attempt))
}

// Throttled: the budget refused hedged attempt number attempt.
func (d *Decisions) Throttled(attempt int) {
	if d.Tracker != nil {
		d.Tracker.Throttled()
	}
	d.logf("rebound: throttled, hedge not sent", slog.Int("attempt", attempt))
}

// GaveUp: no further attempt follows attempts attempts; err is the last
// one's error and reason why retrying stopped.
func (d *Decisions) GaveUp(attempts int, err, reason error) {
	if d.log == nil {
		return
	}
	attrs := []slog.Attr{slog.Int("attempts", attempts), slog.String("reason", reasonText(reason))}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
		if errors.Is(err, rebound.ErrAttemptTimeout) {
			attrs = append(attrs, slog.Bool("attempt_timeout", true))
		}
	}
	msg := "rebound: gave up"
	switch {
	case errors.Is(reason, rebound.ErrThrottled):
		msg = "rebound: throttled, gave up"
	case errors.Is(reason, rebound.ErrPushback):
		msg = "rebound: server pushback said stop, gave up"
	case errors.Is(reason, rebound.ErrCommitted):
		msg = "rebound: committed, gave up"
	}
	d.logf(msg, attrs...)
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
type Tracker struct {
	mu sync.Mutex
	t  Tally
}

// Start notes an attempt starting at now (a zero now skips the delay
// measurement).
func (t *Tracker) Start(now time.Time) {
	t.mu.Lock()
	t.t.Start(now)
	t.mu.Unlock()
}

// Failed notes that attempt number attempt failed at now with the given
// classification.
func (t *Tracker) Failed(attempt int, info rebound.RetryInfo, now time.Time) {
	t.mu.Lock()
	t.t.Failed(attempt, info.HasRetryAfter, now)
	t.mu.Unlock()
}

// TimedOut notes an attempt cut by the per-attempt timeout.
func (t *Tracker) TimedOut() {
	t.mu.Lock()
	t.t.TimedOut()
	t.mu.Unlock()
}

// Throttled notes that the budget refused a hedge.
func (t *Tracker) Throttled() {
	t.mu.Lock()
	t.t.Throttled()
	t.mu.Unlock()
}

// Transparent notes a transparent retry.
func (t *Tracker) Transparent() {
	t.mu.Lock()
	t.t.Transparent()
	t.mu.Unlock()
}

// Attempts returns the number of attempts started.
func (t *Tracker) Attempts() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.t.attempts
}

// Call returns the summary for Recorder.End.
func (t *Tracker) Call(method, target string, hedged bool, reason error) Call {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.t.Call(method, target, hedged, reason)
}

// Tally is a [Tracker] without the lock, for a call whose attempts follow
// one another and that nothing reports into from another goroutine, such
// as a retried unary call without metrics: uncontended, the lock still
// cost a tenth of such a call's retry. The zero value is ready. A Tally is
// not safe for concurrent use.
type Tally struct {
	throttled    bool
	transparent  int
	attempts     int
	failed       int // failed attempts after the first
	pushbacks    int // attempts that followed a pushback
	delay        time.Duration
	lastFail     time.Time
	lastPushback bool // the last failure carried a pushback delay
	timeouts     int  // attempts cut by the per-attempt timeout
}

// Start is [Tracker.Start].
func (t *Tally) Start(now time.Time) {
	t.attempts++
	if t.attempts > 1 && !t.lastFail.IsZero() && !now.IsZero() && now.After(t.lastFail) {
		t.delay += now.Sub(t.lastFail)
	}
	if t.lastPushback {
		t.pushbacks++
	}
	t.lastFail, t.lastPushback = time.Time{}, false
}

// Failed is [Tracker.Failed], told only whether the failure carried a
// pushback delay (RetryInfo.HasRetryAfter): a RetryInfo is large, and
// each copy of one costs.
func (t *Tally) Failed(attempt int, pushback bool, now time.Time) {
	if attempt > 1 {
		t.failed++
	}
	t.lastPushback = pushback
	t.lastFail = now
}

// TimedOut is [Tracker.TimedOut].
func (t *Tally) TimedOut() { t.timeouts++ }

// Throttled is [Tracker.Throttled].
func (t *Tally) Throttled() { t.throttled = true }

// Transparent is [Tracker.Transparent].
func (t *Tally) Transparent() { t.transparent++ }

// Call is [Tracker.Call].
func (t *Tally) Call(method, target string, hedged bool, reason error) Call {
	return Call{Method: method, Target: target, Attempts: t.attempts, Hedged: hedged, FailedLater: t.failed,
		Transparent: t.transparent, Delay: t.delay, Pushbacks: t.pushbacks, Throttled: t.throttled, AttemptTimeouts: t.timeouts, Reason: reason}
}

// Reason returns why retrying stopped, from a loop's error: the
// rebound.Error's reason, or nil.
func Reason(err error) error {
	if err == nil {
		return nil
	}
	// The loop's own error first, as errors.As would find it, but
	// without the allocation that errors.As makes of its target.
	if re, ok := err.(*rebound.Error); ok {
		return re.Reason
	}
	var re *rebound.Error
	if errors.As(err, &re) {
		return re.Reason
	}
	return nil
}
