// Package a6 holds what the gRPC and Connect front doors share of gRFC A6:
// the pushback header, the backoff of a retryPolicy, attempt classification
// and the process-wide throttles, one per server name.
package a6

import (
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/bounded"
	"github.com/rebound-go/rebound/serviceconfig"
)

// PushbackHeader is the trailer a server sets to push back on retries.
const PushbackHeader = "grpc-retry-pushback-ms"

// PreviousAttemptsHeader tells the server how many attempts preceded this
// one.
const PreviousAttemptsHeader = "grpc-previous-rpc-attempts"

// ParsePushback reads the values of the pushback header. present is false
// when there are none. Otherwise stop is true when the server said not to
// retry: a negative value, one that is not an ASCII signed 32-bit integer
// without unnecessary leading zeros, or more than one value; else d is the
// delay.
func ParsePushback(values []string) (d time.Duration, stop, present bool) {
	switch len(values) {
	case 0:
		return 0, false, false
	case 1:
	default:
		return 0, true, true
	}
	ms, ok := parseInt32(values[0])
	if !ok || ms < 0 {
		return 0, true, true
	}
	return time.Duration(ms) * time.Millisecond, false, true
}

// parseInt32 accepts -?(0|[1-9][0-9]*) within int32 range; "-0" is refused
// as an unnecessary sign.
func parseInt32(s string) (int64, bool) {
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	if len(s) == 0 || len(s) > 10 || (s[0] == '0' && (len(s) > 1 || neg)) {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	if n > 1<<31-1 || n < -1<<31 {
		return 0, false
	}
	return n, true
}

// Backoff converts a parsed retryPolicy's backoff. maxBackoff caps every
// delay, the first included, even below initialBackoff (A6 "Exponential
// Backoff": random(0, min(initialBackoff*multiplier^(n-1), maxBackoff))).
func Backoff(p *serviceconfig.RetryPolicy) rebound.Backoff {
	return rebound.Backoff{Initial: p.InitialBackoff, Max: p.MaxBackoff, Multiplier: p.BackoffMultiplier}
}

// Info classifies a failed attempt: retryable says its code is in the
// policy's retryable (or non-fatal) set; pushback holds the values of the
// pushback header; committed says the response had started.
func Info(retryable bool, pushback []string, committed bool) rebound.RetryInfo {
	info := rebound.RetryInfo{Committed: committed}
	if retryable {
		info.Safety = rebound.SafetyYes
	}
	d, stop, ok := ParsePushback(pushback)
	switch {
	case !ok:
	case stop:
		info.ServerStop = true
	default:
		info.HasRetryAfter, info.RetryAfter = true, d
	}
	return info
}

type throttleKey struct {
	server    string
	maxTokens int
	ratio     float64
}

// throttles holds the throttles in use, weakly (see bounded.Shared), so
// that a process that talks to ever new server names does not keep a
// throttle for each forever.
var throttles bounded.Shared[throttleKey, rebound.Throttle]

// Throttle returns the process-wide throttle of a server name, made on first
// use: A6 throttles per server name, so every client of the process that
// targets the same name shares it, for as long as any client holds it.
// Configs that differ get their own. A nil
// t returns nil (no throttling). Every config that serviceconfig.Parse
// accepts makes a throttle (a tokenRatio that truncates to 0.000 never
// refills it; one above maxTokens refills it at once); only a t built by
// hand with maxTokens outside (0, 1000] gives an error.
func Throttle(server string, t *serviceconfig.RetryThrottling) (*rebound.Throttle, error) {
	if t == nil {
		return nil, nil
	}
	return throttles.Get(throttleKey{server, t.MaxTokens, t.TokenRatio}, func() (*rebound.Throttle, error) {
		return rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: t.MaxTokens, TokenRatio: t.TokenRatio})
	})
}

// CountUnpoliced counts a call that no retry or hedging policy governed
// against the throttle of its server name, which A6 has every outgoing RPC
// affect, whatever its method: a success adds tokenRatio, and a failure
// takes a token only when server pushback said not to retry, since without
// a policy no status code is retryable or non-fatal. pushback holds the
// values of the call's pushback header. A nil th counts nothing.
func CountUnpoliced(th *rebound.Throttle, ok bool, pushback []string) {
	switch {
	case th == nil:
	case ok:
		th.RecordSuccess()
	default:
		if _, stop, _ := ParsePushback(pushback); stop {
			th.RecordFailure()
		}
	}
}

// Settings are a front door's client-side settings for building strategies.
type Settings struct {
	MaxAttempts int            // the client-side cap (A6 "Limits"); <= 0 means 5
	Clock       rebound.Clock  // nil: the real clock
	Random      rebound.Random // nil: the default source
	Budget      rebound.Budget // WithBudget's, beside the throttle; nil for none
}

// Budget returns what the strategies of a target spend: its throttle and
// the client's budget, both of which must allow; nil for neither.
func Budget(throttle *rebound.Throttle, s Settings) rebound.Budget {
	switch {
	case throttle == nil:
		return s.Budget
	case s.Budget == nil:
		return throttle
	}
	return rebound.AllBudgets(throttle, s.Budget)
}

// Strategies builds the strategy of a method config: a rebound.Retrier for a
// retryPolicy or a rebound.Hedger for a hedgingPolicy (both nil for
// neither), with throttle as budget when not nil. Errors are possible only
// for configs built by hand.
func Strategies(mc *serviceconfig.MethodConfig, throttle *rebound.Throttle, s Settings) (*rebound.Retrier, *rebound.Hedger, error) {
	var opts []rebound.Option // and the default classifier, rebound.Classify
	if b := Budget(throttle, s); b != nil {
		opts = append(opts, rebound.WithBudget(b))
	}
	if s.Clock != nil {
		opts = append(opts, rebound.WithClock(s.Clock))
	}
	if s.Random != nil {
		opts = append(opts, rebound.WithRandom(s.Random))
	}
	switch {
	case mc.RetryPolicy != nil:
		p, err := rebound.NewRetrier(rebound.RetryPolicy{
			MaxAttempts: mc.RetryPolicy.Attempts(s.MaxAttempts),
			Backoff:     Backoff(mc.RetryPolicy),
		}, opts...)
		return p, nil, err
	case mc.HedgingPolicy != nil:
		h, err := rebound.NewHedger(rebound.HedgingPolicy{
			MaxAttempts:  mc.HedgingPolicy.Attempts(s.MaxAttempts),
			HedgingDelay: mc.HedgingPolicy.HedgingDelay,
		}, opts...)
		return nil, h, err
	}
	return nil, nil, nil
}

// Once returns the strategy of a call under a hedgingPolicy that may not be
// hedged (its request does not fit the replay buffer): one attempt, whose
// failure the throttle counts as it counts a hedge's.
func Once(throttle *rebound.Throttle, s Settings) *rebound.Retrier {
	var opts []rebound.Option // and the default classifier, rebound.Classify
	if b := Budget(throttle, s); b != nil {
		opts = append(opts, rebound.WithBudget(b))
	}
	if s.Clock != nil {
		opts = append(opts, rebound.WithClock(s.Clock))
	}
	p, _ := rebound.NewRetrier(rebound.RetryPolicy{MaxAttempts: 1, Backoff: rebound.DefaultBackoff()}, opts...)
	return p
}

// Failure is a failed attempt's error with what A6 makes of it, which
// rebound.Classify reads as it reads rebound.Mark's: a front door that
// keeps it in its own state marks an attempt's error without allocating.
type Failure struct {
	Err  error
	Info rebound.RetryInfo
}

func (f *Failure) Error() string                { return f.Err.Error() }
func (f *Failure) Unwrap() error                { return f.Err }
func (f *Failure) RetryInfo() rebound.RetryInfo { return f.Info }
