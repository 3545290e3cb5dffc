// Package chaos runs a fault-injecting grpc-go server on 127.0.0.1 for the
// demo and the soak test: grpc-go's grpc.testing.TestService whose unary
// calls fail, stall or push back at configurable rates, with outages in
// which every call fails, and which can go down and come back on the same
// port. It counts the attempts it sees per time slice.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Faults sets what the server does to each unary call. Rates are
// probabilities in [0, 1], drawn independently per call.
type Faults struct {
	// ErrorRate fails calls with UNAVAILABLE.
	ErrorRate float64
	// FatalRate fails calls with INVALID_ARGUMENT, a code policies do not
	// retry.
	FatalRate float64
	// PushbackRate attaches a grpc-retry-pushback-ms trailer, one of
	// PushbackValues, to failed calls.
	PushbackRate   float64
	PushbackValues []string
	// Latency is every call's service time.
	Latency time.Duration
	// StragglerRate makes calls take StragglerLatency instead.
	StragglerRate    float64
	StragglerLatency time.Duration
	// Outages are windows, from the server's start, in which every call
	// fails with UNAVAILABLE at once.
	Outages []Window
}

// Window is a span of time from the server's start.
type Window struct{ Start, End time.Duration }

// Validate reports the first invalid field.
func (f Faults) Validate() error {
	for name, r := range map[string]float64{"ErrorRate": f.ErrorRate, "FatalRate": f.FatalRate, "PushbackRate": f.PushbackRate, "StragglerRate": f.StragglerRate} {
		if !(r >= 0 && r <= 1) {
			return fmt.Errorf("chaos: %s must be in [0, 1], got %v", name, r)
		}
	}
	if f.ErrorRate+f.FatalRate > 1 {
		return errors.New("chaos: ErrorRate + FatalRate must be <= 1")
	}
	if f.Latency < 0 || f.StragglerLatency < 0 {
		return errors.New("chaos: latencies must be >= 0")
	}
	for i, w := range f.Outages {
		if w.Start < 0 || w.End < w.Start {
			return fmt.Errorf("chaos: Outages[%d] must have 0 <= Start <= End", i)
		}
	}
	return nil
}

// Server is a running fault-injecting server. Its methods are safe for
// concurrent use.
type Server struct {
	testpb.UnimplementedTestServiceServer

	// Addr is the server's 127.0.0.1 address; it stays the same across
	// Restart.
	Addr string

	faults Faults
	start  time.Time
	slice  time.Duration
	port   *Port

	mu    sync.Mutex
	rng   *rand.Rand
	srv   *grpc.Server
	done  chan struct{}
	loads []int64 // attempts per slice

	attempts atomic.Int64
	down     atomic.Bool // SetOutage(true)
}

// Start starts a server with f; seed makes its fault draws repeatable. slice
// is the width of the load-over-time buckets (default 100ms).
func Start(f Faults, seed uint64, slice time.Duration) (*Server, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if slice <= 0 {
		slice = 100 * time.Millisecond
	}
	port, err := ListenPort()
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: port.Addr(), faults: f, start: time.Now(), slice: slice, port: port, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	s.serve()
	return s, nil
}

// serve starts a grpc-go server on the port; called with mu held, or
// before s is shared.
func (s *Server) serve() {
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, s)
	done := make(chan struct{})
	lis := s.port.Listener()
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	s.srv, s.done = srv, done
}

// Down takes the server down at once, failing calls in flight; it keeps
// its address, where connections are refused (reset) until Restart.
// Taking a server down that is not up does nothing.
func (s *Server) Down() {
	s.mu.Lock()
	srv, done := s.srv, s.done
	s.srv, s.done = nil, nil
	s.mu.Unlock()
	if srv != nil {
		srv.Stop()
		<-done
	}
}

// Restart brings a server that is down up again on the same address.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.port == nil:
		return errors.New("chaos: server is stopped")
	case s.srv != nil:
		return errors.New("chaos: server is running")
	}
	s.serve()
	return nil
}

// Stop stops the server at once, failing calls in flight, and gives up its
// address. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	srv, done, port := s.srv, s.done, s.port
	s.srv, s.done, s.port = nil, nil, nil
	s.mu.Unlock()
	if srv != nil {
		srv.Stop()
		<-done
	}
	if port != nil {
		_ = port.Close()
	}
}

// SetOutage starts an outage, in which every call fails with UNAVAILABLE
// at once, as in one of Faults.Outages, or ends it: for a test whose
// outage lasts until enough calls have met it, however long they take.
func (s *Server) SetOutage(on bool) { s.down.Store(on) }

// Attempts returns the number of unary attempts the server has seen.
func (s *Server) Attempts() int64 { return s.attempts.Load() }

// Load returns the attempts seen per slice since the start.
func (s *Server) Load() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.loads...)
}

// Slice returns the width of a Load bucket.
func (s *Server) Slice() time.Duration { return s.slice }

// Elapsed returns the time since the server first started.
func (s *Server) Elapsed() time.Duration { return time.Since(s.start) }

type verdict struct {
	code     codes.Code
	pushback string
	latency  time.Duration
}

func (s *Server) decide() verdict {
	now := time.Since(s.start)
	s.mu.Lock()
	defer s.mu.Unlock()
	i := int(now / s.slice)
	for len(s.loads) <= i {
		s.loads = append(s.loads, 0)
	}
	s.loads[i]++
	f := s.faults
	if s.down.Load() {
		return verdict{code: codes.Unavailable}
	}
	for _, w := range f.Outages {
		if now >= w.Start && now < w.End {
			return verdict{code: codes.Unavailable}
		}
	}
	v := verdict{latency: f.Latency}
	if s.rng.Float64() < f.StragglerRate {
		v.latency = f.StragglerLatency
	}
	switch r := s.rng.Float64(); {
	case r < f.ErrorRate:
		v.code = codes.Unavailable
	case r < f.ErrorRate+f.FatalRate:
		v.code = codes.InvalidArgument
	}
	if v.code != codes.OK && len(f.PushbackValues) > 0 && s.rng.Float64() < f.PushbackRate {
		v.pushback = f.PushbackValues[s.rng.IntN(len(f.PushbackValues))]
	}
	return v
}

// UnaryCall implements the test service with the configured faults.
func (s *Server) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.attempts.Add(1)
	v := s.decide()
	if v.latency > 0 {
		t := time.NewTimer(v.latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if v.pushback != "" {
		_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", v.pushback))
	}
	if v.code != codes.OK {
		return nil, status.Error(v.code, "chaos: injected "+v.code.String())
	}
	return &testpb.SimpleResponse{Payload: req.GetPayload()}, nil
}
