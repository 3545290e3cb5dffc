// Package fleetdemo shows, on loopback and with real grpc-go, what the
// fleet-scale simulation models: a server behind a shed.Shedder and
// hundreds of ClientConns, each with its own grpcretry.Client and its own
// adaptive throttle (a server name of its own), offering far more than the
// server can take. The server's accepted load stays at its limit while the
// clients back off.
//
// The run goes in rounds, so that its counts do not depend on timing:
// in each round every client makes one call at once; the calls the
// Shedder admits are held in the handler until every other call of the
// round has been shed or rejected locally, then released. A round thus
// admits exactly min(limit, attempts that reached the server).
package fleetdemo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/svgplot"
	"github.com/rebound-go/rebound/serviceconfig"
	"github.com/rebound-go/rebound/shed"
)

// Config sets a run.
type Config struct {
	// Clients is the number of ClientConns, each with its own throttle.
	Clients int
	// Rounds is the number of rounds; each client makes one call per
	// round.
	Rounds int
	// Limit is the server's concurrency limit, fixed so that the
	// accepted load is known.
	Limit int
	// Seed seeds each client's random source.
	Seed uint64
}

// Round is what one round saw.
type Round struct {
	// Calls is the calls the clients made: one per client.
	Calls int
	// Offered is the attempts that reached the server, retries included.
	Offered int
	// Accepted is the attempts the Shedder admitted; Shed those it
	// rejected (Offered = Accepted + Shed).
	Accepted, Shed int
	// RejectedLocally is the calls the clients' throttles kept home.
	RejectedLocally int
	// MaxInFlight is the most calls the handler held at once.
	MaxInFlight int
}

// service holds each admitted call until its round is released.
type service struct {
	testpb.UnimplementedTestServiceServer
	mu       sync.Mutex
	release  chan struct{}
	entered  chan struct{}
	inFlight atomic.Int32
	max      atomic.Int32
}

func (s *service) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.max.Load()
		if n <= m || s.max.CompareAndSwap(m, n) {
			break
		}
	}
	s.mu.Lock()
	release := s.release
	s.mu.Unlock()
	s.entered <- struct{}{}
	select {
	case <-release:
		return &testpb.SimpleResponse{}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// lockedRand is a seeded rebound.Random safe for concurrent use.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (l *lockedRand) Float64() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}

// serviceConfig retries UNAVAILABLE up to 3 attempts; the Shedder's
// pushback decides whether and when.
const serviceConfig = `{"methodConfig":[{"name":[{"service":"grpc.testing.TestService"}],
 "retryPolicy":{"maxAttempts":3,"initialBackoff":"0.01s","maxBackoff":"0.1s","backoffMultiplier":2,
 "retryableStatusCodes":["UNAVAILABLE"]}}]}`

// Run starts the server on 127.0.0.1 and the clients, runs the rounds and
// stops everything before it returns.
func Run(ctx context.Context, c Config) ([]Round, error) {
	if c.Clients < 1 || c.Rounds < 1 || c.Limit < 1 {
		return nil, fmt.Errorf("fleetdemo: Clients, Rounds and Limit must be >= 1, got %d, %d, %d", c.Clients, c.Rounds, c.Limit)
	}
	sc := shed.DefaultConfig()
	sc.InitialLimit, sc.MinLimit, sc.MaxLimit = c.Limit, c.Limit, c.Limit
	shedder, err := shed.New(sc)
	if err != nil {
		return nil, err
	}
	// Each call reports when it returns, and the handler when a call
	// enters it: at most one of each per call and round.
	returns := make(chan struct{}, c.Clients)
	svc := &service{entered: make(chan struct{}, c.Clients)}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(shedder.UnaryServerInterceptor()))
	testpb.RegisterTestServiceServer(srv, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	defer func() {
		srv.Stop()
		<-served
	}()

	cfg, err := serviceconfig.Parse([]byte(serviceConfig))
	if err != nil {
		return nil, err
	}
	clients := make([]testpb.TestServiceClient, c.Clients)
	for i := range clients {
		rc, err := grpcretry.New(cfg,
			// A name of its own: its own throttle, fresh in every run
			// (the port differs), as a pod of its own would have.
			grpcretry.WithServerName(fmt.Sprintf("fleetdemo-%s-%d", lis.Addr(), i)),
			grpcretry.WithAdaptiveThrottle(rebound.AdaptiveThrottleConfig{}),
			grpcretry.WithRandom(&lockedRand{r: rand.New(rand.NewPCG(c.Seed, uint64(i)))}))
		if err != nil {
			return nil, err
		}
		cc, err := grpc.NewClient(lis.Addr().String(), append(rc.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			return nil, err
		}
		defer cc.Close()
		clients[i] = testpb.NewTestServiceClient(cc)
	}

	var rounds []Round
	for range c.Rounds {
		before := shedder.Stats()
		release := make(chan struct{})
		svc.mu.Lock()
		svc.release = release
		svc.mu.Unlock()
		svc.max.Store(0)
		var (
			wg    sync.WaitGroup
			local atomic.Int32
		)
		for _, cl := range clients {
			wg.Go(func() {
				_, err := cl.UnaryCall(ctx, &testpb.SimpleRequest{})
				if errors.Is(err, rebound.ErrRejectedLocally) {
					local.Add(1)
				}
				returns <- struct{}{}
			})
		}
		// The round is over, but for the calls held in the handler, once
		// every call has either entered the handler or returned.
		for entered, returned := 0, 0; entered+returned < c.Clients; {
			select {
			case <-svc.entered:
				entered++
			case <-returns:
				returned++
			case <-ctx.Done():
				close(release)
				wg.Wait()
				return nil, context.Cause(ctx)
			}
		}
		close(release)
		wg.Wait()
		for len(returns) > 0 {
			<-returns
		}
		after := shedder.Stats()
		r := Round{
			Calls:           c.Clients,
			Accepted:        int(after.Admitted - before.Admitted),
			Shed:            int(after.ShedRetry + after.ShedStop - before.ShedRetry - before.ShedStop),
			RejectedLocally: int(local.Load()),
			MaxInFlight:     int(svc.max.Load()),
		}
		r.Offered = r.Accepted + r.Shed
		rounds = append(rounds, r)
	}
	return rounds, nil
}

// Chart draws the rounds: the calls the clients made, the attempts that
// reached the server, and those it accepted, against its limit.
func Chart(c Config, rounds []Round) *svgplot.Chart {
	ch := &svgplot.Chart{
		Title:  fmt.Sprintf("%d gRPC clients, each with its own adaptive throttle, against one server shedding above %d in flight (loopback)", c.Clients, c.Limit),
		XLabel: "round (every client makes one call per round)",
		YLabel: "per round (log scale)",
		YLog:   true,
		Width:  960,
		Height: 420,
	}
	var calls, offered, accepted svgplot.Series
	calls.Name, offered.Name, accepted.Name = "calls made", "attempts reaching the server", "attempts accepted"
	for i, r := range rounds {
		x := float64(i + 1)
		calls.Points = append(calls.Points, svgplot.Point{X: x, Y: float64(r.Calls)})
		offered.Points = append(offered.Points, svgplot.Point{X: x, Y: float64(r.Offered)})
		accepted.Points = append(accepted.Points, svgplot.Point{X: x, Y: float64(r.Accepted)})
	}
	// The accepted attempts first, so that they take the solid line: it
	// lies on the limit's dotted mark.
	ch.Series = []svgplot.Series{accepted, offered, calls}
	ch.Marks = []svgplot.Mark{{Horizontal: true, Value: float64(c.Limit), Label: fmt.Sprintf("server limit %d", c.Limit)}}
	return ch
}
