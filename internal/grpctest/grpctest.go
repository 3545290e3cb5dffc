// Package grpctest runs a real grpc-go server on 127.0.0.1 for tests,
// benchmarks and the demo: grpc-go's own grpc.testing.TestService whose
// handlers a test scripts, recording every attempt the server sees.
package grpctest

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

// Service is the full name of the test service.
const Service = "grpc.testing.TestService"

// Full method names of the test service.
const (
	UnaryCall           = "/" + Service + "/UnaryCall"
	StreamingOutputCall = "/" + Service + "/StreamingOutputCall"
	StreamingInputCall  = "/" + Service + "/StreamingInputCall"
	FullDuplexCall      = "/" + Service + "/FullDuplexCall"
)

// Attempt is one call as the server saw it.
type Attempt struct {
	// N counts the calls of the method the server has seen, from 1.
	N int
	// Previous is the grpc-previous-rpc-attempts header, -1 when absent.
	Previous int
	// Payload is the request's payload body (the first message's for
	// client streams).
	Payload string
}

// Handlers script the server; a nil handler answers OK with an empty
// response. The n argument is Attempt.N.
type Handlers struct {
	Unary        func(ctx context.Context, n int, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error)
	ServerStream func(n int, req *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error
	ClientStream func(n int, s grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error
	Bidi         func(n int, s grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error
}

// Server is a running test server.
type Server struct {
	testpb.UnimplementedTestServiceServer

	// Addr is the server's 127.0.0.1 address.
	Addr string

	srv *grpc.Server
	lis net.Listener

	mu       sync.Mutex
	handlers Handlers
	attempts map[string][]Attempt
}

// Start starts a server with h on a free 127.0.0.1 port; it stops when the
// test ends.
func Start(t testing.TB, h Handlers, opts ...grpc.ServerOption) *Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return Serve(t, lis, h, opts...)
}

// Serve starts a server with h on lis; it stops when the test ends.
func Serve(t testing.TB, lis net.Listener, h Handlers, opts ...grpc.ServerOption) *Server {
	t.Helper()
	s := &Server{Addr: lis.Addr().String(), srv: grpc.NewServer(opts...), lis: lis, handlers: h, attempts: map[string][]Attempt{}}
	testpb.RegisterTestServiceServer(s.srv, s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.srv.Serve(lis)
	}()
	t.Cleanup(func() {
		s.srv.Stop()
		<-done
	})
	return s
}

// SetHandlers replaces the handlers.
func (s *Server) SetHandlers(h Handlers) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handlers = h
}

// Attempts returns the attempts the server has seen of a full method name.
func (s *Server) Attempts(method string) []Attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Attempt(nil), s.attempts[method]...)
}

// Count returns the number of attempts of a full method name.
func (s *Server) Count(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.attempts[method])
}

// Dial returns a client for the server, closed when the test ends.
func (s *Server) Dial(t testing.TB, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(s.Addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func (s *Server) record(ctx context.Context, method, payload string) (int, Handlers) {
	prev := -1
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("grpc-previous-rpc-attempts"); len(v) == 1 {
			if n, err := strconv.Atoi(v[0]); err == nil {
				prev = n
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.attempts[method]) + 1
	s.attempts[method] = append(s.attempts[method], Attempt{N: n, Previous: prev, Payload: payload})
	return n, s.handlers
}

func payloadOf(p *testpb.Payload) string {
	if p == nil {
		return ""
	}
	return string(p.GetBody())
}

// UnaryCall implements the test service.
func (s *Server) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	n, h := s.record(ctx, UnaryCall, payloadOf(req.GetPayload()))
	if h.Unary == nil {
		return &testpb.SimpleResponse{}, nil
	}
	return h.Unary(ctx, n, req)
}

// StreamingOutputCall implements the test service.
func (s *Server) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, st grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	n, h := s.record(st.Context(), StreamingOutputCall, payloadOf(req.GetPayload()))
	if h.ServerStream == nil {
		return nil
	}
	return h.ServerStream(n, req, st)
}

// StreamingInputCall implements the test service.
func (s *Server) StreamingInputCall(st grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
	n, h := s.record(st.Context(), StreamingInputCall, "")
	if h.ClientStream == nil {
		return st.SendAndClose(&testpb.StreamingInputCallResponse{})
	}
	return h.ClientStream(n, st)
}

// FullDuplexCall implements the test service.
func (s *Server) FullDuplexCall(st grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	n, h := s.record(st.Context(), FullDuplexCall, "")
	if h.Bidi == nil {
		return nil
	}
	return h.Bidi(n, st)
}

// Request returns a unary request carrying body.
func Request(body string) *testpb.SimpleRequest {
	return &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(body)}}
}
