package httpretry

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
)

// drainLimit bounds how much of a discarded response body is read so that
// its connection can be reused; a longer body is closed unread, which costs
// the connection but not the time to read it.
const drainLimit = 64 << 10

// discard drains (up to drainLimit) and closes the body of a response that
// will not be returned.
func discard(resp *http.Response) {
	if resp.Body == nil {
		return
	}
	if resp.ContentLength <= drainLimit {
		// One byte more than the limit, so that a body of exactly
		// drainLimit bytes is read to EOF and its connection released.
		_, _ = io.CopyN(io.Discard, resp.Body, drainLimit+1)
	}
	_ = resp.Body.Close()
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
// modifying req. A body without GetBody is buffered when it fits in
// maxBuffered bytes; otherwise the request is sent once, with the part
// already read put back in front of the rest.
func prepare(req *http.Request, maxBuffered int64) (outgoing, error) {
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		return outgoing{first: req, getBody: noBody}, nil
	case req.GetBody != nil:
		return outgoing{first: req, getBody: req.GetBody}, nil
	case req.ContentLength > maxBuffered:
		return outgoing{first: req}, nil
	}
	prefix, err := io.ReadAll(io.LimitReader(req.Body, maxBuffered+1))
	if err != nil {
		_ = req.Body.Close()
		return outgoing{}, fmt.Errorf("httpretry: reading request body: %w", err)
	}
	first := new(http.Request)
	*first = *req
	if int64(len(prefix)) > maxBuffered {
		first.Body = &prefixedBody{Reader: io.MultiReader(bytes.NewReader(prefix), req.Body), Closer: req.Body}
		return outgoing{first: first}, nil
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
	return outgoing{first: first, getBody: getBody}, nil
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
