package httpretry

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/rebound-go/rebound/internal/gopanic"
	"github.com/rebound-go/rebound/internal/replay"
)

// A response that will not be returned is drained a little before it is
// closed, so that its connection goes back to the pool, as net/http does
// before following a redirect (it reads 2 KiB). The drain is bounded in
// bytes and in time: a longer body, or one that trickles, costs the
// connection rather than delaying the next attempt.
const (
	drainLimit = 4 << 10
	// drainTimeout bounds the wait for a body already on its way; a body
	// that has arrived drains in microseconds. It is I/O, like a
	// connection's deadline, so it runs on real time, not the retry
	// clock (whose waits a test may skip).
	drainTimeout = 50 * time.Millisecond
)

// discard drains (up to drainLimit bytes, for at most drainTimeout, and
// while ctx is not done) and closes the body of a response that will not
// be returned.
func discard(ctx context.Context, resp *http.Response) {
	if resp.Body == nil {
		return
	}
	if resp.ContentLength > drainLimit || ctx.Err() != nil {
		_ = resp.Body.Close()
		return
	}
	drain(ctx, resp.Body, drainTimeout)
}

// drain reads body to its end or up to drainLimit bytes, until timeout or
// ctx ends the wait, and closes it. A body still arriving then is closed in
// the middle of a read, which net/http's response bodies allow: the read
// returns and the connection is dropped.
//
// The body is read on a goroutine of its own. It may be the base
// RoundTripper's, whose Read may panic: the panic is raised on the
// caller's goroutine once the body is closed (see package gopanic).
func drain(ctx context.Context, body io.ReadCloser, timeout time.Duration) {
	done := make(chan struct{})
	var panicked *gopanic.Panic
	go gopanic.Run(func() {
		// One byte more than the limit, so that a body of exactly
		// drainLimit bytes is read to EOF and its connection released.
		_, _ = io.CopyN(io.Discard, body, drainLimit+1)
		close(done)
	}, func(p *gopanic.Panic) {
		panicked = p
		close(done)
	})
	timer := time.NewTimer(timeout)
	select {
	case <-done:
	case <-timer.C:
	case <-ctx.Done():
	}
	timer.Stop()
	_ = body.Close()
	<-done // the close ended a read in progress: nothing outlives the call
	if panicked != nil {
		panicked.Raise()
	}
}

// outgoing is the request as the Transport sends it: first is the request of
// attempt one, and getBody gives a fresh body for every later attempt. A
// request that cannot be replayed has a nil getBody.
type outgoing struct {
	first   *http.Request
	getBody func() (io.ReadCloser, error)
}

func (o *outgoing) replayable() bool { return o.getBody != nil }

// prepare works out how req's body can be sent more than once without
// modifying req. A body without GetBody is buffered when it fits in the
// buffer limits of pool, whose room it then holds: held bytes, which the
// caller releases once the request's attempts are over. Otherwise the
// request is sent once, with the part already read put back in front of
// the rest.
func prepare(req *http.Request, pool *replay.Pool) (out outgoing, held int, err error) {
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		return outgoing{first: req, getBody: noBody}, 0, nil
	case req.GetBody != nil:
		return outgoing{first: req, getBody: req.GetBody}, 0, nil
	case req.ContentLength > int64(pool.PerCall):
		return outgoing{first: req}, 0, nil
	}
	prefix, err := io.ReadAll(io.LimitReader(req.Body, int64(pool.PerCall)+1))
	if err != nil {
		_ = req.Body.Close()
		return outgoing{}, 0, fmt.Errorf("httpretry: reading request body: %w", err)
	}
	first := new(http.Request)
	*first = *req
	if !pool.Reserve(0, len(prefix)) {
		first.Body = &prefixedBody{Reader: io.MultiReader(bytes.NewReader(prefix), req.Body), Closer: req.Body}
		return outgoing{first: first}, 0, nil
	}
	_ = req.Body.Close()
	getBody := noBody
	if len(prefix) > 0 {
		getBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(prefix)), nil }
	}
	first.Body, _ = getBody()
	first.GetBody = getBody
	if first.ContentLength <= 0 {
		// The length was unknown; now it is, and the body need not be
		// sent chunked. A wrong length stays for the base to report.
		first.ContentLength = int64(len(prefix))
	}
	return outgoing{first: first, getBody: getBody}, len(prefix), nil
}

func noBody() (io.ReadCloser, error) { return http.NoBody, nil }

// prefixedBody is a body whose first bytes were read ahead; closing it
// closes the original.
type prefixedBody struct {
	io.Reader
	io.Closer
}

// next returns the request for an attempt after the first: a shallow copy
// of o.first with a fresh body. The copy shares o.first's header map, which
// no RoundTripper may modify.
func (o *outgoing) next() (*http.Request, error) {
	body, err := o.getBody()
	if err != nil {
		return nil, fmt.Errorf("httpretry: GetBody: %w", err)
	}
	r := new(http.Request)
	*r = *o.first
	r.Body = body
	return r, nil
}
