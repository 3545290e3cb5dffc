package rebound

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
)

// Budget limits retries and hedges across many requests, so that a failing
// service is not buried under them. Implementations must be safe for
// concurrent use. [Throttle] (A6 retryThrottling) and [TokenBucket] (the
// Smithy standard bucket) implement it.
type Budget interface {
	// RecordFailure notes an attempt that failed in a way that qualifies
	// for a retry (or a hedge's non-fatal failure, or a pushback "stop").
	RecordFailure()
	// Allow asks to make a retry or send a hedge, and reports whether it
	// may. It may take a cost; timeout says the failure being retried was a
	// timeout.
	Allow(timeout bool) bool
	// RecordSuccess notes a successful call.
	RecordSuccess()
}

// milli is the fixed-point scale of Throttle: thousandths of a token, the
// precision A6 gives tokenRatio.
const milli = 1000

// ThrottleConfig is A6's retryThrottling. The zero value is not valid:
// [NewThrottle] needs MaxTokens and TokenRatio.
type ThrottleConfig struct {
	// MaxTokens is where token_count starts and its cap, in (0, 1000].
	MaxTokens int
	// TokenRatio is added to token_count per success. Decimal places
	// beyond the third are ignored (0.5466 counts as 0.546), as A6 says, so
	// a ratio below 0.001 adds nothing: successes then never refill the
	// throttle. A ratio above MaxTokens refills it completely, as MaxTokens
	// would. It must not be negative or NaN.
	TokenRatio float64
}

// Throttle is A6 retry throttling: token_count starts at MaxTokens, each
// qualifying failure takes 1, each success adds TokenRatio, and retries and
// hedges are allowed only while token_count > MaxTokens/2. Arithmetic is
// exact, in thousandths of a token. A Throttle is safe for concurrent use and
// takes no lock; share one per server name. Use [NewThrottle]; the zero
// value allows nothing.
type Throttle struct {
	tokens    atomic.Int64 // milli-tokens
	max       int64
	threshold int64
	ratio     int64
}

// NewThrottle returns a full Throttle, or an error naming the bad field.
// Every config that package serviceconfig parses makes a Throttle.
func NewThrottle(c ThrottleConfig) (*Throttle, error) {
	if c.MaxTokens <= 0 || c.MaxTokens > 1000 {
		return nil, fmt.Errorf("rebound: ThrottleConfig.MaxTokens must be in (0, 1000], got %d", c.MaxTokens)
	}
	if !(c.TokenRatio >= 0) {
		return nil, fmt.Errorf("rebound: ThrottleConfig.TokenRatio must be >= 0, got %v", c.TokenRatio)
	}
	t := &Throttle{
		max:       int64(c.MaxTokens) * milli,
		threshold: int64(c.MaxTokens) * milli / 2,
	}
	t.ratio = t.max
	if c.TokenRatio < float64(c.MaxTokens) {
		t.ratio = truncMilli(c.TokenRatio)
	}
	t.tokens.Store(t.max)
	return t, nil
}

// truncMilli returns r, in [0, 1000), in thousandths, truncating further
// decimals of its shortest decimal form (so 0.29 is 290, not 289 from
// float error).
func truncMilli(r float64) int64 {
	s := strconv.FormatFloat(r, 'f', -1, 64)
	whole, frac, _ := strings.Cut(s, ".")
	frac = (frac + "000")[:3]
	w, _ := strconv.ParseInt(whole, 10, 64)
	f, _ := strconv.ParseInt(frac, 10, 64)
	return w*milli + f
}

// RecordFailure takes one token, not going below 0.
func (t *Throttle) RecordFailure() {
	for {
		v := t.tokens.Load()
		n := max(v-milli, 0)
		if v == n || t.tokens.CompareAndSwap(v, n) {
			return
		}
	}
}

// RecordSuccess adds TokenRatio, not going above MaxTokens.
func (t *Throttle) RecordSuccess() {
	for {
		v := t.tokens.Load()
		n := min(v+t.ratio, t.max)
		if v == n || t.tokens.CompareAndSwap(v, n) {
			return
		}
	}
}

// Allow reports whether token_count is above MaxTokens/2. It takes nothing.
func (t *Throttle) Allow(timeout bool) bool { return t.tokens.Load() > t.threshold }

// Tokens returns token_count in thousandths of a token.
func (t *Throttle) Tokens() int64 { return t.tokens.Load() }

// String returns token_count and the threshold, e.g. "7.5/10 (threshold 5)".
func (t *Throttle) String() string {
	return fmt.Sprintf("%s/%s (threshold %s)", fmtMilli(t.tokens.Load()), fmtMilli(t.max), fmtMilli(t.threshold))
}

func fmtMilli(v int64) string {
	return strconv.FormatFloat(float64(v)/milli, 'f', -1, 64)
}

// TokenBucketConfig sets the Smithy/AWS standard retry bucket. The zero
// value is not valid; start from [DefaultTokenBucket].
type TokenBucketConfig struct {
	// Capacity is where the bucket starts and its cap. Must be > 0.
	Capacity int
	// RetryCost is taken per retry or hedge. Must be > 0.
	RetryCost int
	// TimeoutCost is taken per retry of a timeout. Must be > 0.
	TimeoutCost int
	// SuccessRefund is added per success, up to Capacity. Must be >= 0.
	SuccessRefund int
	// RefundRetryCost gives a retry or hedge that succeeds the cost it
	// paid (RetryCost, or TimeoutCost), instead of SuccessRefund, as the
	// AWS SDKs do: without it a client whose retries mostly succeed still
	// drains the bucket by RetryCost−SuccessRefund per retry, and callers
	// see "retry quota exceeded" while the service is healthy again. A
	// first attempt's success still adds SuccessRefund. Off by default,
	// as in the Smithy text.
	RefundRetryCost bool
}

// DefaultTokenBucket returns the Smithy example bucket: 500 tokens, a retry
// costs 5, a retry after a timeout 10, a success gives back 1.
func DefaultTokenBucket() TokenBucketConfig {
	return TokenBucketConfig{Capacity: 500, RetryCost: 5, TimeoutCost: 10, SuccessRefund: 1}
}

// TokenBucket is the Smithy/AWS "standard" retry budget: a retry is made only
// if its cost can be taken from the bucket; successes refill it. It is safe
// for concurrent use and takes no lock. Use [NewTokenBucket]; the zero value
// allows nothing.
type TokenBucket struct {
	tokens                         atomic.Int64
	capacity, retry, timeout, gain int64
	refundCost                     bool
}

// NewTokenBucket returns a full bucket, or an error naming the bad field.
func NewTokenBucket(c TokenBucketConfig) (*TokenBucket, error) {
	switch {
	case c.Capacity <= 0:
		return nil, fmt.Errorf("rebound: TokenBucketConfig.Capacity must be > 0, got %d", c.Capacity)
	case c.RetryCost <= 0:
		return nil, fmt.Errorf("rebound: TokenBucketConfig.RetryCost must be > 0, got %d", c.RetryCost)
	case c.TimeoutCost <= 0:
		return nil, fmt.Errorf("rebound: TokenBucketConfig.TimeoutCost must be > 0, got %d", c.TimeoutCost)
	case c.SuccessRefund < 0:
		return nil, fmt.Errorf("rebound: TokenBucketConfig.SuccessRefund must be >= 0, got %d", c.SuccessRefund)
	}
	b := &TokenBucket{capacity: int64(c.Capacity), retry: int64(c.RetryCost), timeout: int64(c.TimeoutCost),
		gain: int64(c.SuccessRefund), refundCost: c.RefundRetryCost}
	b.tokens.Store(b.capacity)
	return b, nil
}

// RecordFailure does nothing: the bucket charges retries, not failures.
func (b *TokenBucket) RecordFailure() {}

// Allow takes the retry cost (the timeout cost when timeout is set) and
// reports whether the bucket held enough.
func (b *TokenBucket) Allow(timeout bool) bool {
	cost := b.retry
	if timeout {
		cost = b.timeout
	}
	for {
		v := b.tokens.Load()
		if v < cost {
			return false
		}
		if b.tokens.CompareAndSwap(v, v-cost) {
			return true
		}
	}
}

// RecordSuccess gives back SuccessRefund, up to Capacity.
func (b *TokenBucket) RecordSuccess() { b.add(b.gain) }

// RecordRetrySuccess notes the success of a retry or hedge that Allow
// admitted: with RefundRetryCost it gives back that cost (TimeoutCost when
// timeout is set, else RetryCost), otherwise SuccessRefund; never above
// Capacity. The built-in strategies call it in place of RecordSuccess.
func (b *TokenBucket) RecordRetrySuccess(timeout bool) {
	switch {
	case !b.refundCost:
		b.add(b.gain)
	case timeout:
		b.add(b.timeout)
	default:
		b.add(b.retry)
	}
}

// unallow gives back what Allow(timeout) took, for a combination of
// budgets another member of which refused.
func (b *TokenBucket) unallow(timeout bool) {
	if timeout {
		b.add(b.timeout)
	} else {
		b.add(b.retry)
	}
}

func (b *TokenBucket) add(d int64) {
	for {
		v := b.tokens.Load()
		n := min(v+d, b.capacity)
		if v == n || b.tokens.CompareAndSwap(v, n) {
			return
		}
	}
}

// Tokens returns the tokens in the bucket.
func (b *TokenBucket) Tokens() int64 { return b.tokens.Load() }
