package httpretry

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/override"
	"github.com/rebound-go/rebound/internal/perattempt"
)

type overrideKey struct{}

// Override returns a copy of ctx that narrows the retry policy of a
// request sent with it through a [Transport], as o says: fewer attempts, a
// shorter per-attempt timeout, fewer retryable status codes (HTTP status
// codes), or no retry at all. Asking for more than the Transport's options
// allow takes [WithTrustedOverrides]; see [rebound.Override]. A request
// whose o is invalid (a negative field) fails before it is sent. For a
// hedged request ([WithHedging]) MaxAttempts and Disable apply; a hedged
// request is not timed, and keeps the hedged status codes.
//
//	req = req.WithContext(httpretry.Override(req.Context(), rebound.Override{MaxAttempts: 1}))
func Override(ctx context.Context, o rebound.Override) context.Context {
	return context.WithValue(ctx, overrideKey{}, &o)
}

func overrideOf(ctx context.Context) *rebound.Override {
	o, _ := ctx.Value(overrideKey{}).(*rebound.Override)
	return o
}

// override applies ov to call c on host h: it sets c's per-attempt timeout
// and status codes, and returns the strategy of the call, h's own or a copy
// capped at the override's attempts.
func (t *Transport) override(ctx context.Context, c *call, h *host, ov rebound.Override) (*strategy, error) {
	if err := override.Validate(ov); err != nil {
		return nil, errors.New("httpretry: " + err.Error())
	}
	// The Transport's attempts are also its cap: an override never goes
	// past them. A strategy of the caller's has a count of its own.
	attempts := t.cfg.maxAttempts
	if t.cfg.strategy != nil {
		attempts = math.MaxInt32
	}
	p := override.Policy{Present: true, MaxAttempts: attempts, Timeout: t.cfg.attemptTimeout}
	r := override.Apply(p, t.cfg.status.has, ov, t.cfg.trustedOverrides, attempts)
	if len(r.Clamped) > 0 {
		t.rec.Log(ctx, "rebound: override clamped to the Transport's options", c.name, c.target,
			slog.Any("fields", r.Clamped), slog.Bool("trusted", t.cfg.trustedOverrides))
	}
	c.timeout = r.Timeout
	if r.Codes != nil {
		c.status = new(statusSet)
		for _, code := range r.Codes {
			if code >= 100 && code <= 599 {
				c.status.add(code)
			}
		}
	}
	if r.MaxAttempts >= attempts {
		return h.retry, nil
	}
	st := *h.retry
	st.maxAttempts, st.budget = r.MaxAttempts, h.budget
	return &st, nil
}

// overrideHedge returns the hedger of a hedged request on host h under
// ov: h's own, one with fewer attempts, or nil when ov disables retries
// (the request is then sent once, on the retry path).
func (t *Transport) overrideHedge(ctx context.Context, h *host, ov rebound.Override, name, target string) (*rebound.Hedger, error) {
	if err := override.Validate(ov); err != nil {
		return nil, errors.New("httpretry: " + err.Error())
	}
	p := *t.cfg.hedge
	if ov.MaxAttempts > p.MaxAttempts && !ov.Disable {
		t.rec.Log(ctx, "rebound: override clamped to the Transport's options", name, target,
			slog.Any("fields", []string{"MaxAttempts"}), slog.Bool("trusted", t.cfg.trustedOverrides))
	}
	switch {
	case ov.Disable:
		return nil, nil
	case ov.MaxAttempts > 0 && ov.MaxAttempts < p.MaxAttempts:
		p.MaxAttempts = ov.MaxAttempts
		return rebound.NewHedger(p, rebound.WithBudget(h.budget), rebound.WithClock(t.cfg.clock))
	}
	return h.hedger, nil
}

// timed sends r as one attempt under the per-attempt timeout: its timer
// runs until the response headers arrive. The response's body keeps the
// attempt's context until it is closed. It reports whether the timer cut
// the attempt.
func (c *call) timed(r *http.Request) (*http.Response, error, bool) {
	parent := r.Context()
	actx, timer, cancel := perattempt.Start(parent, c.timeout)
	var wrote wroteState
	actx = httptrace.WithClientTrace(actx, &httptrace.ClientTrace{
		GetConn:      func(string) { wrote.traced.Store(true) },
		WroteHeaders: func() { wrote.wrote.Store(true) },
	})
	resp, err := c.t.sendWith(r.WithContext(actx), c.idempotent, c.status)
	if !timer.Stop() && err == nil {
		// The timer fired as the response came: its context is gone, and
		// its body could not be read. It is a cut attempt like any other.
		resp.Body.Close()
		err = context.Cause(actx)
	}
	if err == nil {
		resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
		return resp, nil, false
	}
	var se *statusError
	if errors.As(err, &se) {
		// A response: its body is drained or returned, and closing it
		// ends the attempt's context.
		se.resp.Body = &cancelBody{ReadCloser: se.resp.Body, cancel: cancel}
		return nil, err, false
	}
	if !perattempt.TimedOut(parent, actx) {
		cancel()
		return nil, err, false
	}
	cancel()
	// A request that may have reached the server is sent again only when
	// it is idempotent; one never written, or whose base RoundTripper
	// reports nothing, counts as written.
	info := perattempt.Info(false)
	if !c.idempotent && (wrote.wrote.Load() || !wrote.traced.Load()) {
		info.Safety = rebound.SafetyNo
	}
	return nil, rebound.Mark(perattempt.NewError("httpretry", c.timeout), info), true
}

// wroteState is what httptrace told of an attempt: whether the transport
// reports traces at all, and whether it wrote the request's headers, on
// which a server may act before the body ends (WroteRequest would not
// tell: net/http calls it when the write ends, failed or not).
type wroteState struct {
	traced, wrote atomic.Bool
}
