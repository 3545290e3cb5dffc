// Package override applies a call's rebound.Override to its configured
// policy, by the one rule every protocol package follows: each value is the
// stricter of the two (the fewer attempts, the shorter per-attempt timeout,
// the codes both list), unless the client trusts its callers, and then the
// override's values stand, within the client's attempt cap.
package override

import (
	"fmt"
	"slices"
	"time"

	"github.com/rebound-go/rebound"
)

// Policy is what a call's configuration allows.
type Policy struct {
	// Present: a retry or hedging policy governs the call.
	Present bool
	// MaxAttempts is the configured number of attempts, within the client's
	// cap; 1 without a policy.
	MaxAttempts int
	// Timeout is the configured per-attempt timeout; 0 for none.
	Timeout time.Duration
}

// Result is a call's policy once its override applied.
type Result struct {
	Policy
	// Codes, when not nil, replace the configured retryable (or
	// non-fatal) codes; nil keeps them.
	Codes []int
	// Created: a trusted override put a retry policy on a call that had
	// none.
	Created bool
	// Clamped names the override's fields that asked for more than the
	// configuration allows and were held to it, for the debug log.
	Clamped []string
}

// Validate checks o, naming the first invalid field.
func Validate(o rebound.Override) error {
	switch {
	case o.MaxAttempts < 0:
		return fmt.Errorf("Override.MaxAttempts must be >= 0, got %d", o.MaxAttempts)
	case o.PerAttemptTimeout < 0:
		return fmt.Errorf("Override.PerAttemptTimeout must be >= 0, got %v", o.PerAttemptTimeout)
	}
	return nil
}

// Apply returns the policy of a call whose configuration allows p, with
// has the configured codes, under o. trusted lets o loosen p; clientMax is
// the client's attempt cap, which holds in every case. o must be valid.
func Apply(p Policy, has func(code int) bool, o rebound.Override, trusted bool, clientMax int) Result {
	r := Result{Policy: p}
	if o.Disable {
		r.MaxAttempts = 1
		return r
	}
	if !p.Present {
		if !trusted {
			if o.MaxAttempts > 1 || o.RetryableCodes != nil || o.PerAttemptTimeout > 0 {
				r.Clamped = append(r.Clamped, "policy")
			}
			return r
		}
		if o.MaxAttempts == 0 && o.RetryableCodes == nil && o.PerAttemptTimeout == 0 {
			return r
		}
		r.Present, r.Created = true, true
		r.MaxAttempts = clientMax
		r.Codes = []int{}
	}
	switch {
	case o.MaxAttempts == 0:
	case trusted:
		r.MaxAttempts = o.MaxAttempts
	case o.MaxAttempts > r.MaxAttempts:
		r.Clamped = append(r.Clamped, "MaxAttempts")
	default:
		r.MaxAttempts = o.MaxAttempts
	}
	r.MaxAttempts = max(1, min(r.MaxAttempts, clientMax))
	switch {
	case o.PerAttemptTimeout == 0:
	case r.Timeout == 0 || o.PerAttemptTimeout <= r.Timeout || trusted:
		r.Timeout = o.PerAttemptTimeout
	default:
		r.Clamped = append(r.Clamped, "PerAttemptTimeout")
	}
	if o.RetryableCodes != nil {
		if trusted {
			r.Codes = slices.Clone(o.RetryableCodes)
		} else {
			r.Codes = make([]int, 0, len(o.RetryableCodes))
			for _, c := range o.RetryableCodes {
				if has(c) {
					r.Codes = append(r.Codes, c)
				} else if !slices.Contains(r.Clamped, "RetryableCodes") {
					r.Clamped = append(r.Clamped, "RetryableCodes")
				}
			}
		}
	}
	return r
}
