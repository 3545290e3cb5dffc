package shed

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// pushbackHeader is gRFC A6's pushback trailer.
const pushbackHeader = "grpc-retry-pushback-ms"

// grpcOverloaded says whether a handler's error is a sign of overload.
func grpcOverloaded(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted:
		return true
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

// UnaryServerInterceptor returns a grpc-go interceptor that sheds unary
// calls beyond the limit with UNAVAILABLE and a grpc-retry-pushback-ms
// trailer. It is safe for concurrent use.
func (s *Shedder) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		done, pb := s.Admit()
		if done == nil {
			_ = grpc.SetTrailer(ctx, metadata.Pairs(pushbackHeader, pb.Millis()))
			return nil, rejectGRPC()
		}
		// Deferred, so that a handler that panics (and a recovery
		// interceptor further out) still gives its slot back.
		defer func() { done(grpcOverloaded(err)) }()
		return handler(ctx, req)
	}
}

// StreamServerInterceptor returns a grpc-go interceptor that sheds
// streams beyond the limit as [Shedder.UnaryServerInterceptor] sheds
// calls. A stream counts against the limit until its handler returns. It
// is safe for concurrent use.
func (s *Shedder) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		done, pb := s.Admit()
		if done == nil {
			ss.SetTrailer(metadata.Pairs(pushbackHeader, pb.Millis()))
			return rejectGRPC()
		}
		defer func() { done(grpcOverloaded(err)) }()
		return handler(srv, ss)
	}
}

// ConnectInterceptor returns a connect-go interceptor that sheds handler
// calls beyond the limit with CodeUnavailable and the pushback in the
// error's metadata as grpc-retry-pushback-ms, which connectretry reads in
// every protocol (Connect, gRPC, gRPC-Web). Client calls pass through. It
// is safe for concurrent use.
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

func (c connectInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (resp connect.AnyResponse, err error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		done, pb := c.s.Admit()
		if done == nil {
			return nil, connectReject(pb)
		}
		defer func() { done(connectOverloaded(err)) }()
		return next(ctx, req)
	}
}

func (c connectInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (c connectInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) (err error) {
		done, pb := c.s.Admit()
		if done == nil {
			return connectReject(pb)
		}
		defer func() { done(connectOverloaded(err)) }()
		return next(ctx, conn)
	}
}

// Handler returns next behind the Shedder: a request beyond the limit gets
// 503 Service Unavailable with Retry-After (see [Pushback.RetryAfter]) and
// never reaches next. A response of 429 or 503 from next is a sign of
// overload. It is safe for concurrent use.
func (s *Shedder) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		done, pb := s.Admit()
		if done == nil {
			w.Header().Set("Retry-After", pb.RetryAfter())
			http.Error(w, ErrOverloaded.Error(), http.StatusServiceUnavailable)
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		defer func() { done(sw.code == http.StatusTooManyRequests || sw.code == http.StatusServiceUnavailable) }()
		next.ServeHTTP(sw, r)
	})
}

// statusWriter notes the status next writes. Unwrap lets
// http.ResponseController reach the flusher and friends beneath.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
