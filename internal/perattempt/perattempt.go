// Package perattempt holds the per-attempt timeout rules that every protocol
// package follows (gRPC core's perAttemptRecvTimeout): when an attempt's
// timer starts and stops, what deadline it has, how a cut attempt is
// recognised, and how it is classified.
//
// The timer starts when the attempt is handed to the transport, after any
// backoff, and stops when the attempt commits (response headers, a
// message, or its status). The attempt's deadline is the earlier of its
// start plus the timeout and the call's deadline; when the call's comes
// first no timer is started, since the call ends then anyway. Like a
// method's timeout, the timer runs on real time, whatever the retry clock:
// it ends up as a context deadline that the transport enforces.
package perattempt

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
)

// WithDeadline returns the context of an attempt that is bounded as a
// whole (a unary call): its deadline is the earlier of now+d and ctx's,
// and when its own deadline passes it ends with cause
// rebound.ErrAttemptTimeout. The deadline travels with the request (as
// grpc-timeout, say), so the server drops the work once the client has
// given up on it. With d <= 0, or when ctx's deadline comes first, ctx is
// returned as is, with a cancel that does nothing.
func WithDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return ctx, noop
	}
	dl := time.Now().Add(d)
	if cdl, ok := ctx.Deadline(); ok && !dl.Before(cdl) {
		return ctx, noop
	}
	return context.WithDeadlineCause(ctx, dl, rebound.ErrAttemptTimeout)
}

func noop() {}

// Timer cuts an attempt that has not committed within its timeout. Unlike
// [WithDeadline] it leaves the call's deadline on the wire, so that a
// committed attempt (a long stream, a response body) is never cut. The
// zero value, and a nil *Timer, time nothing.
type Timer struct {
	t *time.Timer
	// state settles the race of the timer against Stop: whichever moves
	// it from running first decides whether the attempt is cut.
	state atomic.Int32
}

// The states of a Timer.
const (
	running int32 = iota
	stopped       // Stop came first: the attempt is never cut
	fired         // the timer came first: the attempt's context is cut
)

// Start returns the context of an attempt that must commit within d, and
// its timer: once d has passed without [Timer.Stop], the context is
// cancelled with cause rebound.ErrAttemptTimeout. cancel ends the context
// and stops the timer; call it when the attempt ends, as with any
// context. With d <= 0, or when ctx's deadline comes first, the context
// is a plain cancellable one and the timer is nil.
func Start(ctx context.Context, d time.Duration) (context.Context, *Timer, context.CancelFunc) {
	actx, cancel := context.WithCancelCause(ctx)
	if d <= 0 {
		return actx, nil, func() { cancel(nil) }
	}
	if cdl, ok := ctx.Deadline(); ok && !time.Now().Add(d).Before(cdl) {
		return actx, nil, func() { cancel(nil) }
	}
	t := new(Timer)
	t.t = time.AfterFunc(d, func() {
		if t.state.CompareAndSwap(running, fired) {
			cancel(rebound.ErrAttemptTimeout)
		}
	})
	return actx, t, func() {
		t.Stop()
		cancel(nil)
	}
}

// Stop stops the timer: the attempt has committed, and from now on only
// its context's other ends (the call's deadline, a cancellation) end it.
// It reports whether the timer was stopped before it fired, however often
// it is called: false means the attempt's context is cut, or about to be,
// so that response headers that came at that instant must not commit the
// call to it.
func (t *Timer) Stop() bool {
	if t == nil || t.t == nil {
		return true
	}
	t.t.Stop()
	t.state.CompareAndSwap(running, stopped)
	return t.state.Load() == stopped
}

// TimedOut reports whether actx, the context of an attempt derived from
// the call's context parent, was ended by its per-attempt timeout: it is
// done with cause rebound.ErrAttemptTimeout while parent is not (a parent
// ended for that cause belongs to an enclosing call), or its own deadline,
// earlier than parent's, has passed: the transport may see a deadline pass
// before the context's timer marks it done.
func TimedOut(parent, actx context.Context) bool {
	if parent.Err() != nil {
		return false
	}
	if actx.Err() != nil {
		return context.Cause(actx) == rebound.ErrAttemptTimeout
	}
	dl, ok := actx.Deadline()
	if !ok || time.Now().Before(dl) {
		return false
	}
	pdl, pok := parent.Deadline()
	return !pok || dl.Before(pdl)
}

// Cut reports whether a failed attempt made under [WithDeadline] with
// timeout d, whose context is actx, was cut by its own deadline, whatever
// its error says. Its context ended for that deadline ([TimedOut]), or the
// deadline, earlier than parent's, is due, give or take d/20 (at least
// 5ms). The deadline travels with the request, so the server, or a proxy
// on the way, may see it pass before the client does, and answer first:
// on the wire it is rounded down (Connect-Timeout-Ms to the millisecond)
// and it starts when the request arrives. Its answer may be any code: a
// gRPC server says DEADLINE_EXCEEDED, an HTTP/2 server may reset the
// stream (RST_STREAM CANCEL, which connect reports as CANCELED while the
// client's deadline has not yet passed), a handler whose work was aborted
// may say CANCELED. Which side's clock won is a race; the attempt was cut
// by its timeout either way. A failure that comes sooner is the server's
// own answer, classified as usual.
func Cut(parent, actx context.Context, d time.Duration) bool {
	if d <= 0 || parent.Err() != nil {
		return false
	}
	if TimedOut(parent, actx) {
		return true
	}
	dl, ok := actx.Deadline()
	if pdl, pok := parent.Deadline(); !ok || pok && !dl.Before(pdl) {
		return false
	}
	return time.Until(dl) <= max(d/20, 5*time.Millisecond)
}

// Info classifies an attempt cut by its timeout: retryable whatever the
// policy's codes (gRPC core retries it even when DEADLINE_EXCEEDED is not
// retryable), counted against the throttle as a failure, and a timeout
// for budgets that charge more for one. committed says the response had
// started, which still forbids a retry.
func Info(committed bool) rebound.RetryInfo {
	return rebound.RetryInfo{Safety: rebound.SafetyYes, Timeout: true, Committed: committed}
}

// Message is the text of the error of an attempt cut after d, prefixed with
// the package's name.
func Message(pkg string, d time.Duration) string {
	var b strings.Builder
	b.WriteString(pkg)
	b.WriteString(": per-attempt timeout (")
	b.WriteString(d.String())
	b.WriteString(") exceeded before the response started")
	return b.String()
}

// Error is the error of an attempt cut by its per-attempt timeout, for a
// protocol package to wrap in its own status: errors.Is finds
// rebound.ErrAttemptTimeout.
type Error struct {
	Msg string
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns rebound.ErrAttemptTimeout.
func (e *Error) Unwrap() error { return rebound.ErrAttemptTimeout }

// Timeout reports true, as a net.Error that timed out does: net/http and
// url.Error ask for it.
func (e *Error) Timeout() bool { return true }

// NewError returns the error of an attempt of package pkg cut after d.
func NewError(pkg string, d time.Duration) *Error { return &Error{Msg: Message(pkg, d)} }
