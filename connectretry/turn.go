package connectretry

import (
	"context"
	"net/http/httptrace"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"
)

// connect-go v1 (v1.21.1, the newest) has Client.CallServerStream give the
// function that opens its streams a callback, which records the HTTP
// method on the caller's *connect.Request as each stream makes its
// request: in Send, on the goroutine that sends, just before the request
// goes to the HTTPClient, whose Do returns once the response headers have
// arrived. Every attempt of a retried server stream is opened with that
// function, so two attempts that make their requests at once write that
// field from two goroutines: the same value, "POST", but a data race, which
// -race reports in the application's tests. Retried attempts follow one
// another; hedged ones overlap. (Unary calls give each attempt a request
// of its own; client and bidi streams record nothing.)
//
// Nothing of an interceptor's runs between that callback and the end of
// Do but the request's context, which the interceptor gives the stream:
// net/http calls the httptrace hooks of that context as it takes the
// request, before it waits on the network. So the attempts of a hedged
// server stream make their requests in turns: an attempt's Send waits
// until the attempt whose turn it is has handed its request to the
// transport (its first httptrace event) or has returned from Send, or
// until its own context ends. Over net/http a turn ends before anything
// waits on a server, so no attempt holds another back: a hedge goes out
// on time however long an earlier attempt's server takes to answer. Over
// an HTTPClient that calls no httptrace hook, a turn lasts until the
// attempt's response headers arrive or its request fails (see the
// package documentation). An interceptor after rebound's that makes
// requests of its own on the attempt's context, before it lets the
// attempt's Send through, would end the turn early.

// sendTurns gives the attempts of one hedged server stream their turns.
type sendTurns struct {
	mu  sync.Mutex
	cur *turn // the attempt making its request, until it has handed it over
}

// turn is one attempt's turn.
type turn struct {
	turns *sendTurns
	ctx   context.Context // the attempt's
	done  chan struct{}   // closed as the turn ends
	state atomic.Int32    // turnWaiting, turnHeld or turnOver
	trace httptrace.ClientTrace
}

// The states of a turn.
const (
	turnWaiting = iota // the attempt has not asked for its turn
	turnHeld           // the attempt is making its request
	turnOver           // the request was handed over, or never will be
)

// newTurn returns the turn of an attempt opened with ctx, and the context
// to open it with, whose httptrace hooks end the turn.
func (ts *sendTurns) newTurn(ctx context.Context) (*turn, context.Context) {
	t := &turn{turns: ts, done: make(chan struct{})}
	// net/http's Transport calls GetConn first, x/net/http2's too for
	// the connections it dials or reuses; the others are for
	// RoundTrippers that call only some hooks.
	t.trace = httptrace.ClientTrace{
		GetConn:      func(string) { t.end() },
		GotConn:      func(httptrace.GotConnInfo) { t.end() },
		WroteHeaders: t.end,
	}
	t.ctx = httptrace.WithClientTrace(ctx, &t.trace)
	return t, t.ctx
}

// take waits for the attempt's turn; the error is its context's, should it
// end first.
func (t *turn) take() error {
	for {
		t.turns.mu.Lock()
		cur := t.turns.cur
		if cur == nil {
			t.turns.cur = t
			t.state.Store(turnHeld)
			t.turns.mu.Unlock()
			return nil
		}
		t.turns.mu.Unlock()
		select {
		case <-cur.done:
		case <-t.ctx.Done():
			return connect.NewError(contextCode(t.ctx.Err()), t.ctx.Err())
		}
	}
}

// end ends the attempt's turn, if it holds it: the hooks call it from the
// transport, after connect's callback, and Send once it returns. Later
// calls do nothing.
func (t *turn) end() {
	if !t.state.CompareAndSwap(turnHeld, turnOver) {
		return
	}
	t.turns.mu.Lock()
	t.turns.cur = nil
	t.turns.mu.Unlock()
	close(t.done)
}

// contextCode is connect's code for err, a context's error.
func contextCode(err error) connect.Code {
	if err == context.DeadlineExceeded {
		return connect.CodeDeadlineExceeded
	}
	return connect.CodeCanceled
}
