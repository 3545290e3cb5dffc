package shedload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/httpretry"
	"github.com/rebound-go/rebound/serviceconfig"
	"github.com/rebound-go/rebound/shed"
)

// Outcome is how a call ended, as its client saw it.
type Outcome int

// The outcomes.
const (
	// OK: the call succeeded.
	OK Outcome = iota
	// Shed: the Shedder rejected its last attempt.
	Shed
	// Failed: any other failure.
	Failed
)

// Result is one call.
type Result struct {
	Outcome Outcome
	// Attempts is the attempts the call made, its first included.
	Attempts int
	// Err is the call's error, nil for OK.
	Err error
}

// backoff is the retrying clients' backoff, the same in every protocol.
var backoff = rebound.Backoff{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond, Multiplier: 2}

// serviceConfig is the retrying gRPC and Connect clients' policy: attempts
// attempts on UNAVAILABLE, with backoff.
func serviceConfig(attempts int) (*serviceconfig.Config, error) {
	return serviceconfig.Parse(fmt.Appendf(nil, `{"methodConfig":[{"name":[{"service":"grpc.testing.TestService"},{"service":"shedload.v1.Lab"}],
 "retryPolicy":{"maxAttempts":%d,"initialBackoff":"%gs","maxBackoff":"%gs","backoffMultiplier":%g,
 "retryableStatusCodes":["UNAVAILABLE"]}}]}`, attempts, backoff.Initial.Seconds(), backoff.Max.Seconds(), backoff.Multiplier))
}

// Caller makes calls to a Server as one client process would: a
// ClientConn, or an http.Client with its own connections, and its own
// retrying client (grpcretry, connectretry, httpretry) when it retries.
type Caller struct {
	call  func(ctx context.Context, mode string) Result
	ping  func(ctx context.Context) error
	close func()
}

// Ping calls the server's health check (EmptyCall, Ping, /ping), a
// method of its own, so that the Caller's connection is up before a run
// without teaching the Shedder anything of the Call method.
func (c *Caller) Ping(ctx context.Context) error { return c.ping(ctx) }

// Call makes one call with the given mode ("" for an honest one).
func (c *Caller) Call(ctx context.Context, mode string) Result { return c.call(ctx, mode) }

// Close releases the Caller's connections.
func (c *Caller) Close() { c.close() }

// NewCaller returns a client of s that makes up to attempts attempts per
// call (1: no retries), retrying UNAVAILABLE (HTTP 429, 502, 503, 504)
// with the same backoff in every protocol, from the local address from
// (nil for the system's choice; on Linux any 127.0.0.0/8 address works,
// which lets a test tell peers apart on loopback). id names its retry
// state: each Caller has its own, as a process of its own would.
func (s *Server) NewCaller(id, attempts int, from net.IP) (*Caller, error) {
	if attempts < 1 || attempts > 5 {
		return nil, fmt.Errorf("shedload: attempts must be in [1, 5], got %d", attempts)
	}
	dialer := &net.Dialer{}
	if from != nil {
		dialer.LocalAddr = &net.TCPAddr{IP: from}
	}
	switch s.Protocol {
	case GRPC:
		return s.grpcCaller(id, attempts, dialer)
	case Connect:
		return s.connectCaller(id, attempts, dialer)
	}
	return s.httpCaller(attempts, dialer)
}

// Loopback returns 127.0.0.(1+i), for i in [0, 250).
func Loopback(i int) net.IP { return net.IPv4(127, 0, 0, byte(1+i%250)) }

// AttackerIP is the address attackers call from: one peer.
var AttackerIP = net.IPv4(127, 0, 0, 254)

func isShedMessage(msg string) bool { return strings.Contains(msg, shed.ErrOverloaded.Error()) }

func (s *Server) grpcCaller(id, attempts int, dialer *net.Dialer) (*Caller, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dialer.DialContext(ctx, "tcp", addr)
		})}
	if attempts > 1 {
		cfg, err := serviceConfig(attempts)
		if err != nil {
			return nil, err
		}
		rc, err := grpcretry.New(cfg, grpcretry.WithServerName(fmt.Sprintf("shedload-%s-%d", s.Addr, id)))
		if err != nil {
			return nil, err
		}
		opts = append(opts, rc.DialOptions()...)
	} else {
		opts = append(opts, grpc.WithDisableRetry())
	}
	cc, err := grpc.NewClient(s.Addr, opts...)
	if err != nil {
		return nil, err
	}
	client := testpb.NewTestServiceClient(cc)
	return &Caller{
		call: func(ctx context.Context, mode string) Result {
			if mode != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, ModeHeader, mode)
			}
			n := 1
			var copts []grpc.CallOption
			if attempts > 1 {
				copts = append(copts, grpcretry.CountAttempts(&n))
			}
			_, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}, copts...)
			r := Result{Attempts: max(n, 1), Err: err}
			switch {
			case err == nil:
				r.Outcome = OK
			case isShedMessage(status.Convert(err).Message()):
				r.Outcome = Shed
			default:
				r.Outcome = Failed
			}
			return r
		},
		ping: func(ctx context.Context) error {
			_, err := client.EmptyCall(ctx, &testpb.Empty{})
			return err
		},
		close: func() { cc.Close() },
	}, nil
}

// newHTTPClient is one client process's HTTP client: connections of its
// own.
func newHTTPClient(dialer *net.Dialer, rt func(http.RoundTripper) http.RoundTripper) (*http.Client, func()) {
	base := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second, DialContext: dialer.DialContext}
	return &http.Client{Transport: rt(base)}, base.CloseIdleConnections
}

func (s *Server) connectCaller(id, attempts int, dialer *net.Dialer) (*Caller, error) {
	var opts []connect.ClientOption
	if attempts > 1 {
		cfg, err := serviceConfig(attempts)
		if err != nil {
			return nil, err
		}
		ic, err := connectretry.New(cfg, connectretry.WithServerName(fmt.Sprintf("shedload-%s-%d", s.Addr, id)))
		if err != nil {
			return nil, err
		}
		opts = append(opts, connect.WithInterceptors(ic))
	}
	hc, closeIdle := newHTTPClient(dialer, func(rt http.RoundTripper) http.RoundTripper { return rt })
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](hc, s.URL+CallProcedure, opts...)
	ping := connect.NewClient[emptypb.Empty, emptypb.Empty](hc, s.URL+PingProcedure)
	return &Caller{
		ping: func(ctx context.Context) error {
			_, err := ping.CallUnary(ctx, connect.NewRequest(&emptypb.Empty{}))
			return err
		},
		call: func(ctx context.Context, mode string) Result {
			n := 1
			if attempts > 1 {
				ctx = connectretry.CountAttempts(ctx, &n)
			}
			req := connect.NewRequest(wrapperspb.String("x"))
			if mode != "" {
				req.Header().Set(ModeHeader, mode)
			}
			_, err := client.CallUnary(ctx, req)
			r := Result{Attempts: max(n, 1), Err: err}
			var ce *connect.Error
			switch {
			case err == nil:
				r.Outcome = OK
			case errors.As(err, &ce) && isShedMessage(ce.Message()):
				r.Outcome = Shed
			default:
				r.Outcome = Failed
			}
			return r
		},
		close: closeIdle,
	}, nil
}

func (s *Server) httpCaller(attempts int, dialer *net.Dialer) (*Caller, error) {
	var rt *httpretry.Transport
	hc, closeIdle := newHTTPClient(dialer, func(base http.RoundTripper) http.RoundTripper {
		if attempts == 1 {
			return base
		}
		rt = httpretry.NewTransport(base, httpretry.WithMaxAttempts(attempts), httpretry.WithBackoff(backoff))
		return rt
	})
	if rt != nil && rt.Err() != nil {
		return nil, rt.Err()
	}
	return &Caller{
		ping: func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/ping", nil)
			if err != nil {
				return err
			}
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("shedload: ping: %s", resp.Status)
			}
			return nil
		},
		call: func(ctx context.Context, mode string) Result {
			n := 1
			if attempts > 1 {
				ctx = httpretry.CountAttempts(ctx, &n)
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/call", nil)
			if err != nil {
				return Result{Outcome: Failed, Attempts: 1, Err: err}
			}
			if mode != "" {
				req.Header.Set(ModeHeader, mode)
			}
			resp, err := hc.Do(req)
			if err != nil {
				return Result{Outcome: Failed, Attempts: max(n, 1), Err: err}
			}
			body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			r := Result{Attempts: max(n, 1)}
			switch {
			case err != nil:
				r.Outcome, r.Err = Failed, err
			case resp.StatusCode == http.StatusOK:
				r.Outcome = OK
			case resp.StatusCode == http.StatusServiceUnavailable && isShedMessage(string(body)):
				r.Outcome, r.Err = Shed, fmt.Errorf("shedload: %s", resp.Status)
			default:
				r.Outcome, r.Err = Failed, fmt.Errorf("shedload: %s", resp.Status)
			}
			return r
		},
		close: closeIdle,
	}, nil
}
