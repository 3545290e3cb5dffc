package suite

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"connectrpc.com/connect/v2/connectinprocess"
	"connectrpc.com/connect/v2/connectproto"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/protobuf/types/known/wrapperspb"

	connectretry "github.com/rebound-go/rebound/connectretry/v2"
	"github.com/rebound-go/rebound/serviceconfig"
)

// v2 is connect-go v2 and connectretry/v2.
var v2 = &major{
	name:      "v2",
	scope:     "github.com/rebound-go/rebound/connectretry/v2",
	protocols: []protocol{connectHTTP1, grpcH2C, grpcwebHTTP1, inprocess},
	serve:     serveV2,
	newInterceptor: func(cfg *serviceconfig.Config, opts ...option) (interceptor, error) {
		return connectretry.New(cfg, v2Options(opts)...)
	},
	mustInterceptor: func(cfg *serviceconfig.Config, opts ...option) interceptor {
		return connectretry.NewInterceptor(cfg, v2Options(opts)...)
	},
	zero: func() interceptor { return &connectretry.Interceptor{} },
	dial: func(t testing.TB, s *server, p protocol, i interceptor) clients { return dialV2(t, s, p, i) },
	dialInject: func(t testing.TB, s *server, p protocol, i interceptor) clients {
		return dialV2(t, s, p, i, injectV2)
	},
	codeOf: func(err error) code {
		return code(connect.CodeOf(err))
	},
	remote: func(err error) bool {
		ce, ok := errors.AsType[*connect.Error](err)
		return ok && ce.IsRemote()
	},
	lastError: func(err error) (string, []string) {
		ce, ok := errors.AsType[*connect.Error](err)
		if !ok {
			return "", nil
		}
		var details []string
		for _, d := range ce.Details() {
			if m, err := connectproto.UnmarshalErrorDetail(d); err == nil {
				if s, ok := m.(*wrapperspb.StringValue); ok {
					details = append(details, s.GetValue())
				}
			}
		}
		return ce.Message(), details
	},
	countAttempts: connectretry.CountAttempts,
	override:      connectretry.Override,
}

func init() { majors = append(majors, v2) }

func v2Options(opts []option) []connectretry.Option {
	out := make([]connectretry.Option, len(opts))
	for i, o := range opts {
		out[i], _ = o.v2.(connectretry.Option)
	}
	return out
}

// v2Error turns a handler's error into connect v2's: a failure becomes a
// *connect.Error with its code, message and details, and its metadata goes
// to the response trailer, where v2 keeps it.
func v2Error(ctx context.Context, err error) error {
	var f *failure
	if !errors.As(err, &f) {
		return err
	}
	e := connect.NewError(connect.Code(f.code), f.msg)
	for _, d := range f.details {
		detail, derr := connectproto.NewErrorDetail(d)
		if derr != nil {
			return derr
		}
		e = e.WithDetail(detail)
	}
	if info, ok := connect.CallInfoForServerContext(ctx); ok {
		for k, vs := range f.meta {
			for _, v := range vs {
				info.ResponseTrailer().Add(k, v)
			}
		}
	}
	return e
}

// v2Call is what a v2 handler's call looks like to the scripted handlers.
func v2Call(ctx context.Context, value string) *call {
	info, _ := connect.CallInfoForServerContext(ctx)
	h := http.Header{}
	for k, v := range info.RequestHeader().All() {
		h[k] = append([]string(nil), v...)
	}
	prev := -1
	if len(h.Values("Grpc-Previous-Rpc-Attempts")) > 0 {
		prev = connectretry.PreviousAttempts(ctx)
	}
	return &call{ctx: ctx, header: h, value: value, previous: prev,
		setHeader: info.ResponseHeader().Set, setTrailer: info.ResponseTrailer().Set}
}

// v2Server returns the test service as a connect v2 Server.
func v2Server(s *server) *connect.Server {
	srv := connect.NewServer()
	recv := func(st connect.ServerStream) func() (string, error) {
		return func() (string, error) {
			var m msg
			if err := st.Receive(&m); err != nil {
				return "", err
			}
			return m.GetValue(), nil
		}
	}
	send := func(st connect.ServerStream) func(string) error {
		return func(v string) error { return st.Send(wrapperspb.String(v)) }
	}
	srv.Register(
		connect.Method{Spec: v2Spec(unary), Handler: func(ctx context.Context, _ connect.Spec, st connect.ServerStream) error {
			var req msg
			if err := st.Receive(&req); err != nil {
				return err
			}
			v, err := s.unary(v2Call(ctx, req.GetValue()))
			if err != nil {
				return v2Error(ctx, err)
			}
			return st.Send(wrapperspb.String(v))
		}},
		connect.Method{Spec: v2Spec(serverStream), Handler: func(ctx context.Context, _ connect.Spec, st connect.ServerStream) error {
			var req msg
			if err := st.Receive(&req); err != nil {
				return err
			}
			c := v2Call(ctx, req.GetValue())
			c.sendHeaders = st.SendHeaders
			return v2Error(ctx, s.serverStream(c, send(st)))
		}},
		connect.Method{Spec: v2Spec(clientStream), Handler: func(ctx context.Context, _ connect.Spec, st connect.ServerStream) error {
			v, err := s.clientStream(v2Call(ctx, ""), recv(st))
			if err != nil {
				return v2Error(ctx, err)
			}
			return st.Send(wrapperspb.String(v))
		}},
		connect.Method{Spec: v2Spec(bidiStream), Handler: func(ctx context.Context, _ connect.Spec, st connect.ServerStream) error {
			c := v2Call(ctx, "")
			c.sendHeaders = st.SendHeaders
			return v2Error(ctx, s.bidi(c, recv(st), send(st)))
		}},
	)
	return srv
}

// v2Spec returns the Spec of procedure, as generated code would.
func v2Spec(procedure string) connect.Spec {
	switch procedure {
	case unary:
		return connect.Spec{Procedure: procedure, StreamType: connect.StreamTypeUnary, IdempotencyLevel: connect.IdempotencyNoSideEffects}
	case serverStream:
		return connect.Spec{Procedure: procedure, StreamType: connect.StreamTypeServer}
	case clientStream:
		return connect.Spec{Procedure: procedure, StreamType: connect.StreamTypeClient}
	}
	return connect.Spec{Procedure: procedure, StreamType: connect.StreamTypeBidi}
}

func serveV2(t testing.TB, s *server, tr transport) {
	t.Helper()
	srv := v2Server(s)
	if tr == inProcess {
		s.local = srv
		return
	}
	mux := http.NewServeMux()
	connecthttp.Mount(mux, srv)
	s.url, s.client = serveHTTP(t, mux, tr)
}

// v2Clients call the test service through one interceptor.
type v2Clients struct{ c *connect.Client }

// v2Transport returns the transport of p to s.
func v2Transport(s *server, p protocol) connect.Transport {
	switch p.name {
	case "inprocess":
		return connectinprocess.New(s.local.(*connect.Server))
	case "grpc":
		return connecthttp.NewTransport(s.client, s.url, connecthttp.WithGRPC())
	case "grpcweb":
		return connecthttp.NewTransport(s.client, s.url, connecthttp.WithGRPCWeb())
	}
	return connecthttp.NewTransport(s.client, s.url)
}

func dialV2(t testing.TB, s *server, p protocol, i interceptor, after ...connect.ClientInterceptor) clients {
	t.Helper()
	return v2Clients{connect.NewClient(v2Transport(s, p), append([]connect.ClientInterceptor{i.(*connectretry.Interceptor).WrapClient}, after...)...)}
}

// injectV2 is what otelconnect does, in small: it sends the trace context
// of the attempt's span in a traceparent header. Installed after
// rebound's interceptor, it runs once per attempt.
func injectV2(next connect.ClientFunc) connect.ClientFunc {
	return func(ctx context.Context, spec connect.Spec) (connect.ClientStream, error) {
		if info, ok := connect.CallInfoForClientContext(ctx); ok {
			h := http.Header{}
			propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
			for k, v := range h {
				info.RequestHeader().SetValues(k, v)
			}
		}
		return next(ctx, spec)
	}
}

// v2Context returns ctx with a CallInfo carrying request header h.
func v2Context(ctx context.Context, h http.Header) (context.Context, *connect.CallInfo) {
	ctx, info := connect.NewClientContext(ctx)
	for k, vs := range h {
		for _, v := range vs {
			info.RequestHeader().Add(k, v)
		}
	}
	return ctx, info
}

// v2Meta returns the response header and trailer of info together.
func v2Meta(info *connect.CallInfo) http.Header {
	h := http.Header{}
	for k, v := range info.ResponseHeader().All() {
		h[k] = append(h[k], v...)
	}
	for k, v := range info.ResponseTrailer().All() {
		h[k] = append(h[k], v...)
	}
	return h
}

func (c v2Clients) unary(ctx context.Context, value string, h http.Header) (result, error) {
	ctx, info := v2Context(ctx, h)
	var res msg
	err := c.c.CallUnary(ctx, v2Spec(unary), wrapperspb.String(value), &res)
	r := result{meta: v2Meta(info)}
	if err == nil {
		r.value = res.GetValue()
	}
	return r, err
}

func (c v2Clients) open(ctx context.Context, procedure, value string, h http.Header) (stream, error) {
	ctx, info := v2Context(ctx, h)
	var (
		st  connect.ClientStream
		err error
	)
	if procedure == serverStream {
		st, err = c.c.CallServerStream(ctx, v2Spec(procedure), wrapperspb.String(value))
	} else {
		st, err = c.c.CallClientStream(ctx, v2Spec(procedure))
	}
	if err != nil {
		return nil, err
	}
	return &v2Stream{st: st, info: info}, nil
}

// v2Stream is a stream of connect v2.
type v2Stream struct {
	st   connect.ClientStream
	info *connect.CallInfo
}

func (s *v2Stream) Send(v string) error { return s.st.Send(wrapperspb.String(v)) }
func (s *v2Stream) CloseSend() error    { return s.st.CloseSend() }
func (s *v2Stream) Close() error        { return s.st.Close() }

// Header returns the CallInfo's response header: connect v2 fills it in
// once a Receive has returned.
func (s *v2Stream) Header() http.Header {
	h := http.Header{}
	for k, v := range s.info.ResponseHeader().All() {
		h[k] = append([]string(nil), v...)
	}
	return h
}

func (s *v2Stream) Receive() (string, error) {
	var m msg
	if err := s.st.Receive(&m); err != nil {
		if errors.Is(err, io.EOF) {
			return "", io.EOF
		}
		return "", err
	}
	return m.GetValue(), nil
}
