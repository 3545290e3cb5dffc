package connectretry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"

	"connectrpc.com/connect"

	"github.com/rebound-go/rebound/connectretry/internal/engine"
	"github.com/rebound-go/rebound/internal/ratelimit"
)

// Request headers that connect computes for each attempt from its context's
// deadline; a replay keeps its own rather than the first attempt's.
var timeoutKeys = []string{"Grpc-Timeout", "Connect-Timeout-Ms"}

// WrapStreamingClient returns the function that opens client streams.
// Streaming calls under a retry policy, of every shape, are retried until
// they commit, their request messages replayed; other streams are made
// once. See the package documentation.
func (i *Interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		if i.err != nil {
			return newErrConn(spec, connect.NewError(connect.CodeInternal, i.err))
		}
		e := i.engine()
		sp, err := e.PlanStream(ctx, spec.Procedure)
		if err != nil {
			return newErrConn(spec, err)
		}
		if !sp.Governed() {
			conn := next(sp.Context(), spec)
			o, err := e.OnceStream(&sp, conn.Peer().Addr)
			switch {
			case err != nil:
				// connect makes the request on the first write: the
				// stream it opened is dropped unsent.
				return newErrConn(spec, err)
			case o == nil:
				return conn
			}
			return &onceConn{StreamingClientConn: conn, once: o}
		}
		op := &opener{next: next, spec: spec}
		if sp.Hedged() && spec.StreamType == connect.StreamTypeServer {
			op.turns = new(sendTurns)
		}
		s, err := e.OpenStream(&sp, spec.Procedure, op)
		if err != nil {
			return newErrConn(spec, err)
		}
		return &stream{s: s, first: op.first}
	}
}

// opener opens the attempts of a retried stream.
type opener struct {
	next  connect.StreamingClientFunc
	spec  connect.Spec
	first connect.StreamingClientConn // the first attempt's, whose request header the caller sets
	// turns orders the requests of a hedged server stream's attempts
	// (see turn.go); nil for other streams.
	turns *sendTurns
}

func (o *opener) Open(ctx context.Context, n int) (engine.Conn, string, error) {
	var t *turn
	if o.turns != nil {
		t, ctx = o.turns.newTurn(ctx)
	}
	c := o.next(ctx, o.spec)
	if n == 1 {
		o.first = c
	} else {
		h := c.RequestHeader()
		for k, v := range o.first.RequestHeader() {
			// What the new attempt has already, connect or the
			// interceptors after this one set for it (its own
			// traceparent, say).
			if _, own := h[k]; !own && !slices.Contains(timeoutKeys, k) {
				h[k] = slices.Clone(v)
			}
		}
		h[previousAttemptsKey] = []string{strconv.Itoa(n - 1)}
	}
	return &conn{c, t}, c.Peer().Addr, nil
}

// conn is one attempt's stream, as the engine sees it.
type conn struct {
	connect.StreamingClientConn
	turn *turn // a hedged server stream's: its request waits for its turn
}

// Send sends msg. The first Send of a hedged server stream makes its
// request, in its turn.
func (c *conn) Send(msg any) error {
	if c.turn == nil || c.turn.state.Load() != turnWaiting {
		return c.StreamingClientConn.Send(msg)
	}
	if err := c.turn.take(); err != nil {
		return err
	}
	defer c.turn.end()
	return c.StreamingClientConn.Send(msg)
}

func (c *conn) CloseSend() error { return c.CloseRequest() }

// Abort closes both sides of the stream. A server stream's request side
// is left alone: its Send has made the request and sent the whole of it,
// and closing it before would make the request now, outside its turn.
func (c *conn) Abort() {
	if c.turn == nil {
		_ = c.CloseRequest()
	}
	_ = c.CloseResponse()
}

func (c *conn) Pushback(err error) []string { return streamPushback(err, c.ResponseTrailer()) }

// Published returns the header fields of the answer, once the response
// has ended with err (see engine.Publisher).
func (c *conn) Published(err error) ratelimit.Fields {
	return streamPublished(err, c.StreamingClientConn)
}

// streamPublished returns the header fields of a stream whose response
// ended with err: a failed call's metadata, then the response's headers,
// then its trailers.
func streamPublished(err error, s connect.StreamingClientConn) ratelimit.Fields {
	return func(name string) []string {
		if ce := new(connect.Error); err != nil && !errors.Is(err, io.EOF) && errors.As(err, &ce) {
			if v := ce.Meta().Values(name); len(v) > 0 {
				return v
			}
		}
		if v := s.ResponseHeader().Values(name); len(v) > 0 {
			return v
		}
		return s.ResponseTrailer().Values(name)
	}
}

// Metadata returns nil: connect v1 puts a failed call's metadata in its
// error, where the classifier finds it.
func (c *conn) Metadata() engine.Metadata { return nil }

// WaitHeader waits for the response headers: connect's ResponseHeader
// blocks until they arrive, or the response ends.
func (c *conn) WaitHeader() { _ = c.ResponseHeader() }

// streamPushback returns the values of the pushback header of a stream
// whose response ended with err: connect puts a failed call's trailers in
// its error's metadata; the stream's trailer holds them otherwise.
func streamPushback(err error, trailer http.Header) []string {
	// The end of a stream is no failure: connect v1 may end one with a
	// connect error that wraps io.EOF, one value shared by every stream,
	// whose Meta is not safe to call from two at once.
	if ce := new(connect.Error); err != nil && !errors.Is(err, io.EOF) && errors.As(err, &ce) {
		if v := ce.Meta()[pushbackKey]; v != nil {
			return v
		}
	}
	return trailer[pushbackKey]
}

// stream is a streaming call under a retry policy. The request header and
// the peer are the first attempt's; Send, Receive and the close methods
// are the engine's, which see them to the attempt in flight.
type stream struct {
	s     *engine.Stream
	first connect.StreamingClientConn
}

func (c *stream) Spec() connect.Spec         { return c.first.Spec() }
func (c *stream) Peer() connect.Peer         { return c.first.Peer() }
func (c *stream) RequestHeader() http.Header { return c.first.RequestHeader() }
func (c *stream) Send(msg any) error         { return c.s.Send(msg) }
func (c *stream) CloseRequest() error        { return c.s.CloseSend() }
func (c *stream) Receive(msg any) error      { return c.s.Receive(msg) }
func (c *stream) CloseResponse() error       { return c.s.CloseResponse() }

// ResponseHeader returns the response headers of the attempt in flight:
// headers handed to the application commit the call to it.
func (c *stream) ResponseHeader() http.Header {
	c.s.Commit("response header read")
	if cc, ok := c.s.Current().(*conn); ok {
		return cc.ResponseHeader()
	}
	return http.Header{} // the gates kept the attempt home
}

// ResponseTrailer returns the response trailer of the attempt in flight,
// which it commits the call to.
func (c *stream) ResponseTrailer() http.Header {
	c.s.Commit("response trailer read")
	if cc, ok := c.s.Current().(*conn); ok {
		return cc.ResponseTrailer()
	}
	return http.Header{}
}

// onceConn is a stream that is not retried but whose end the engine must
// hear of (see engine.Once).
type onceConn struct {
	connect.StreamingClientConn
	once *engine.Once
}

func (c *onceConn) Receive(m any) error {
	err := c.StreamingClientConn.Receive(m)
	if err != nil {
		if c.once.ReadsQuota() {
			c.once.Published(streamPublished(err, c.StreamingClientConn))
		}
		c.once.Ended(err, streamPushback(err, c.ResponseTrailer()))
	}
	return err
}

func (c *onceConn) CloseResponse() error {
	err := c.StreamingClientConn.CloseResponse()
	c.once.Closed()
	return err
}

// errConn is a stream that fails every operation with err, for an
// Interceptor with an invalid option. Nothing is sent.
type errConn struct {
	spec                     connect.Spec
	err                      error
	request, header, trailer http.Header
}

func newErrConn(spec connect.Spec, err error) *errConn {
	return &errConn{spec: spec, err: err, request: make(http.Header), header: make(http.Header), trailer: make(http.Header)}
}

func (c *errConn) Spec() connect.Spec           { return c.spec }
func (c *errConn) Peer() connect.Peer           { return connect.Peer{} }
func (c *errConn) Send(any) error               { return c.err }
func (c *errConn) CloseRequest() error          { return c.err }
func (c *errConn) Receive(any) error            { return c.err }
func (c *errConn) CloseResponse() error         { return c.err }
func (c *errConn) RequestHeader() http.Header   { return c.request }
func (c *errConn) ResponseHeader() http.Header  { return c.header }
func (c *errConn) ResponseTrailer() http.Header { return c.trailer }
