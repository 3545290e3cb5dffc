// Package gopanic carries a panic from a goroutine that rebound started
// to the goroutine of the call it works for, and raises it there, as
// errgroup and singleflight do. rebound runs the application's callbacks
// (a classifier, a budget, a logger, a tracer, a clock, the hedging delay,
// the next interceptor or transport) on goroutines of its own: a hedge, a
// hedged call's machinery, a stream's control goroutines. A panic there
// would end the process, out of reach of the caller's recover. Instead the
// goroutine that recovers it ends the call's other work (its attempts are
// cancelled and waited for), hands the panic to the call, and the call
// raises it on the caller's goroutine, with the original value and the
// stack where it happened in its message.
package gopanic

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Panic is a panic recovered on a goroutine rebound started, or that
// goroutine's runtime.Goexit (a test's t.FailNow in a callback, say). It
// is what [Panic.Raise] panics with: its Error gives the original value
// and the stack of the goroutine that panicked, and Unwrap the value when
// it is an error.
type Panic struct {
	// Value is what was passed to panic.
	Value any
	// Stack is the stack of the goroutine that panicked, as
	// runtime/debug.Stack gives it, taken where the panic was recovered.
	Stack []byte

	goexit bool
}

// Error returns the original value and the stack where it was raised.
func (p *Panic) Error() string {
	return fmt.Sprintf("%v\n\nrebound: raised again on the caller's goroutine; it panicked on a goroutine of the call:\n%s", p.Value, p.Stack)
}

// Unwrap returns the original value when it is an error, else nil.
func (p *Panic) Unwrap() error {
	err, _ := p.Value.(error)
	return err
}

// Raise raises p on the calling goroutine: it panics with p, or, for a
// goroutine that called runtime.Goexit, calls runtime.Goexit.
func (p *Panic) Raise() {
	if p.goexit {
		runtime.Goexit()
	}
	panic(p)
}

// Recovered returns the panic unwinding the goroutine, for a function
// deferred first thing on a goroutine rebound starts, given what recover
// returned and whether the goroutine's work returned normally:
//
//	returned := false
//	defer func() {
//		if p := gopanic.Recovered(recover(), returned); p != nil {
//			// end the call's other work, and hand p to the call
//		}
//	}()
//	work()
//	returned = true
//
// It returns nil when the work returned. The deferred function must act
// on p itself: after runtime.Goexit nothing else runs on the goroutine. A
// Panic raised again by [Panic.Raise] on a goroutine of the call is
// returned as it is.
func Recovered(v any, returned bool) *Panic {
	switch {
	case returned:
		return nil
	case v == nil:
		// Not a panic (panic(nil) recovers as *runtime.PanicNilError),
		// so runtime.Goexit.
		return &Panic{goexit: true}
	}
	if p, ok := v.(*Panic); ok {
		return p
	}
	return &Panic{Value: v, Stack: debug.Stack()}
}

// Run calls f. Should f panic or call runtime.Goexit, it calls handle
// with the Panic; then a panic is over and Run returns, while
// runtime.Goexit goes on ending the goroutine. It is the body of a
// goroutine rebound starts: go gopanic.Run(work, handOver).
func Run(f func(), handle func(*Panic)) {
	returned := false
	defer func() {
		if p := Recovered(recover(), returned); p != nil {
			handle(p)
		}
	}()
	f()
	returned = true
}
