package connectretry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/testmain"
	"github.com/rebound-go/rebound/serviceconfig"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// The test service, written by hand: its messages are protobuf well-known
// types, which connect's default codec handles.
const (
	service      = "rebound.test.v1.TestService"
	unary        = "/" + service + "/Unary"
	serverStream = "/" + service + "/ServerStream"
	clientStream = "/" + service + "/ClientStream"
	bidiStream   = "/" + service + "/Bidi"
)

type (
	msg     = wrapperspb.StringValue
	request = connect.Request[msg]
)

// handlers script the server; n is the 1-based number of the call of that
// procedure. A nil unary handler echoes the request; a nil server-stream
// handler sends the request back three times.
type handlers struct {
	unary        func(ctx context.Context, n int, req *request) (*connect.Response[msg], error)
	serverStream func(ctx context.Context, n int, req *request, s *connect.ServerStream[msg]) error
}

// attempt is one call as the server saw it.
type attempt struct {
	previous int    // grpc-previous-rpc-attempts, -1 when absent
	payload  string // the request message
	header   http.Header
}

// server is a connect handler of the test service on an httptest.Server.
type server struct {
	url    string
	client *http.Client

	mu       sync.Mutex
	h        handlers
	attempts map[string][]attempt
}

// startServer serves the test service over HTTP/2 with TLS when http2 is
// set, else over plain HTTP/1.1. It stops when the test ends.
func startServer(t testing.TB, h handlers, http2 bool) *server {
	t.Helper()
	if http2 {
		return startServerOver(t, h, overH2)
	}
	return startServerOver(t, h, overHTTP1)
}

// transport is how clients reach a test server.
type transport int

const (
	overHTTP1 transport = iota // plain HTTP/1.1
	overH2                     // HTTP/2 with TLS
	overH2C                    // cleartext HTTP/2 (h2c), with prior knowledge
)

func (tr transport) String() string { return [...]string{"http1", "h2", "h2c"}[tr] }

// startServerOver serves the test service over tr. It stops when the test
// ends.
func startServerOver(t testing.TB, h handlers, tr transport) *server {
	t.Helper()
	s := &server{h: h, attempts: map[string][]attempt{}}
	mux := http.NewServeMux()
	mux.Handle(unary, connect.NewUnaryHandler(unary, s.unary, connect.WithIdempotency(connect.IdempotencyNoSideEffects)))
	mux.Handle(serverStream, connect.NewServerStreamHandler(serverStream, s.serverStream))
	mux.Handle(clientStream, connect.NewClientStreamHandler(clientStream, s.clientStream))
	mux.Handle(bidiStream, connect.NewBidiStreamHandler(bidiStream, s.bidi))
	hs := httptest.NewUnstartedServer(mux)
	// Connections the clients drop while a test ends make the server log
	// aborted TLS handshakes; they are expected.
	hs.Config.ErrorLog = log.New(io.Discard, "", 0)
	switch tr {
	case overH2:
		hs.EnableHTTP2 = true
		hs.StartTLS()
	case overH2C:
		hs.Config.Protocols = new(http.Protocols)
		hs.Config.Protocols.SetUnencryptedHTTP2(true)
		hs.Start()
	default:
		hs.Start()
	}
	// Close also closes the idle connections of hs.Client().
	t.Cleanup(hs.Close)
	s.url, s.client = hs.URL, hs.Client()
	if tr == overH2C {
		protocols := new(http.Protocols)
		protocols.SetUnencryptedHTTP2(true)
		ht := &http.Transport{Protocols: protocols}
		t.Cleanup(ht.CloseIdleConnections)
		s.client = &http.Client{Transport: ht}
	}
	return s
}

func (s *server) record(procedure string, h http.Header, payload string) (int, handlers) {
	prev := -1
	if len(h.Values("Grpc-Previous-Rpc-Attempts")) > 0 {
		prev = connectretry.PreviousAttempts(h)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts[procedure] = append(s.attempts[procedure], attempt{prev, payload, h.Clone()})
	return len(s.attempts[procedure]), s.h
}

func (s *server) unary(ctx context.Context, req *request) (*connect.Response[msg], error) {
	n, h := s.record(unary, req.Header(), req.Msg.GetValue())
	if h.unary != nil {
		return h.unary(ctx, n, req)
	}
	return connect.NewResponse(wrapperspb.String(req.Msg.GetValue())), nil
}

func (s *server) serverStream(ctx context.Context, req *request, st *connect.ServerStream[msg]) error {
	n, h := s.record(serverStream, req.Header(), req.Msg.GetValue())
	if h.serverStream != nil {
		return h.serverStream(ctx, n, req, st)
	}
	for range 3 {
		if err := st.Send(wrapperspb.String(req.Msg.GetValue())); err != nil {
			return err
		}
	}
	return nil
}

func (s *server) clientStream(ctx context.Context, st *connect.ClientStream[msg]) (*connect.Response[msg], error) {
	s.record(clientStream, st.RequestHeader(), "")
	for st.Receive() {
	}
	return nil, connect.NewError(connect.CodeUnavailable, errors.New("client streams fail"))
}

func (s *server) bidi(ctx context.Context, st *connect.BidiStream[msg, msg]) error {
	s.record(bidiStream, st.RequestHeader(), "")
	return connect.NewError(connect.CodeUnavailable, errors.New("bidi streams fail"))
}

// count returns how many calls of procedure the server has seen.
func (s *server) count(procedure string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.attempts[procedure])
}

// seen returns the calls of procedure the server has seen.
func (s *server) seen(procedure string) []attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]attempt(nil), s.attempts[procedure]...)
}

func (s *server) previous(procedure string) []int {
	var p []int
	for _, a := range s.seen(procedure) {
		p = append(p, a.previous)
	}
	return p
}

// protocol is one way of calling the server.
type protocol struct {
	name  string
	http2 bool
	opts  []connect.ClientOption
}

// protocols are the three protocols of connect: Connect and gRPC-Web over
// HTTP/1.1, gRPC over HTTP/2.
var protocols = []protocol{
	{"connect", false, nil},
	{"grpc", true, []connect.ClientOption{connect.WithGRPC()}},
	{"grpcweb", false, []connect.ClientOption{connect.WithGRPCWeb()}},
}

var connectProtocol = protocols[0]

// clients of the test service, all through one interceptor.
type clients struct {
	unary        *connect.Client[msg, msg]
	serverStream *connect.Client[msg, msg]
	clientStream *connect.Client[msg, msg]
	bidi         *connect.Client[msg, msg]
}

func newClients(s *server, p protocol, interceptor connect.Interceptor, extra ...connect.ClientOption) clients {
	opts := append(append([]connect.ClientOption{connect.WithInterceptors(interceptor)}, p.opts...), extra...)
	return clients{
		unary:        connect.NewClient[msg, msg](s.client, s.url+unary, opts...),
		serverStream: connect.NewClient[msg, msg](s.client, s.url+serverStream, opts...),
		clientStream: connect.NewClient[msg, msg](s.client, s.url+clientStream, opts...),
		bidi:         connect.NewClient[msg, msg](s.client, s.url+bidiStream, opts...),
	}
}

// dial returns clients of s through an interceptor for cfg with an
// auto-advancing fake clock, whose sleeps it also returns, and jitter 0.5.
func dial(t testing.TB, s *server, p protocol, cfg *serviceconfig.Config, opts ...connectretry.Option) (clients, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.NewAuto()
	i, err := connectretry.New(cfg, append([]connectretry.Option{connectretry.WithClock(clk), connectretry.WithRandom(clocktest.NewRand(0.5))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return newClients(s, p, i), clk
}

// retryConfig is a service config with a retry policy on the test service.
func retryConfig(t testing.TB, maxAttempts int, codes, extra string) *serviceconfig.Config {
	t.Helper()
	return parse(t, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
		"maxAttempts":%d,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
		"retryableStatusCodes":[%s]}}]%s}`, service, maxAttempts, codes, extra))
}

// hedgeConfig is a service config with a hedging policy on the test service.
func hedgeConfig(t testing.TB, maxAttempts int, delay, codes, extra string) *serviceconfig.Config {
	t.Helper()
	return parse(t, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"hedgingPolicy":{
		"maxAttempts":%d,"hedgingDelay":%q,"nonFatalStatusCodes":[%s]}}]%s}`, service, maxAttempts, delay, codes, extra))
}

func parse(t testing.TB, js string) *serviceconfig.Config {
	t.Helper()
	cfg, err := serviceconfig.Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// failFirst fails the first n unary calls with code, then echoes.
func failFirst(n int, code connect.Code) handlers {
	return handlers{unary: func(_ context.Context, i int, req *request) (*connect.Response[msg], error) {
		if i <= n {
			return nil, connect.NewError(code, fmt.Errorf("attempt %d fails", i))
		}
		return connect.NewResponse(wrapperspb.String(fmt.Sprintf("%s from attempt %d", req.Msg.GetValue(), i))), nil
	}}
}

func call(ctx context.Context, c *connect.Client[msg, msg], value string) (*connect.Response[msg], error) {
	return c.CallUnary(ctx, connect.NewRequest(wrapperspb.String(value)))
}
