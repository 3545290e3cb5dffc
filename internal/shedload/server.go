package shedload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound/shed"
)

// Protocol is the protocol a [Server] speaks.
type Protocol int

// The protocols.
const (
	// GRPC is a grpc-go server with grpc-go's grpc.testing.TestService.
	GRPC Protocol = iota
	// Connect is a connect-go handler (the Connect protocol over HTTP/1.1).
	Connect
	// HTTP is a net/http handler.
	HTTP
)

// Protocols lists every Protocol.
var Protocols = []Protocol{GRPC, Connect, HTTP}

func (p Protocol) String() string {
	switch p {
	case GRPC:
		return "grpc"
	case Connect:
		return "connect"
	case HTTP:
		return "http"
	}
	return fmt.Sprintf("Protocol(%d)", int(p))
}

// ModeHeader is the request header (gRPC metadata) that picks what the
// service does with a request; see the Mode constants.
const ModeHeader = "x-shedload-mode"

// Modes: what the service does with a request, by its ModeHeader. An
// empty mode is the honest request: it takes a slot of the backend and
// works for [ServerConfig.Work], or whatever the current outage makes of
// it.
const (
	// ModeUnauthenticated fails at once with UNAUTHENTICATED (HTTP 401).
	ModeUnauthenticated = "unauthenticated"
	// ModeQuota fails at once with RESOURCE_EXHAUSTED (HTTP 429): a
	// quota aimed at one client.
	ModeQuota = "quota"
	// ModeShard fails at once with UNAVAILABLE (HTTP 503): the shard a
	// request names is missing.
	ModeShard = "shard"
	// ModeCheap succeeds at once without touching the backend.
	ModeCheap = "cheap"
	// ModeOverload calls shed.ReportOverload and fails at once with
	// UNAVAILABLE (HTTP 503): the handler knows the server is overloaded.
	ModeOverload = "overload"
)

// ModeSlow returns the mode of a request that takes a backend slot for d
// instead of the usual work: an export, a report.
func ModeSlow(d time.Duration) string { return "slow=" + d.String() }

// Shape is the shape of an outage.
type Shape int

// The outage shapes.
const (
	// Healthy is no outage.
	Healthy Shape = iota
	// CapacityHalved takes half the backend's slots away: requests queue
	// for the rest and slow down.
	CapacityHalved
	// Hang holds every honest request until the outage ends (or its
	// client gives up).
	Hang
	// FailFast fails every honest request at once with UNAVAILABLE (HTTP
	// 503), with no pushback or Retry-After: a dependency is down.
	FailFast
)

func (s Shape) String() string {
	switch s {
	case Healthy:
		return "healthy"
	case CapacityHalved:
		return "capacity halved"
	case Hang:
		return "requests hang"
	case FailFast:
		return "dependency fails fast"
	}
	return fmt.Sprintf("Shape(%d)", int(s))
}

// verdict is the service's answer, before a protocol spells it.
type verdict int

const (
	served verdict = iota
	unavailable
	exhausted
	unauthenticated
	canceled
)

// backend is the service's capacity: slots workers, each request taking
// one for its work, queueing for one when none is free; and the outage.
type backend struct {
	slots chan struct{}
	work  time.Duration

	mu     sync.Mutex
	served []Served
	stolen int // slots CapacityHalved took
	shape  Shape
	share  float64       // of the honest requests the outage hits; 0 for all
	healed chan struct{} // closed when the current outage ends
}

func newBackend(slots int, work time.Duration) *backend {
	return &backend{slots: make(chan struct{}, slots), work: work, healed: make(chan struct{})}
}

// serve does what mode asks, within ctx.
func (b *backend) serve(ctx context.Context, mode string) verdict {
	began := time.Now()
	v := b.serveMode(ctx, mode)
	if mode == "" && v == served {
		end := time.Now()
		b.mu.Lock()
		b.served = append(b.served, Served{End: end, Took: end.Sub(began)})
		b.mu.Unlock()
	}
	return v
}

// Served is an honest request the service served, as the server saw it.
type Served struct {
	// End is when it ended; Took how long the service took, queueing for
	// a backend slot included.
	End  time.Time
	Took time.Duration
}

func (b *backend) serveMode(ctx context.Context, mode string) verdict {
	work := b.work
	switch {
	case mode == "":
	case mode == ModeUnauthenticated:
		return unauthenticated
	case mode == ModeQuota:
		return exhausted
	case mode == ModeShard:
		return unavailable
	case mode == ModeCheap:
		return served
	case mode == ModeOverload:
		shed.ReportOverload(ctx)
		return unavailable
	case strings.HasPrefix(mode, "slow="):
		d, err := time.ParseDuration(mode[len("slow="):])
		if err != nil || d < 0 || d > time.Minute {
			return unavailable
		}
		work = d
	default:
		return unavailable
	}
	b.mu.Lock()
	shape, share, healed := b.shape, b.share, b.healed
	b.mu.Unlock()
	if share > 0 && rand.Float64() >= share {
		shape = Healthy
	}
	switch shape {
	case FailFast:
		return unavailable
	case Hang:
		select {
		case <-healed:
		case <-ctx.Done():
			return canceled
		}
	}
	select {
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		return canceled
	}
	defer func() { <-b.slots }()
	t := time.NewTimer(work)
	defer t.Stop()
	select {
	case <-t.C:
		return served
	case <-ctx.Done():
		return canceled
	}
}

// startOutage begins an outage of shape, which hits share of the honest
// requests (all for 0; FailFast and Hang). For CapacityHalved it returns
// once half the slots are taken, or ctx is done: it takes them as the
// requests holding them let go.
func (b *backend) startOutage(ctx context.Context, shape Shape, share float64) {
	b.mu.Lock()
	b.shape, b.share = shape, share
	b.mu.Unlock()
	if shape == CapacityHalved {
		for range cap(b.slots) / 2 {
			select {
			case b.slots <- struct{}{}:
				b.mu.Lock()
				b.stolen++
				b.mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
	}
}

// endOutage ends the outage begun by startOutage, once it has returned.
func (b *backend) endOutage() {
	b.mu.Lock()
	b.shape, b.share = Healthy, 0
	close(b.healed)
	b.healed = make(chan struct{})
	stolen := b.stolen
	b.stolen = 0
	b.mu.Unlock()
	for range stolen {
		<-b.slots
	}
}

// ServerConfig sets a [Server].
type ServerConfig struct {
	// Protocol is the protocol it speaks.
	Protocol Protocol
	// Slots is how many requests the backend works on at once; more
	// queue. At least 1.
	Slots int
	// Work is how long an honest request holds its slot.
	Work time.Duration
	// Shedder, when not nil, is put in front of the service: its
	// interceptors (gRPC, Connect) or its Handler (HTTP, one per route).
	Shedder *shed.Shedder
	// Tap, with a Shedder and GRPC, adds its tap handle too.
	Tap bool
	// ServerOptions are added to a GRPC server's.
	ServerOptions []grpc.ServerOption
}

// Server is the service on 127.0.0.1, in one protocol. Its routes:
//
//   - gRPC: grpc.testing.TestService: UnaryCall (the request, by its
//     ModeHeader), StreamingInputCall (reads every message, then does
//     what a UnaryCall does), EmptyCall (a health check: answers at once).
//   - Connect: /shedload.v1.Lab/Call (unary), /shedload.v1.Lab/Upload
//     (client stream), /shedload.v1.Lab/Ping, with StringValue and Empty
//     messages.
//   - HTTP: /call, /upload (reads the body), /ping.
type Server struct {
	Protocol Protocol
	// Addr is the listening host:port.
	Addr string
	// URL is "http://" + Addr.
	URL string
	// Shedder is the ServerConfig's.
	Shedder *shed.Shedder

	backend *backend
	stop    func()
}

// Connect procedures.
const (
	CallProcedure   = "/shedload.v1.Lab/Call"
	UploadProcedure = "/shedload.v1.Lab/Upload"
	PingProcedure   = "/shedload.v1.Lab/Ping"
)

// Start starts a Server; Close stops it.
func Start(c ServerConfig) (*Server, error) {
	if c.Slots < 1 || c.Work < 0 {
		return nil, fmt.Errorf("shedload: ServerConfig.Slots must be >= 1 and Work >= 0, got %d, %v", c.Slots, c.Work)
	}
	s := &Server{Protocol: c.Protocol, Shedder: c.Shedder, backend: newBackend(c.Slots, c.Work)}
	switch c.Protocol {
	case GRPC:
		if err := s.startGRPC(c); err != nil {
			return nil, err
		}
	case Connect:
		s.startHTTP(s.connectMux(c))
	case HTTP:
		s.startHTTP(s.httpMux(c))
	default:
		return nil, fmt.Errorf("shedload: unknown %v", c.Protocol)
	}
	s.URL = "http://" + s.Addr
	return s, nil
}

// Close stops the server.
func (s *Server) Close() { s.stop() }

// Served returns the honest requests the service served so far.
func (s *Server) Served() []Served {
	s.backend.mu.Lock()
	defer s.backend.mu.Unlock()
	return slices.Clone(s.backend.served)
}

// StartOutage begins an outage of shape that hits share of the honest
// requests, drawn at random (0: all; it applies to FailFast and Hang);
// EndOutage ends it.
func (s *Server) StartOutage(ctx context.Context, shape Shape, share float64) {
	s.backend.startOutage(ctx, shape, share)
}

// EndOutage ends the outage StartOutage began, once StartOutage has
// returned.
func (s *Server) EndOutage() { s.backend.endOutage() }

type grpcService struct {
	testpb.UnimplementedTestServiceServer
	b *backend
}

func grpcMode(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(ModeHeader); len(v) > 0 {
		return v[0]
	}
	return ""
}

func grpcError(v verdict) error {
	switch v {
	case served:
		return nil
	case unavailable:
		return status.Error(codes.Unavailable, "shedload: unavailable")
	case exhausted:
		return status.Error(codes.ResourceExhausted, "shedload: quota exhausted")
	case unauthenticated:
		return status.Error(codes.Unauthenticated, "shedload: unauthenticated")
	}
	return status.Error(codes.Canceled, "shedload: canceled")
}

func (g grpcService) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if err := grpcError(g.b.serve(ctx, grpcMode(ctx))); err != nil {
		return nil, err
	}
	return &testpb.SimpleResponse{}, nil
}

func (g grpcService) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

func (g grpcService) StreamingInputCall(st grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
	var n int32
	for {
		m, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		n += int32(len(m.GetPayload().GetBody()))
	}
	if err := grpcError(g.b.serve(st.Context(), grpcMode(st.Context()))); err != nil {
		return err
	}
	return st.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: n})
}

func (s *Server) startGRPC(c ServerConfig) error {
	// grpc-go sends no stream limit unless one is set, and its clients
	// then open at most 100 streams per connection.
	opts := append([]grpc.ServerOption{grpc.MaxConcurrentStreams(10_000)}, c.ServerOptions...)
	if c.Shedder != nil {
		if c.Tap {
			opts = append(opts, grpc.InTapHandle(c.Shedder.TapHandle()))
		}
		opts = append(opts, grpc.ChainUnaryInterceptor(c.Shedder.UnaryServerInterceptor()),
			grpc.ChainStreamInterceptor(c.Shedder.StreamServerInterceptor()))
	}
	srv := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(srv, grpcService{b: s.backend})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	s.Addr = lis.Addr().String()
	s.stop = func() {
		srv.Stop()
		<-served
	}
	return nil
}

func connectError(v verdict) error {
	switch v {
	case served:
		return nil
	case unavailable:
		return connect.NewError(connect.CodeUnavailable, errors.New("shedload: unavailable"))
	case exhausted:
		return connect.NewError(connect.CodeResourceExhausted, errors.New("shedload: quota exhausted"))
	case unauthenticated:
		return connect.NewError(connect.CodeUnauthenticated, errors.New("shedload: unauthenticated"))
	}
	return connect.NewError(connect.CodeCanceled, errors.New("shedload: canceled"))
}

func (s *Server) connectMux(c ServerConfig) *http.ServeMux {
	var opts []connect.HandlerOption
	if c.Shedder != nil {
		opts = append(opts, connect.WithInterceptors(c.Shedder.ConnectInterceptor()))
	}
	mux := http.NewServeMux()
	mux.Handle(CallProcedure, connect.NewUnaryHandler(CallProcedure,
		func(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			if err := connectError(s.backend.serve(ctx, req.Header().Get(ModeHeader))); err != nil {
				return nil, err
			}
			return connect.NewResponse(wrapperspb.String("ok")), nil
		}, opts...))
	mux.Handle(UploadProcedure, connect.NewClientStreamHandler(UploadProcedure,
		func(ctx context.Context, st *connect.ClientStream[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			for st.Receive() {
			}
			if err := st.Err(); err != nil {
				return nil, err
			}
			if err := connectError(s.backend.serve(ctx, st.RequestHeader().Get(ModeHeader))); err != nil {
				return nil, err
			}
			return connect.NewResponse(wrapperspb.String("ok")), nil
		}, opts...))
	mux.Handle(PingProcedure, connect.NewUnaryHandler(PingProcedure,
		func(context.Context, *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
			return connect.NewResponse(&emptypb.Empty{}), nil
		}, opts...))
	return mux
}

func httpStatus(v verdict) int {
	switch v {
	case served:
		return http.StatusOK
	case unavailable:
		return http.StatusServiceUnavailable
	case exhausted:
		return http.StatusTooManyRequests
	case unauthenticated:
		return http.StatusUnauthorized
	}
	return 499 // the client went away
}

func (s *Server) httpMux(c ServerConfig) *http.ServeMux {
	wrap := func(h http.HandlerFunc) http.Handler {
		if c.Shedder == nil {
			return h
		}
		return c.Shedder.Handler(h)
	}
	call := func(w http.ResponseWriter, r *http.Request) {
		code := httpStatus(s.backend.serve(r.Context(), r.Header.Get(ModeHeader)))
		w.WriteHeader(code)
		if code == http.StatusOK {
			_, _ = io.WriteString(w, "ok")
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/call", wrap(call))
	mux.Handle("/upload", wrap(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		call(w, r)
	}))
	mux.Handle("/ping", wrap(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "pong") }))
	return mux
}

func (s *Server) startHTTP(h http.Handler) {
	srv := httptest.NewServer(h)
	s.Addr = srv.Listener.Addr().String()
	s.stop = srv.Close
}
