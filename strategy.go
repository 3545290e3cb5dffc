package rebound

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Strategy decides whether and when a failed request is tried again (Smithy
// RetryStrategy). It keeps no per-request state: that lives in each [Token]
// it hands out. Implementations must be safe for concurrent use.
type Strategy interface {
	// AcquireInitialToken is called before the first attempt. If it fails,
	// the request is attempted once without retries.
	AcquireInitialToken(ctx context.Context) (Token, error)
	// RefreshToken is called after a failed attempt with that attempt's
	// token and error. It returns the token for the next attempt, or an
	// error saying why there is none. A token not issued by this strategy,
	// or already refreshed or recorded, gives an error.
	RefreshToken(ctx context.Context, t Token, err error) (Token, error)
	// RecordSuccess is called after a successful attempt with its token.
	// The same token rules apply as for RefreshToken.
	RecordSuccess(t Token) error
}

// Token is the state of one request between attempts (Smithy RetryToken).
type Token interface {
	// Delay is how long to wait before the attempt this token admits.
	Delay() time.Duration
	// Attempt is the 1-based number of the attempt this token admits.
	Attempt() int
}

// Option configures a strategy or a [Hedger].
type Option interface{ apply(*settings) }

type optionFunc func(*settings)

func (f optionFunc) apply(s *settings) { f(s) }

type settings struct {
	maxAttempts int
	backoff     Backoff
	budget      Budget
	classify    Classifier
	// classifyDefault says classify is Classify, given by no option:
	// judge then walks an error once for its rejection and its class.
	classifyDefault bool
	clock           Clock
	random          Random
	// callBudget is budget when it counts calls ([CallBudget]), for [Do].
	callBudget CallBudget
}

// WithMaxAttempts sets the maximum number of attempts, the first included.
// It must be >= 1.
func WithMaxAttempts(n int) Option { return optionFunc(func(s *settings) { s.maxAttempts = n }) }

// WithBackoff sets the backoff between retries.
func WithBackoff(b Backoff) Option { return optionFunc(func(s *settings) { s.backoff = b }) }

// WithBudget sets the budget shared by every request of the strategy; nil
// means no budget.
func WithBudget(b Budget) Option { return optionFunc(func(s *settings) { s.budget = b }) }

// WithClassifier sets how attempt errors are classified; the default is
// [Classify].
func WithClassifier(f Classifier) Option { return optionFunc(func(s *settings) { s.classify = f }) }

// WithClock sets the clock used for delays and deadlines.
func WithClock(c Clock) Option { return optionFunc(func(s *settings) { s.clock = c }) }

// WithRandom sets the source of jitter.
func WithRandom(r Random) Option { return optionFunc(func(s *settings) { s.random = r }) }

func (s *settings) build(opts []Option) error {
	for _, o := range opts {
		if o == nil {
			return errors.New("rebound: nil Option")
		}
		o.apply(s)
	}
	if s.maxAttempts < 1 {
		return fmt.Errorf("rebound: max attempts must be >= 1, got %d", s.maxAttempts)
	}
	if err := s.backoff.Validate(); err != nil {
		return err
	}
	if s.classify == nil {
		s.classify, s.classifyDefault = Classify, true
	}
	if s.clock == nil {
		s.clock = realClock{}
	}
	if s.random == nil {
		s.random = globalRandom{}
	}
	s.callBudget, _ = s.budget.(CallBudget)
	return nil
}

// judge reports whether err is an attempt rejected locally
// ([ErrRejectedLocally]), and otherwise classifies it into *info (a
// RetryInfo is large: each copy of one costs).
func (s *settings) judge(err error, info *RetryInfo) (rejected bool) {
	if !s.classifyDefault || err == nil {
		if errors.Is(err, ErrRejectedLocally) {
			return true
		}
		*info = s.classify(err)
		return false
	}
	rejected, ctxErr := errKinds(err)
	if !rejected {
		*info = classifyWalked(err, ctxErr)
	}
	return rejected
}

// token is the Token of both built-in strategies.
type token struct {
	owner   any
	attempt int32         // the attempt this token admits, from 1
	retry   int32         // retries since the last pushback, for the exponent
	delay   time.Duration // wait before the attempt
	// classes counts the failures of the call with a Class, for their
	// own attempt limits; nil while there are none. Tokens share it; it
	// is never modified. (A pointer, not a slice: a token fits in 48
	// bytes.)
	classes *[]classCount
	// paid says the budget's Allow admitted this attempt, timeout that it
	// retries a timeout: its success may get the cost back, and its end
	// frees a concurrency budget's slot.
	paid, timeout bool
	used          atomic.Bool
}

func (t *token) Delay() time.Duration { return t.delay }
func (t *token) Attempt() int         { return int(t.attempt) }

// claim checks that t was issued by owner and marks it used.
func claim(owner any, t Token) (*token, error) {
	tk, ok := t.(*token)
	if !ok || tk == nil || tk.owner != owner || !tk.used.CompareAndSwap(false, true) {
		return nil, errInvalidToken
	}
	return tk, nil
}

// beyondDeadline reports whether waiting d from now would reach ctx's
// deadline.
func beyondDeadline(ctx context.Context, c Clock, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return ok && !c.Now().Add(d).Before(dl)
}

// Standard is the Smithy/AWS "standard" retry strategy: up to 5 attempts,
// exponential backoff with full jitter capped at 20s, a server retry-after
// hint used as a minimum delay, and a [TokenBucket] that every retry pays
// into (timeouts pay double). Make one with [NewStandard]; the zero value
// is not usable. A Standard is safe for concurrent use; share one per
// client so that its bucket sees all traffic.
type Standard struct {
	s settings
}

// NewStandard returns the standard strategy. Without options it uses 5
// attempts, [DefaultBackoff] and its own [TokenBucket] with
// [DefaultTokenBucket].
func NewStandard(opts ...Option) (*Standard, error) {
	bucket, _ := NewTokenBucket(DefaultTokenBucket())
	st := &Standard{s: settings{maxAttempts: 5, backoff: DefaultBackoff(), budget: bucket}}
	if err := st.s.build(opts); err != nil {
		return nil, err
	}
	return st, nil
}

// AcquireInitialToken returns a token for the first attempt, with no delay.
// It never fails: the first attempt is always made.
func (st *Standard) AcquireInitialToken(context.Context) (Token, error) {
	return &token{owner: st, attempt: 1}, nil
}

// RefreshToken admits a retry when attempts remain, the error is retryable
// (its RetryInfo safety is not "no", or it has none but is the server's
// fault), and the budget pays for it. A retryable failure or a pushback
// "stop" is recorded with the budget first, so an A6 [Throttle] works here
// as it does under [Retrier].
func (st *Standard) RefreshToken(ctx context.Context, t Token, err error) (Token, error) {
	tk, cerr := claim(st, t)
	if cerr != nil {
		return nil, cerr
	}
	next := &token{owner: st, attempt: tk.attempt, classes: tk.classes}
	if err := st.advance(ctx, next, err); err != nil {
		return nil, err
	}
	return next, nil
}

// advance is RefreshToken after the token is claimed: it makes *tk the
// next token in place, or leaves it be and returns why not. [DoValue]
// keeps a built-in strategy's token on its stack this way.
func (st *Standard) advance(ctx context.Context, tk *token, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	var info RetryInfo
	if st.s.judge(err, &info) {
		// The attempt never left: there is nothing to retry, and the
		// throttle has already counted it.
		return ErrThrottled
	}
	if (info.Safety != SafetyNo || info.ServerStop) && st.s.budget != nil && !info.Local {
		st.s.budget.RecordFailure()
	}
	classes, classDone := classLimited(tk.classes, info)
	switch {
	case info.ServerStop:
		return ErrPushback
	case info.Committed:
		return ErrCommitted
	case info.Safety == SafetyNo:
		return ErrNotRetryable
	case info.Stop != nil:
		return info.Stop
	case int(tk.attempt) >= st.s.maxAttempts, classDone:
		return ErrAttemptsExhausted
	}
	// A retry-after hint is a floor under the backoff; a server's
	// MinDelay too, unless a retry-after hint came with it.
	floor := info.MinDelay
	if info.HasRetryAfter {
		floor = info.RetryAfter
	}
	delay := max(backoffFor(st.s.backoff, info).Delay(int(tk.attempt), st.s.random.Float64()), floor)
	if beyondDeadline(ctx, st.s.clock, delay) {
		return ErrDeadline
	}
	paid := false
	if st.s.budget != nil && !info.Local {
		if !st.s.budget.Allow(info.Timeout) {
			return ErrThrottled
		}
		paid = true
	}
	tk.attempt, tk.delay, tk.classes = tk.attempt+1, delay, classes
	tk.paid, tk.timeout = paid, paid && info.Timeout
	return nil
}

// RecordSuccess refills the budget: a retry's success through
// RecordRetrySuccess when the budget has it (see
// [TokenBucketConfig.RefundRetryCost]).
func (st *Standard) RecordSuccess(t Token) error {
	tk, err := claim(st, t)
	if err != nil {
		return err
	}
	recordSuccess(st.s.budget, tk)
	return nil
}

// retrySuccessRecorder is implemented by budgets that refill differently
// after a retry's success than after a first attempt's ([TokenBucket]).
type retrySuccessRecorder interface{ RecordRetrySuccess(timeout bool) }

// recordSuccess credits b with the success of tk's attempt.
func recordSuccess(b Budget, tk *token) {
	if b == nil {
		return
	}
	if r, ok := b.(retrySuccessRecorder); ok && tk.paid {
		r.RecordRetrySuccess(tk.timeout)
		return
	}
	b.RecordSuccess()
}

// Clock returns the strategy's clock; [Do] waits on it.
func (st *Standard) Clock() Clock { return st.s.clock }

// Budget returns the budget of the strategy, nil for none. [Do] counts
// calls for it through this method (see [CallBudget]).
func (st *Standard) Budget() Budget { return st.s.budget }

func (st *Standard) firstToken() Token { return &token{owner: st, attempt: 1} }

func (st *Standard) recordFirstSuccess() {
	if st.s.budget != nil {
		st.s.budget.RecordSuccess()
	}
}

// RetryPolicy is A6's retryPolicy. The zero value is not valid:
// [NewRetrier] needs MaxAttempts and a valid Backoff.
type RetryPolicy struct {
	// MaxAttempts counts every attempt, the first included. Must be >= 1.
	MaxAttempts int
	// Backoff sets the delays between attempts.
	Backoff Backoff
}

// Retrier is a [Strategy] with the semantics of A6's retryPolicy: an attempt
// is retried only when the classifier says [SafetyYes] (a retryable status
// code), after random(0, min(initial*multiplier^(n-1), max)); a server
// pushback (RetryInfo.HasRetryAfter) sets exactly the delay and resets the
// exponent; a pushback "stop" (RetryInfo.ServerStop) ends the call. With a
// [Throttle] budget every retryable failure and every pushback "stop" takes
// a token, and retries are made only while the throttle allows. Make one
// with [NewRetrier]; the zero value is not usable. A Retrier is safe for
// concurrent use.
type Retrier struct {
	s settings
}

// NewRetrier returns the A6 retry strategy for p; options may add a budget, a
// classifier, a clock and a random source, or override p's fields.
func NewRetrier(p RetryPolicy, opts ...Option) (*Retrier, error) {
	pol := &Retrier{s: settings{maxAttempts: p.MaxAttempts, backoff: p.Backoff}}
	if err := pol.s.build(opts); err != nil {
		return nil, err
	}
	return pol, nil
}

// AcquireInitialToken returns a token for the first attempt, with no delay.
func (p *Retrier) AcquireInitialToken(context.Context) (Token, error) {
	return &token{owner: p, attempt: 1}, nil
}

// RefreshToken applies A6: count the failure against the budget when it
// qualifies, then stop on pushback "stop", a committed call, a
// non-retryable error, exhausted
// attempts, a refusing budget or a delay past the deadline; otherwise admit
// the next attempt.
func (p *Retrier) RefreshToken(ctx context.Context, t Token, err error) (Token, error) {
	tk, cerr := claim(p, t)
	if cerr != nil {
		return nil, cerr
	}
	next := &token{owner: p, attempt: tk.attempt, retry: tk.retry, classes: tk.classes}
	if err := p.advance(ctx, next, err); err != nil {
		return nil, err
	}
	return next, nil
}

// advance is RefreshToken after the token is claimed, in place (see
// [Standard.advance]).
func (p *Retrier) advance(ctx context.Context, tk *token, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	var info RetryInfo
	if p.s.judge(err, &info) {
		return ErrThrottled
	}
	qualifies := info.Safety == SafetyYes || info.ServerStop
	if qualifies && p.s.budget != nil && !info.Local {
		p.s.budget.RecordFailure()
	}
	classes, classDone := classLimited(tk.classes, info)
	switch {
	case info.ServerStop:
		return ErrPushback
	case info.Committed:
		return ErrCommitted
	case info.Safety != SafetyYes:
		return ErrNotRetryable
	case info.Stop != nil:
		return info.Stop
	case int(tk.attempt) >= p.s.maxAttempts, classDone:
		return ErrAttemptsExhausted
	}
	var (
		retry int32 // a pushback resets the exponent
		delay time.Duration
	)
	if info.HasRetryAfter {
		delay = info.RetryAfter
	} else {
		// A server's RetryInfo is a floor under the backoff, and leaves
		// the exponent alone: unlike pushback, it is advice.
		retry = tk.retry + 1
		delay = max(backoffFor(p.s.backoff, info).Delay(int(retry), p.s.random.Float64()), info.MinDelay)
	}
	if beyondDeadline(ctx, p.s.clock, delay) {
		return ErrDeadline
	}
	paid := false
	if p.s.budget != nil && !info.Local {
		if !p.s.budget.Allow(info.Timeout) {
			return ErrThrottled
		}
		paid = true
	}
	tk.attempt, tk.retry, tk.delay, tk.classes = tk.attempt+1, retry, delay, classes
	tk.paid, tk.timeout = paid, paid && info.Timeout
	return nil
}

// RecordSuccess credits the budget, as [Standard.RecordSuccess] does.
func (p *Retrier) RecordSuccess(t Token) error {
	tk, err := claim(p, t)
	if err != nil {
		return err
	}
	recordSuccess(p.s.budget, tk)
	return nil
}

// Clock returns the policy's clock; [Do] waits on it.
func (p *Retrier) Clock() Clock { return p.s.clock }

// Budget returns the budget of the strategy, nil for none. [Do] counts
// calls for it through this method (see [CallBudget]).
func (p *Retrier) Budget() Budget { return p.s.budget }

func (p *Retrier) firstToken() Token { return &token{owner: p, attempt: 1} }

func (p *Retrier) recordFirstSuccess() {
	if p.s.budget != nil {
		p.s.budget.RecordSuccess()
	}
}
