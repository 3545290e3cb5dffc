package suite

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/serviceconfig"
)

// v1 is connect-go v1 and connectretry.
var v1 = &major{
	name:      "v1",
	scope:     "github.com/rebound-go/rebound/connectretry",
	protocols: []protocol{connectHTTP1, grpcH2C, grpcwebHTTP1},
	serve:     serveV1,
	newInterceptor: func(cfg *serviceconfig.Config, opts ...option) (interceptor, error) {
		return connectretry.New(cfg, v1Options(opts)...)
	},
	mustInterceptor: func(cfg *serviceconfig.Config, opts ...option) interceptor {
		return connectretry.NewInterceptor(cfg, v1Options(opts)...)
	},
	zero: func() interceptor { return &connectretry.Interceptor{} },
	dial: func(t testing.TB, s *server, p protocol, i interceptor) clients { return dialV1(t, s, p, i) },
	dialInject: func(t testing.TB, s *server, p protocol, i interceptor) clients {
		return dialV1(t, s, p, i, injectV1{})
	},
	codeOf: func(err error) code {
		return code(connect.CodeOf(err))
	},
	remote: connect.IsWireError,
	lastError: func(err error) (string, []string) {
		ce := new(connect.Error)
		if !errors.As(err, &ce) {
			return "", nil
		}
		var details []string
		for _, d := range ce.Details() {
			if v, err := d.Value(); err == nil {
				if s, ok := v.(*wrapperspb.StringValue); ok {
					details = append(details, s.GetValue())
				}
			}
		}
		return ce.Message(), details
	},
	countAttempts: connectretry.CountAttempts,
	override:      connectretry.Override,
}

func init() { majors = append(majors, v1) }

func v1Options(opts []option) []connectretry.Option {
	out := make([]connectretry.Option, len(opts))
	for i, o := range opts {
		out[i], _ = o.v1.(connectretry.Option)
	}
	return out
}

type msg = wrapperspb.StringValue

// v1Error turns a handler's error into connect v1's: a failure becomes a
// *connect.Error with its code, message, details and metadata.
func v1Error(err error) error {
	var f *failure
	if !errors.As(err, &f) {
		return err
	}
	e := connect.NewError(connect.Code(f.code), errors.New(f.msg))
	for _, d := range f.details {
		detail, derr := connect.NewErrorDetail(d)
		if derr != nil {
			return derr
		}
		e.AddDetail(detail)
	}
	for k, vs := range f.meta {
		for _, v := range vs {
			e.Meta().Add(k, v)
		}
	}
	return e
}

// v1Call is what a v1 handler's call looks like to the scripted handlers.
func v1Call(ctx context.Context, h http.Header, value string, header, trailer http.Header) *call {
	prev := -1
	if len(h.Values("Grpc-Previous-Rpc-Attempts")) > 0 {
		prev = connectretry.PreviousAttempts(h)
	}
	return &call{ctx: ctx, header: h, value: value, previous: prev,
		setHeader: header.Set, setTrailer: trailer.Set}
}

func serveV1(t testing.TB, s *server, tr transport) {
	t.Helper()
	if tr == inProcess {
		t.Fatal("connect v1 has no in-process transport")
	}
	mux := http.NewServeMux()
	mux.Handle(unary, connect.NewUnaryHandler(unary, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
		header, trailer := http.Header{}, http.Header{}
		v, err := s.unary(v1Call(ctx, req.Header(), req.Msg.GetValue(), header, trailer))
		if err != nil {
			err = v1Error(err)
			if ce := new(connect.Error); errors.As(err, &ce) {
				mergeInto(ce.Meta(), header)
				mergeInto(ce.Meta(), trailer)
			}
			return nil, err
		}
		resp := connect.NewResponse(wrapperspb.String(v))
		mergeInto(resp.Header(), header)
		mergeInto(resp.Trailer(), trailer)
		return resp, nil
	}, connect.WithIdempotency(connect.IdempotencyNoSideEffects)))
	mux.Handle(serverStream, connect.NewServerStreamHandler(serverStream, func(ctx context.Context, req *connect.Request[msg], st *connect.ServerStream[msg]) error {
		c := v1Call(ctx, req.Header(), req.Msg.GetValue(), st.ResponseHeader(), st.ResponseTrailer())
		c.sendHeaders = func() error { return st.Conn().Send(nil) }
		return v1Error(s.serverStream(c, func(v string) error { return st.Send(wrapperspb.String(v)) }))
	}))
	mux.Handle(clientStream, connect.NewClientStreamHandler(clientStream, func(ctx context.Context, st *connect.ClientStream[msg]) (*connect.Response[msg], error) {
		header, trailer := http.Header{}, http.Header{}
		c := v1Call(ctx, st.RequestHeader(), "", header, trailer)
		v, err := s.clientStream(c, func() (string, error) {
			if st.Receive() {
				return st.Msg().GetValue(), nil
			}
			if err := st.Err(); err != nil {
				return "", err
			}
			return "", io.EOF
		})
		if err != nil {
			return nil, v1Error(err)
		}
		resp := connect.NewResponse(wrapperspb.String(v))
		mergeInto(resp.Header(), header)
		mergeInto(resp.Trailer(), trailer)
		return resp, nil
	}))
	mux.Handle(bidiStream, connect.NewBidiStreamHandler(bidiStream, func(ctx context.Context, st *connect.BidiStream[msg, msg]) error {
		c := v1Call(ctx, st.RequestHeader(), "", st.ResponseHeader(), st.ResponseTrailer())
		c.sendHeaders = func() error { return st.Send(nil) }
		return v1Error(s.bidi(c, func() (string, error) {
			m, err := st.Receive()
			if err != nil {
				return "", err
			}
			return m.GetValue(), nil
		}, func(v string) error { return st.Send(wrapperspb.String(v)) }))
	}))
	s.url, s.client = serveHTTP(t, mux, tr)
}

// mergeInto adds src's values to dst.
func mergeInto(dst, src http.Header) {
	for k, vs := range src {
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}

// v1Clients are the clients of the test service, all through one
// interceptor.
type v1Clients struct {
	unaryC, serverStreamC, clientStreamC, bidiC *connect.Client[msg, msg]
}

func dialV1(t testing.TB, s *server, p protocol, i interceptor, after ...connect.Interceptor) clients {
	t.Helper()
	opts := []connect.ClientOption{connect.WithInterceptors(append([]connect.Interceptor{i.(*connectretry.Interceptor)}, after...)...)}
	switch p.name {
	case "grpc":
		opts = append(opts, connect.WithGRPC())
	case "grpcweb":
		opts = append(opts, connect.WithGRPCWeb())
	}
	return v1Clients{
		unaryC:        connect.NewClient[msg, msg](s.client, s.url+unary, opts...),
		serverStreamC: connect.NewClient[msg, msg](s.client, s.url+serverStream, opts...),
		clientStreamC: connect.NewClient[msg, msg](s.client, s.url+clientStream, opts...),
		bidiC:         connect.NewClient[msg, msg](s.client, s.url+bidiStream, opts...),
	}
}

func (c v1Clients) unary(ctx context.Context, value string, h http.Header) (result, error) {
	req := connect.NewRequest(wrapperspb.String(value))
	mergeInto(req.Header(), h)
	resp, err := c.unaryC.CallUnary(ctx, req)
	if err != nil {
		var r result
		if ce := new(connect.Error); errors.As(err, &ce) {
			r.meta = ce.Meta()
		}
		return r, err
	}
	meta := resp.Header().Clone()
	mergeInto(meta, resp.Trailer())
	return result{value: resp.Msg.GetValue(), meta: meta}, nil
}

func (c v1Clients) open(ctx context.Context, procedure, value string, h http.Header) (stream, error) {
	switch procedure {
	case serverStream:
		req := connect.NewRequest(wrapperspb.String(value))
		mergeInto(req.Header(), h)
		st, err := c.serverStreamC.CallServerStream(ctx, req)
		if err != nil {
			return nil, err
		}
		conn, err := st.Conn()
		if err != nil {
			return nil, err
		}
		return &v1Stream{conn: conn}, nil
	case clientStream:
		st := c.clientStreamC.CallClientStream(ctx)
		mergeInto(st.RequestHeader(), h)
		conn, err := st.Conn()
		if err != nil {
			return nil, err
		}
		return &v1Stream{conn: conn}, nil
	}
	st := c.bidiC.CallBidiStream(ctx)
	mergeInto(st.RequestHeader(), h)
	conn, err := st.Conn()
	if err != nil {
		return nil, err
	}
	return &v1Stream{conn: conn}, nil
}

// v1Stream is a stream of connect v1, driven through the interceptor's
// StreamingClientConn.
type v1Stream struct{ conn connect.StreamingClientConn }

func (s *v1Stream) Send(v string) error { return s.conn.Send(wrapperspb.String(v)) }
func (s *v1Stream) CloseSend() error    { return s.conn.CloseRequest() }
func (s *v1Stream) Header() http.Header { return s.conn.ResponseHeader() }
func (s *v1Stream) Close() error        { return s.conn.CloseResponse() }

func (s *v1Stream) Receive() (string, error) {
	var m msg
	if err := s.conn.Receive(&m); err != nil {
		return "", err
	}
	return m.GetValue(), nil
}

// injectV1 is what otelconnect does, in small: it sends the trace context
// of the attempt's span in a traceparent header. Installed after
// rebound's interceptor, it runs once per attempt.
type injectV1 struct{}

func (injectV1) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header()))
		return next(ctx, req)
	}
}

func (injectV1) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(conn.RequestHeader()))
		return conn
	}
}

func (injectV1) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
