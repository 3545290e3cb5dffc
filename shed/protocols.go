package shed

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// pushbackHeader is gRFC A6's pushback trailer.
const pushbackHeader = "grpc-retry-pushback-ms"

// retryInfoType is the type of google.rpc.RetryInfo, a server's own
// "retry after" in an error's details.
const retryInfoType = "google.rpc.RetryInfo"

// grpcOverloaded says whether a handler's error is a sign of overload.
func grpcOverloaded(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted:
		return true
	}
	return false
}

// grpcRetryInfo says whether err's status details carry a RetryInfo.
func grpcRetryInfo(err error) bool {
	st, _ := status.FromError(err)
	for _, d := range st.Proto().GetDetails() {
		if d.GetTypeUrl() == "type.googleapis.com/"+retryInfoType {
			return true
		}
	}
	return false
}

// rejectGRPC is the status of a shed gRPC request. UNAVAILABLE rather than
// RESOURCE_EXHAUSTED: A6 clients retry only the codes their policy lists,
// UNAVAILABLE is the one nearly every policy lists, and the pushback
// decides whether they should.
func rejectGRPC() error {
	return status.Error(codes.Unavailable, ErrOverloaded.Error())
}

func (s *Shedder) grpcPeer(ctx context.Context) uint64 {
	if p, ok := peer.FromContext(ctx); ok {
		return s.peerOfAddr(p.Addr)
	}
	return 0
}

// endGRPC ends r, which ended with err within ctx; a failure that is a
// sign of overload, with no pushback of its own (in a trailer the
// handler set, or a RetryInfo), gets one through setTrailer.
func (r *request) endGRPC(ctx context.Context, err error, own bool, setTrailer func(metadata.MD)) {
	switch {
	case err == nil && ctx.Err() == nil:
		r.end(Served)
		return
	case ctx.Err() == nil && grpcOverloaded(err) && !own && !grpcRetryInfo(err):
		pb := r.refuse()
		setTrailer(metadata.Pairs(pushbackHeader, pb.Millis()))
	}
	r.end(Failed)
}

// hasPushback says whether md holds a pushback.
func hasPushback(md metadata.MD) bool { return len(md.Get(pushbackHeader)) > 0 }

// grpcUnary is an admitted unary call: the request, and the transport
// stream its handler sets trailers on, watched for a pushback of the
// handler's own.
type grpcUnary struct {
	request
	grpc.ServerTransportStream
	ctx requestContext
	own atomic.Bool
}

func (g *grpcUnary) SetTrailer(md metadata.MD) error {
	if hasPushback(md) {
		g.own.Store(true)
	}
	return g.ServerTransportStream.SetTrailer(md)
}

// UnaryServerInterceptor returns a grpc-go interceptor that sheds unary
// calls beyond the limit with UNAVAILABLE and a grpc-retry-pushback-ms
// trailer. A handler's own failure with UNAVAILABLE or RESOURCE_EXHAUSTED
// and no pushback of its own (a grpc-retry-pushback-ms trailer, a
// google.rpc.RetryInfo detail) gets the pushback the Shedder gives what it
// sheds. Each method has a baseline latency of its own. It is safe for
// concurrent use.
func (s *Shedder) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		g := new(grpcUnary)
		if pb, ok := s.admit(info.FullMethod, nil, s.grpcPeer(ctx), &g.request); !ok {
			_ = grpc.SetTrailer(ctx, metadata.Pairs(pushbackHeader, pb.Millis()))
			return nil, rejectGRPC()
		}
		inner := grpc.ServerTransportStreamFromContext(ctx)
		g.ctx = requestContext{ctx, &g.request}
		var hctx context.Context = &g.ctx
		if inner != nil {
			g.ServerTransportStream = inner
			hctx = grpc.NewContextWithServerTransportStream(hctx, g)
		}
		// Deferred, so that a handler that panics (and a recovery
		// interceptor further out) still gives its slot back.
		returned := false
		defer func() {
			if !returned {
				g.end(Failed)
				return
			}
			g.endGRPC(ctx, err, g.own.Load(), func(md metadata.MD) {
				if inner != nil {
					_ = inner.SetTrailer(md)
				}
			})
		}()
		resp, err = handler(hctx, req)
		returned = true
		return resp, err
	}
}

// grpcStream is an admitted stream: its waits for the client's messages
// and for room to send are not the server's work.
type grpcStream struct {
	grpc.ServerStream
	request
	ctx  requestContext
	hctx context.Context // ctx, with ts as its transport stream
	ts   watchedStream
	own  atomic.Bool
}

func (g *grpcStream) Context() context.Context { return g.hctx }

// watchedStream is a stream's transport stream, for grpc.SetTrailer on
// the stream's context: it notes a pushback the handler sets there.
type watchedStream struct {
	grpc.ServerTransportStream
	own *atomic.Bool
}

func (w *watchedStream) SetTrailer(md metadata.MD) error {
	if hasPushback(md) {
		w.own.Store(true)
	}
	return w.ServerTransportStream.SetTrailer(md)
}

func (g *grpcStream) RecvMsg(m any) error {
	g.wait()
	defer g.unwait()
	return g.ServerStream.RecvMsg(m)
}

func (g *grpcStream) SendMsg(m any) error {
	g.wait()
	defer g.unwait()
	return g.ServerStream.SendMsg(m)
}

func (g *grpcStream) SetTrailer(md metadata.MD) {
	if hasPushback(md) {
		g.own.Store(true)
	}
	g.ServerStream.SetTrailer(md)
}

// StreamServerInterceptor returns a grpc-go interceptor that sheds
// streams beyond the limit as [Shedder.UnaryServerInterceptor] sheds
// calls. A stream holds its slot until its handler returns, except while
// it waits on its client, in RecvMsg for a message that has not come or
// in SendMsg for a client that does not read: that time is neither a slot
// held nor latency. It is safe for concurrent use.
func (s *Shedder) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		g := &grpcStream{ServerStream: ss}
		ctx := ss.Context()
		if pb, ok := s.admit(info.FullMethod, nil, s.grpcPeer(ctx), &g.request); !ok {
			ss.SetTrailer(metadata.Pairs(pushbackHeader, pb.Millis()))
			return rejectGRPC()
		}
		g.ctx = requestContext{ctx, &g.request}
		g.hctx = &g.ctx
		if inner := grpc.ServerTransportStreamFromContext(ctx); inner != nil {
			g.ts = watchedStream{inner, &g.own}
			g.hctx = grpc.NewContextWithServerTransportStream(g.hctx, &g.ts)
		}
		returned := false
		defer func() {
			if !returned {
				g.end(Failed)
				return
			}
			g.endGRPC(ctx, err, g.own.Load(), ss.SetTrailer)
		}()
		err = handler(srv, g)
		returned = true
		return err
	}
}

// ConnectInterceptor returns a connect-go interceptor that sheds handler
// calls beyond the limit with CodeUnavailable and the pushback in the
// error's metadata as grpc-retry-pushback-ms, which connectretry reads in
// every protocol (Connect, gRPC, gRPC-Web). A handler's own failure with
// CodeUnavailable or CodeResourceExhausted and no pushback of its own
// gets one, as from [Shedder.UnaryServerInterceptor]; a streaming
// handler's waits on its client (Receive, Send) hold no slot. Each
// procedure has a baseline latency of its own. Client calls pass through.
// It is safe for concurrent use. It is for connect-go v1; for v2, see
// package shed/connectshed.
func (s *Shedder) ConnectInterceptor() connect.Interceptor { return connectInterceptor{s} }

type connectInterceptor struct{ s *Shedder }

func connectReject(pb Pushback) error {
	e := connect.NewError(connect.CodeUnavailable, ErrOverloaded)
	e.Meta().Set(pushbackHeader, pb.Millis())
	return e
}

func connectOverloaded(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeResourceExhausted:
		return true
	}
	return false
}

// endConnect ends r, whose handler returned err within ctx, and returns
// the error to send: a sign of overload without a pushback of its own (in
// its metadata, trailer or details) gets one, on a copy, since a handler
// may return the same error to every call.
func (r *request) endConnect(ctx context.Context, err error, trailer http.Header) error {
	var ce *connect.Error
	switch {
	case err == nil && ctx.Err() == nil:
		r.end(Served)
		return nil
	case ctx.Err() == nil && connectOverloaded(err) && errors.As(err, &ce) &&
		ce.Meta().Get(pushbackHeader) == "" && trailer.Get(pushbackHeader) == "" && !connectRetryInfo(ce):
		pb := r.refuse()
		e := connect.NewError(ce.Code(), ce.Unwrap())
		for _, d := range ce.Details() {
			e.AddDetail(d)
		}
		for k, v := range ce.Meta() {
			e.Meta()[k] = append([]string(nil), v...)
		}
		e.Meta().Set(pushbackHeader, pb.Millis())
		err = e
	}
	r.end(Failed)
	return err
}

func connectRetryInfo(ce *connect.Error) bool {
	for _, d := range ce.Details() {
		if d.Type() == retryInfoType {
			return true
		}
	}
	return false
}

func (c connectInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (resp connect.AnyResponse, err error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		r := new(connectUnary)
		if pb, ok := c.s.admit(req.Spec().Procedure, nil, c.s.peerOfHost(req.Peer().Addr), &r.request); !ok {
			return nil, connectReject(pb)
		}
		r.ctx = requestContext{ctx, &r.request}
		returned := false
		defer func() {
			if !returned {
				r.end(Failed)
				return
			}
			err = r.endConnect(ctx, err, nil)
			if err != nil {
				resp = nil
			}
		}()
		resp, err = next(&r.ctx, req)
		returned = true
		return resp, err
	}
}

// connectUnary is an admitted unary call.
type connectUnary struct {
	request
	ctx requestContext
}

func (c connectInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// connectConn is an admitted streaming handler's connection: its waits
// for the client's messages and for room to send are not the server's
// work.
type connectConn struct {
	connect.StreamingHandlerConn
	request
	ctx requestContext
}

func (c *connectConn) Receive(m any) error {
	c.wait()
	defer c.unwait()
	return c.StreamingHandlerConn.Receive(m)
}

func (c *connectConn) Send(m any) error {
	c.wait()
	defer c.unwait()
	return c.StreamingHandlerConn.Send(m)
}

func (c connectInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) (err error) {
		cc := &connectConn{StreamingHandlerConn: conn}
		if pb, ok := c.s.admit(conn.Spec().Procedure, nil, c.s.peerOfHost(conn.Peer().Addr), &cc.request); !ok {
			return connectReject(pb)
		}
		cc.ctx = requestContext{ctx, &cc.request}
		returned := false
		defer func() {
			if !returned {
				cc.end(Failed)
				return
			}
			err = cc.endConnect(ctx, err, conn.ResponseTrailer())
		}()
		err = next(&cc.ctx, cc)
		returned = true
		return err
	}
}

// Handler returns next behind the Shedder: a request beyond the limit gets
// 503 Service Unavailable with a Retry-After (see [Pushback.RetryAfter])
// and never reaches next. A response of 429 or 503 from next without a
// Retry-After gets the Retry-After the Shedder gives what it sheds. Time
// next spends reading a request body that has not come, or writing (and
// flushing) to a client that does not read, is neither a slot held nor
// latency. Each Handler has a baseline latency of its own: wrap each
// route apart when their work differs. It is safe for concurrent use.
func (s *Shedder) Handler(next http.Handler) http.Handler {
	s.mu.Lock()
	m := s.lim.NewMethod()
	s.mu.Unlock()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hw := &httpWriter{ResponseWriter: w}
		if pb, ok := s.admit("", m, s.peerOfHost(r.RemoteAddr), &hw.request); !ok {
			w.Header().Set("Retry-After", pb.RetryAfter(s.float64()))
			http.Error(w, ErrOverloaded.Error(), http.StatusServiceUnavailable)
			return
		}
		ctx := r.Context()
		hw.ctx = requestContext{ctx, &hw.request}
		r = r.WithContext(&hw.ctx)
		if r.Body != nil && r.Body != http.NoBody {
			hw.body = r.Body
			r.Body = (*httpBody)(hw)
		}
		returned := false
		defer func() {
			o := Failed
			if returned && (hw.code == 0 || hw.code < 400) && ctx.Err() == nil {
				o = Served
			}
			hw.end(o)
		}()
		next.ServeHTTP(hw, r)
		returned = true
	})
}

// httpWriter is an admitted HTTP request: its response writer, which notes
// the status next writes, and its body.
type httpWriter struct {
	http.ResponseWriter
	request
	ctx  requestContext
	code int
	body io.ReadCloser
}

func (w *httpWriter) WriteHeader(code int) {
	if w.code == 0 && code >= 200 {
		w.code = code
		if (code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable) && w.Header().Get("Retry-After") == "" && w.ctx.Err() == nil {
			pb := w.refuse()
			w.Header().Set("Retry-After", pb.RetryAfter(w.s.float64()))
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *httpWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.wait()
	defer w.unwait()
	return w.ResponseWriter.Write(b)
}

func (w *httpWriter) Flush() { _ = w.FlushError() }

// FlushError is what http.ResponseController calls to flush.
func (w *httpWriter) FlushError() error {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.wait()
	defer w.unwait()
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the writer beneath.
func (w *httpWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// httpBody is an admitted request's body: waiting for it is not the
// server's work.
type httpBody httpWriter

func (b *httpBody) Read(p []byte) (int, error) {
	w := (*httpWriter)(b)
	w.wait()
	defer w.unwait()
	return w.body.Read(p)
}

func (b *httpBody) Close() error { return b.body.Close() }
