package connectretry

import (
	"context"

	"connectrpc.com/connect/v2"

	"github.com/rebound-go/rebound/connectretry/internal/engine"
)

// stream opens a streaming call. A call under a retry policy gets an
// engine.Stream; any other is connect's own, watched when the engine must
// hear of its end.
func (i *Interceptor) stream(ctx context.Context, next connect.ClientFunc, spec connect.Spec) (connect.ClientStream, error) {
	e := i.engine()
	sp, err := e.PlanStream(ctx, spec.Procedure)
	if err != nil {
		return nil, err
	}
	caller := callInfo(ctx)
	if !sp.Governed() {
		s, err := next(sp.Context(), spec)
		if err != nil {
			sp.Release()
			return nil, err
		}
		var addr string
		if caller != nil {
			addr = caller.PeerAddr
		}
		o, err := e.OnceStream(&sp, addr)
		switch {
		case err != nil:
			// connect makes the request on the first write or close:
			// the stream is dropped unsent.
			return nil, err
		case o == nil:
			return s, nil
		}
		return &onceStream{ClientStream: s, once: o, info: caller}, nil
	}
	st, err := e.OpenStream(&sp, spec.Procedure, &opener{next: next, spec: spec, caller: caller})
	if err != nil {
		return nil, err
	}
	return &stream{s: st, caller: caller}, nil
}

// opener opens the attempts of a retried stream. The first runs on the
// caller's connect.CallInfo; a later one gets a CallInfo of its own, with a
// copy of the caller's request header and the attempts header.
type opener struct {
	next   connect.ClientFunc
	spec   connect.Spec
	caller *connect.CallInfo
}

func (o *opener) Open(ctx context.Context, n int) (engine.Conn, string, error) {
	info := o.caller
	if n > 1 || info == nil {
		ctx, info = attemptInfo(ctx, o.caller, n-1)
	}
	s, err := o.next(ctx, o.spec)
	if err != nil {
		return nil, "", err
	}
	return &conn{ClientStream: s, ctx: ctx, info: info}, info.PeerAddr, nil
}

// conn is one attempt's stream, as the engine sees it, with its CallInfo.
//
// Once the attempt's context has ended (its timer cut it, or the caller
// gave up), its CallInfo is not read: there is no answer to read, and
// connectinprocess may still be writing it from the server's goroutine.
type conn struct {
	connect.ClientStream
	ctx    context.Context // the attempt's
	info   *connect.CallInfo
	synced bool // its response header has been copied to the caller's CallInfo
}

// answered reports whether the attempt's CallInfo holds its answer.
func (c *conn) answered() bool { return c.ctx.Err() == nil }

func (c *conn) CloseResponse() error { return c.Close() }
func (c *conn) Abort()               { _ = c.Close() }

// Pushback returns the values of the pushback header of the attempt's
// answer, which connect v2 keeps in its CallInfo, not in its error.
func (c *conn) Pushback(error) []string {
	if !c.answered() {
		return nil
	}
	return pushbackOf(c.info)
}

// pushbackOf returns the values of the pushback header of the answer info
// holds: its trailer's, or else its header's, where a connect v1 server
// puts the metadata of a Connect protocol unary error.
func pushbackOf(info *connect.CallInfo) []string {
	if v := info.ResponseTrailer().Values(engine.PushbackHeader); v != nil {
		return v
	}
	return info.ResponseHeader().Values(engine.PushbackHeader)
}

// Metadata returns the attempt's CallInfo, whose response header and
// trailer the classifier is shown.
func (c *conn) Metadata() engine.Metadata {
	if !c.answered() {
		return nil
	}
	return c.info
}

// stream is a streaming call under a retry policy: the engine's, with the
// CallInfo of the attempt it commits to copied into the caller's.
type stream struct {
	s      *engine.Stream
	caller *connect.CallInfo
}

func (w *stream) SendHeaders() error { return w.s.SendHeaders() }

func (w *stream) Send(msg any) error { return w.s.Send(msg) }

func (w *stream) CloseSend() error { return w.s.CloseSend() }

// Receive receives the next message. Reading to the end, or to an error,
// releases the call, as connect's own streams do: a caller need not Close
// after.
func (w *stream) Receive(msg any) error {
	err := w.s.Receive(msg)
	w.sync(err != nil)
	if err != nil {
		_ = w.s.CloseResponse()
	}
	return err
}

func (w *stream) Close() error {
	err := w.s.CloseResponse()
	w.sync(true)
	return err
}

// current returns the attempt in flight when it is not on the caller's
// CallInfo: a retry, whose CallInfo is its own.
func (w *stream) current() *conn {
	c, ok := w.s.Current().(*conn)
	if !ok || w.caller == nil || c.info == w.caller {
		return nil
	}
	return c
}

// sync copies what the attempt in flight has received into the caller's
// CallInfo, when it is a retry: its response header and trailer once its
// response has ended, and its header at its first message already when
// its transport writes the CallInfo only in Receive (connecthttp, whose
// ClientInfo tells the response status). connectinprocess writes it from
// the server's goroutine as the handler returns, so there the CallInfo
// holds the answer only once the response has ended, retried or not.
func (w *stream) sync(ended bool) {
	c := w.current()
	if c == nil || !c.answered() {
		return
	}
	_, http := c.info.TransportInfo.(interface{ ResponseStatus() int })
	if !ended && (!http || c.synced) {
		return
	}
	c.synced = true
	copyOpened(w.caller, c.info)
	w.caller.ReceiveStats = c.info.ReceiveStats
	replaceHeader(w.caller.ResponseHeader(), c.info.ResponseHeader())
	replaceHeader(w.caller.ResponseTrailer(), c.info.ResponseTrailer())
}

// onceStream is a stream that is not retried but whose end the engine
// must hear of (see engine.Once). connect's streams end at io.EOF without
// a Close, so both ends count.
type onceStream struct {
	connect.ClientStream
	once *engine.Once
	info *connect.CallInfo // the caller's, where the trailer arrives; nil without one
}

func (c *onceStream) Receive(m any) error {
	err := c.ClientStream.Receive(m)
	if err != nil {
		var pushback []string
		if c.info != nil {
			pushback = pushbackOf(c.info)
		}
		c.once.Ended(err, pushback)
		c.once.Closed()
	}
	return err
}

func (c *onceStream) Close() error {
	err := c.ClientStream.Close()
	c.once.Closed()
	return err
}
