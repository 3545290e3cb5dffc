package httpretry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/observe"
)

// hedged is one attempt of a hedged request.
type hedged struct {
	resp   *http.Response
	cancel context.CancelFunc
}

// hedge sends an idempotent request as hedged attempts. Each attempt runs
// under its own context, derived from the request's rather than from the
// one [rebound.Hedge] gives it: Hedge cancels its context when it returns,
// and that would cut off the body of the response handed back. Hedge's
// context still cancels an attempt while it is in flight; once an attempt
// has its response, only this function ends it: the response returned
// keeps its context until its body is closed, the others are cancelled and
// closed before hedge returns. ctx is the request's; req is the caller's,
// for the metric attributes. Hedged attempts overlap, so no delay between them is measured,
// and the clock is not read.
func (t *Transport) hedge(ctx context.Context, hd *rebound.Hedger, out *outgoing, name, target string, req *http.Request, span *observe.CallSpan) (*http.Response, error) {
	var (
		mu       sync.Mutex
		attempts []*hedged
		tr       observe.Tracker
	)
	op := func(hctx context.Context, n int) (*http.Response, error) {
		actx, cancel := context.WithCancel(out.first.Context())
		a := &hedged{cancel: cancel}
		mu.Lock()
		attempts = append(attempts, a)
		mu.Unlock()
		r := out.first
		if n > 1 {
			var err error
			if r, err = out.next(); err != nil {
				return nil, rebound.Permanent(err)
			}
		}
		r = t.cfg.headers.numbered(r, n)
		tr.Start(time.Time{})
		var as *observe.AttemptSpan
		if span != nil {
			_, as = span.StartAttempt(hctx, n)
			actx = as.Into(actx)
		}
		stop := context.AfterFunc(hctx, cancel)
		resp, err := t.send(r.WithContext(actx), true)
		stop()
		// An attempt cancelled while the request goes on has lost: the
		// request ended with another attempt.
		lost := hctx.Err() != nil && ctx.Err() == nil
		if err == nil && !lost {
			// The first final response commits the request to its
			// attempt; any other is cancelled.
			as.Committed(whyResponse)
		}
		endAttempt(as, resp, err, lost)
		var se *statusError
		if errors.As(err, &se) {
			resp = se.resp
		}
		if resp != nil {
			mu.Lock()
			a.resp = resp
			mu.Unlock()
		}
		if err != nil {
			tr.Failed(n, rebound.Classify(err), time.Time{})
			t.logCommitted(ctx, err, n, name, target)
			return nil, err
		}
		return resp, nil
	}
	d := t.rec.Decisions(ctx, name, target)
	d.Tracker = &tr // to hear of a hedge the budget refuses, for Stats
	call := observe.Hooks[*http.Response](&d)
	if span != nil {
		call = observe.Traced[*http.Response](&d, span)
	}
	resp, err := call.Hedge(ctx, hd, op)
	countAttempts(ctx, tr.Attempts())
	if err != nil {
		var se *statusError
		if errors.As(err, &se) && ctx.Err() == nil {
			resp = se.resp
		}
	}
	// Every attempt has returned: Hedge waits for them. The others'
	// bodies are closed without draining, so as not to hold back the
	// response that won.
	for _, a := range attempts {
		if a.resp != nil && a.resp == resp && resp.Body != nil {
			resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: a.cancel}
			continue
		}
		a.cancel()
		if a.resp != nil && a.resp.Body != nil {
			_ = a.resp.Body.Close()
		}
	}
	t.end(ctx, &tr, 0, name, target, attributes(req, target, resp), true, err)
	if resp != nil {
		return resp, nil
	}
	return nil, &gaveUpError{err}
}

// cancelBody ends the context of a hedged attempt once its response body
// is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
