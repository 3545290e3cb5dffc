package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/avast/retry-go/v5"
	"github.com/cenkalti/backoff/v5"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"

	"github.com/rebound-go/rebound"
)

// errFlaky is the plain function's failure; every library is told to
// retry it, and only it.
var errFlaky = errors.New("bench: flaky")

func isFlaky(err error) bool { return errors.Is(err, errFlaky) }

// A doCase is one row of BenchmarkDo.
type doCase struct {
	name string
	// failEvery is the function's failure pattern (see flaky).
	failEvery int
	// perCall is the exact number of attempts of each call.
	perCall int
}

var doCases = []doCase{
	{name: "success", perCall: 1},
	{name: "retry-once", failEvery: 2, perCall: 2},
}

// flaky returns the plain function: it counts its calls in *n and fails
// calls 1, k+1, 2k+1, … with errFlaky (none when k is 0, all when 1).
func flaky(n *int, k int) func() error {
	return func() error {
		*n++
		if k > 0 && (*n-1)%k == 0 {
			return errFlaky
		}
		return nil
	}
}

// A doLib is one contender of BenchmarkDo: retrier returns a function that
// makes one call of op with up to maxAttempts attempts, no delay between
// them, retrying errFlaky only. Whatever each library builds once per
// client is built here, outside the measured loop.
type doLib struct {
	name    string
	retrier func(tb testing.TB, op func() error) func() error
}

// zeroRandom makes rebound's jitter 0: with it the 1ns backoff (the
// smallest Backoff accepts) is no wait at all.
type zeroRandom struct{}

func (zeroRandom) Float64() float64 { return 0 }

// doLibs lists rebound first so that benchstat compares the others with it.
var doLibs = []doLib{
	{"rebound", func(tb testing.TB, op func() error) func() error {
		p, err := rebound.NewRetrier(
			rebound.RetryPolicy{MaxAttempts: maxAttempts, Backoff: rebound.Backoff{Initial: time.Nanosecond, Max: time.Nanosecond, Multiplier: 1}},
			rebound.WithRandom(zeroRandom{}),
			rebound.WithClassifier(func(err error) rebound.RetryInfo {
				if isFlaky(err) {
					return rebound.RetryInfo{Safety: rebound.SafetyYes}
				}
				return rebound.RetryInfo{}
			}))
		if err != nil {
			tb.Fatal(err)
		}
		ctx := context.Background()
		attempt := func(context.Context) error { return op() }
		return func() error { return rebound.Do(ctx, p, attempt) }
	}},
	// failsafe-go's retry policy has no delay by default.
	{"failsafe", func(_ testing.TB, op func() error) func() error {
		rp := retrypolicy.NewBuilder[any]().HandleErrors(errFlaky).WithMaxAttempts(maxAttempts).ReturnLastFailure().Build()
		ex := failsafe.With(rp)
		return func() error { return ex.Run(op) }
	}},
	// cenkalti/backoff v5 retries every error but a Permanent one.
	{"backoff", func(_ testing.TB, op func() error) func() error {
		ctx := context.Background()
		opts := []backoff.RetryOption{backoff.WithBackOff(&backoff.ZeroBackOff{}), backoff.WithMaxTries(maxAttempts)}
		attempt := func() (struct{}, error) {
			err := op()
			if err != nil && !isFlaky(err) {
				return struct{}{}, backoff.Permanent(err)
			}
			return struct{}{}, err
		}
		return func() error {
			_, err := backoff.Retry(ctx, attempt, opts...)
			return err
		}
	}},
	// avast/retry-go v5: a reusable Retrier; FixedDelay drops the default
	// random jitter, so Delay(0) is no delay.
	{"retry-go", func(_ testing.TB, op func() error) func() error {
		r := retry.New(retry.Attempts(maxAttempts), retry.Delay(0), retry.DelayType(retry.FixedDelay),
			retry.LastErrorOnly(true), retry.RetryIf(isFlaky))
		return func() error { return r.Do(op) }
	}},
}

// BenchmarkDo compares the core retry loops on a plain function: success on
// the first attempt, and one failure retried at once.
func BenchmarkDo(b *testing.B) {
	for _, c := range doCases {
		for _, lib := range doLibs {
			b.Run("case="+c.name+"/lib="+lib.name, func(b *testing.B) {
				var n int
				call := lib.retrier(b, flaky(&n, c.failEvery))
				b.ReportAllocs()
				for b.Loop() {
					if err := call(); err != nil {
						b.Fatal(err)
					}
				}
				if n != c.perCall*b.N {
					b.Fatalf("%d attempts for %d calls, want %d", n, b.N, c.perCall*b.N)
				}
			})
		}
	}
}
