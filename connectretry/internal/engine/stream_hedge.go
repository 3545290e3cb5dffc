package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/observe"
	"github.com/rebound-go/rebound/serviceconfig"
)

// A stream under a hedgingPolicy holds its request until it is complete:
// Send keeps each message (within the buffer limits) and sends nothing, and
// CloseSend starts rebound's hedge machinery, whose first attempt is the
// stream's own and whose later ones follow the hedging delay (or a
// non-fatal failure, at once), each sent every kept message and the close
// on a goroutine of its own. The attempts race to a response, which the
// first Receive waits for: the first attempt to receive a message, or to
// end cleanly, wins; the call commits to it, the others are cancelled, and
// its message is the application's. A fatal failure ends the call, and
// the budget (retryThrottling, WithBudget) must allow each hedge, as for
// unary calls.
//
// A stream commits to its first attempt, made once, when its request
// cannot be held (a message would pass the buffer limits, or is not a
// protobuf message), when the application receives before closing its
// request (a bidirectional stream that reads as it writes), or reads its
// response header before the race has a winner (connect v1): the messages
// kept so far go to the first attempt then, and later ones as they come.

// hedgeRace is a hedged stream's race, from CloseSend on.
type hedgeRace struct {
	cancel context.CancelFunc // ends the race (CloseResponse)
	done   chan struct{}      // closed once the race is over and recorded
	won    hedgeWon           // the winner, once done, without err
	err    error              // the call's error, once done

	// ready is closed by the first Receive, with msg the application's
	// message: the attempts receive into messages of its type.
	ready chan struct{}
	msg   any
	// forced is closed when the application reads the response header
	// during the race: the first attempt wins at once.
	forced     chan struct{}
	forcedOnce sync.Once
}

// hedgeWon is what a hedged attempt that won brings: its message, or the
// io.EOF of a stream that ended cleanly without one; neither when the call
// was committed to it before it received.
type hedgeWon struct {
	a   *attempt
	msg any
	eof error
}

// sendHedged is Send for a hedged stream. Called with sendMu held.
func (s *Stream) sendHedged(msg any) error {
	if !s.committed.Load() && s.keep(msg) {
		return nil // sent with the rest once the request is complete
	}
	// Committed: by this message, which could not be kept, or before.
	s.flushLocked()
	if s.committed.Load() && s.buf.End() > s.buf.Base() {
		s.freeLocked()
	}
	return s.current().conn.Send(msg)
}

// flushLocked sends the attempt in flight of a hedged stream that
// committed before its race the request held so far, once. Called with
// sendMu held.
func (s *Stream) flushLocked() {
	if s.flushed.Swap(true) {
		return
	}
	if err := s.replayLocked(s.current()); err != nil {
		s.current().abort()
	}
}

// commitHedged commits a hedged stream to its first attempt, for why (see
// Stream.Commit). Before its race, the request held so far goes to the
// first attempt: from the application's Send (sendLocked: it holds
// sendMu), at once; otherwise beside the response side, as a replay does,
// for a server that answers each message before it reads the next. During
// the race, the attempt in flight wins at once.
func (s *Stream) commitHedged(why string, sendLocked bool) {
	var race *hedgeRace
	if sendLocked {
		race = s.race
		if race == nil {
			s.flushLocked()
		}
	} else {
		s.sendMu.Lock()
		race = s.race
		s.sendMu.Unlock()
		if race == nil && !s.flushed.Swap(true) {
			s.replay(s.current())
		}
	}
	if race != nil {
		race.forcedOnce.Do(func() { close(race.forced) })
		<-race.done
		return
	}
	s.commitFirst(why)
}

// startRaceLocked starts the race of a hedged stream whose request is
// complete. Called with sendMu held.
func (s *Stream) startRaceLocked() {
	ctx, cancel := context.WithCancel(s.ctx)
	r := &hedgeRace{cancel: cancel, done: make(chan struct{}), ready: make(chan struct{}), forced: make(chan struct{})}
	s.race = r
	s.flushed.Store(true) // every attempt of the race is sent the request
	pe := s.i.policyFor(s.t, s.p)
	if pe.err != nil {
		// Possible only with a service config built by hand.
		cancel()
		r.err = s.i.policyError(s.procedure, pe.err)
		s.endLoop()
		s.endSpans(r.err)
		close(r.done)
		return
	}
	go s.runRace(ctx, pe.hedge, r)
}

// runRace runs the hedge machinery, and records the call.
func (s *Stream) runRace(ctx context.Context, hd *rebound.Hedger, r *hedgeRace) {
	defer close(r.done)
	s.mu.Lock()
	s.looping = true
	s.mu.Unlock()
	if s.span != nil {
		s.phase.CompareAndSwap(phaseOpen, phaseRetrying)
	}
	var (
		tr    observe.Tracker
		mu    sync.Mutex
		taken bool
	)
	first := &s.first
	op := func(hctx context.Context, n int) (hedgeWon, error) {
		tr.Start(time.Time{})
		var a *attempt
		mu.Lock()
		if n == 1 && !taken {
			taken, a = true, first
		}
		mu.Unlock()
		if a == nil {
			a = new(attempt)
			if _, err := s.openHedge(a, n); err != nil {
				// The transport cannot open a stream: another attempt
				// would fail the same way.
				return hedgeWon{}, s.hedgeFailed(&tr, a, &a6.Failure{Err: err})
			}
			s.admit(a)
		}
		// Attempts run on the call's context, not on hctx, which the
		// machinery cancels as the race ends, the winner's included: the
		// winner's stream goes on. hctx cancels an attempt while it races.
		stop := context.AfterFunc(hctx, a.abort)
		defer stop()
		s.replayHedge(a)
		select {
		case <-r.ready:
		case <-r.forced:
			// The application read the response header: the call is
			// this attempt's, if it is the first to hear.
			return hedgeWon{a: a}, nil
		case <-hctx.Done():
			<-a.replayDone
			err := s.i.contextError(hctx)
			s.i.endAttempt(a.as, err, s.ctx.Err() == nil)
			return hedgeWon{}, err
		}
		m := NewMessage(r.msg)
		err := a.conn.Receive(m)
		if err != nil {
			<-a.replayDone
			if a.replayErr != nil && !errors.Is(err, io.EOF) {
				// The client's own failure: not retryable.
				s.tell(a, a.replayErr)
				return hedgeWon{}, s.hedgeFailed(&tr, a, &a6.Failure{Err: a.replayErr})
			}
		}
		// An attempt cancelled while the call goes on has lost: the call
		// ended with another attempt.
		lost := hctx.Err() != nil && s.ctx.Err() == nil
		switch {
		case err == nil:
			if !lost {
				a.as.Committed(whyResponse)
			}
			return hedgeWon{a: a, msg: m}, nil
		case errors.Is(err, io.EOF):
			s.tell(a, err)
			if !lost {
				a.as.Committed(whyResponse)
			}
			return hedgeWon{a: a, eof: err}, nil
		}
		s.tell(a, err)
		ae := s.i.classify(a.v, err, a.conn.Pushback(err), a.conn.Metadata(), s.p.mc.HedgingPolicy.NonFatalStatusCodes, s.procedure, false)
		if lost {
			s.i.endAttempt(a.as, ae, true)
			tr.Failed(n, ae.Info, time.Time{})
			return hedgeWon{}, ae
		}
		return hedgeWon{}, s.hedgeFailed(&tr, a, ae)
	}
	d := s.i.rec.Decisions(s.ctx, s.procedure, s.t.name)
	d.Tracker = &tr // to hear of a hedge the budget refuses, for Stats
	call := observe.Hooks[hedgeWon](&d)
	if s.span != nil {
		call = observe.Traced[hedgeWon](&d, s.span)
	}
	w, err := call.Hedge(ctx, hd, op)
	if !taken {
		// The machinery ended before it made its first attempt.
		first.abort()
	}
	if err == nil && w.a.replayDone != nil {
		// The winner is sent the rest of the request before the log is
		// freed.
		<-w.a.replayDone
	}
	// Hedge has waited for every attempt: tr is complete.
	s.mu.Lock()
	s.attempts = tr.Attempts()
	if err == nil {
		s.cur = w.a
	}
	s.mu.Unlock()
	s.endLoop()
	s.sendMu.Lock()
	s.freeLocked()
	s.sendMu.Unlock()
	if s.n != nil {
		*s.n = tr.Attempts()
	}
	s.i.end(s.ctx, &tr, 0, s.procedure, s.t.name, true, err)
	r.won = w
	if err != nil {
		r.err = s.i.giveUp(s.ctx, err)
		s.endSpans(r.err)
		return
	}
	s.i.rec.Log(s.ctx, "rebound: committed", s.procedure, s.t.name, slog.Int("attempt", w.a.n), slog.String("why", whyResponse))
	s.traceCommitted()
}

// receiveHedged is the first Receive of a hedged stream: it waits for the
// race to have a winner, whose message it returns in msg.
func (s *Stream) receiveHedged(msg any) error {
	s.sendMu.Lock()
	r := s.race
	s.sendMu.Unlock()
	if s.err != nil {
		return s.err
	}
	if r == nil {
		// Receiving before the request is complete: made once.
		s.Commit("request not complete when receiving")
		return s.ended(s.current().conn.Receive(msg))
	}
	select {
	case <-r.done: // over before this Receive: a header read committed it
	default:
		r.msg = msg
		close(r.ready)
		<-r.done
	}
	if r.err != nil {
		s.err = r.err
		return s.err
	}
	switch {
	case r.won.eof != nil:
		return s.ended(r.won.eof)
	case r.won.msg == nil:
		// Committed to it before it received (its header read).
		return s.ended(s.current().conn.Receive(msg))
	}
	if err := CopyMessage(msg, r.won.msg); err != nil {
		return s.i.major.Error(serviceconfig.Internal, err)
	}
	return nil
}

// hedgeFailed records the failure of hedged attempt a, as the machinery
// judges it, and returns it.
func (s *Stream) hedgeFailed(tr *observe.Tracker, a *attempt, ae *a6.Failure) error {
	tr.Failed(a.n, ae.Info, time.Time{})
	s.i.endAttempt(a.as, ae, false)
	return ae
}

// openHedge opens hedged attempt a, number n, on a context of its own
// under the call's: its span and a place for the classifier's verdict are
// in it. Hedged attempts have no per-attempt timer: their hedging delay
// sends the next instead.
func (s *Stream) openHedge(a *attempt, n int) (string, error) {
	a.n = n
	ctx, as := s.span.StartAttempt(s.ctx, n)
	a.as = as
	ctx, a.cancel = context.WithCancel(ctx)
	ctx, a.v = s.i.awaitVerdict(ctx)
	a.ctx = ctx
	conn, addr, err := s.o.Open(ctx, n)
	if err != nil {
		a.conn = failedConn{err}
		a.cancel()
		return "", err
	}
	a.conn = conn
	return addr, nil
}

// replayHedge sends hedge a every kept message and the close, on a
// goroutine of its own, while the machinery receives from a (see
// Stream.replay); a.replayDone is closed when it is done. The request is
// complete, so the log is not written while hedges race: they read it
// together, without the request side's lock, and it is freed only once
// the race has ended, which waits for every hedge that lost, and the
// winner's replay.
func (s *Stream) replayHedge(a *attempt) {
	a.replayDone = make(chan struct{})
	go func() {
		defer close(a.replayDone)
		if a.replayErr = s.sendAll(a); a.replayErr != nil {
			a.conn.Abort()
		}
	}()
}

// sendAll sends a what replayLocked does, reading the log as it is.
func (s *Stream) sendAll(a *attempt) error {
	if hs, ok := a.conn.(HeaderSender); ok && s.headers {
		if err := hs.SendHeaders(); err != nil {
			return s.sendErr(a, err)
		}
	}
	for j := s.buf.Base(); j < s.buf.End(); j++ {
		m, err := s.buf.At(j).Message()
		if err != nil {
			return err
		}
		if err := a.conn.Send(m); err != nil {
			return s.sendErr(a, err)
		}
	}
	if err := a.conn.CloseSend(); err != nil {
		return s.sendErr(a, err)
	}
	return nil
}
