// Package replay counts the memory that a client holds to replay its calls
// (A6 "Memory Management (Buffering)"), against the two limits of
// WithBufferLimits in grpcretry and httpretry: a total for the client (a
// grpcretry.Client, an httpretry.Transport) and a limit for one call. A
// call whose request does not fit is committed: it goes on, but is not
// retried or hedged.
package replay

import (
	"fmt"
	"sync/atomic"
)

// Limits are the two limits, in bytes: Total for the whole client, PerCall
// for one call.
type Limits struct{ Total, PerCall int }

// Check returns the error of WithBufferLimits(total, perCall), or nil when
// 0 < perCall <= total.
func Check(total, perCall int) error {
	if total <= 0 || perCall <= 0 || perCall > total {
		return fmt.Errorf("need 0 < perCall <= total, got total %d, perCall %d", total, perCall)
	}
	return nil
}

// Pool is the memory of one client. Its Limits are set before it is used;
// Reserve and Release are safe for concurrent use.
type Pool struct {
	Limits
	used atomic.Int64
}

// Reserve takes n more bytes for a call that holds held bytes already, and
// reports whether it did: it does not when the call would hold more than
// PerCall, or the client more than Total.
func (p *Pool) Reserve(held, n int) bool {
	if held+n > p.PerCall {
		return false
	}
	if p.used.Add(int64(n)) > int64(p.Total) {
		p.used.Add(-int64(n))
		return false
	}
	return true
}

// Release gives back n bytes that Reserve took.
func (p *Pool) Release(n int) {
	if n > 0 {
		p.used.Add(-int64(n))
	}
}

// Used returns the bytes reserved now.
func (p *Pool) Used() int64 { return p.used.Load() }
