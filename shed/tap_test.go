package shed_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding/gzip"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/serviceconfig"
	"github.com/rebound-go/rebound/shed"
)

// decoded counts the bytes of the messages a server decoded.
type decoded struct{ n atomic.Int64 }

func (d *decoded) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (d *decoded) HandleRPC(_ context.Context, s stats.RPCStats) {
	if p, ok := s.(*stats.InPayload); ok {
		d.n.Add(int64(p.Length))
	}
}
func (d *decoded) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (d *decoded) HandleConn(context.Context, stats.ConnStats)                       {}

// Item 6: grpc-go reads and decompresses a request before any
// interceptor runs; the tap handle sheds it before. A call of 8 MiB of
// zeros, a few KiB gzipped, against a server at its limit: behind the
// interceptors alone, the server decodes all 8 MiB to reject it; behind
// the tap handle, nothing, and grpcretry reads the tap's RetryInfo.
func TestTapRejectsUnread(t *testing.T) {
	cfg, err := serviceconfig.Parse([]byte(retryUnavailable))
	if err != nil {
		t.Fatal(err)
	}
	big := &testpb.SimpleRequest{Payload: &testpb.Payload{Body: make([]byte, 8<<20)}}
	for _, tap := range []bool{false, true} {
		name := map[bool]string{false: "interceptors", true: "tap"}[tap]
		t.Run(name, func(t *testing.T) {
			s, _ := shed.New(fixed(1))
			var dec decoded
			entered, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			opts := []grpc.ServerOption{grpc.StatsHandler(&dec), grpc.MaxRecvMsgSize(16 << 20),
				grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor())}
			if tap {
				opts = append(opts, grpc.InTapHandle(s.TapHandle()))
			}
			srv := grpctest.Start(t, grpctest.Handlers{Unary: func(context.Context, int, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
				once.Do(func() { close(entered); <-release })
				return &testpb.SimpleResponse{}, nil
			}}, opts...)
			client := testpb.NewTestServiceClient(srv.Dial(t, grpcretry.DialOptions(cfg)...))
			first := make(chan error, 1)
			go func() { _, err := client.UnaryCall(context.Background(), grpctest.Request("hold")); first <- err }()
			<-entered
			before := dec.n.Load()
			var n int
			_, err := client.UnaryCall(context.Background(), big, grpc.UseCompressor(gzip.Name), grpcretry.CountAttempts(&n))
			got := dec.n.Load() - before
			if tap {
				// A small call, which grpcretry could retry: the stop
				// ends its retrying.
				var m int
				_, err := client.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&m))
				if m != 1 || !errors.Is(err, rebound.ErrRetryDelayTooLong) {
					t.Errorf("small call: %d attempts, %v; want 1, ending with ErrRetryDelayTooLong", m, err)
				}
			}
			close(release)
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			if status.Code(err) != codes.Unavailable || n != 1 {
				t.Fatalf("%d attempts, %v; want 1, UNAVAILABLE", n, err)
			}
			if !tap {
				if got < 8<<20 {
					t.Fatalf("the server decoded %d bytes of a call it shed; want the 8 MiB (this is why the tap handle exists)", got)
				}
				return
			}
			if got != 0 {
				t.Fatalf("the server decoded %d bytes of a call its tap handle shed, want none", got)
			}
			// Half the calls shed: stop, a RetryInfo beyond grpcretry's
			// cap. (The big call was committed: it outgrew the replay
			// buffer.)
			if d := retryInfo(err); d != shed.StopRetryAfter {
				t.Fatalf("%v with a RetryInfo of %v; want %v", err, d, shed.StopRetryAfter)
			}
			if st := s.Stats(); st.Admitted != 1 || st.ShedStop != 2 || st.InFlight != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// retryInfo is the delay of err's RetryInfo, -1 for none.
func retryInfo(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return -1
}

// The tap handle's delay is a RetryInfo that grpcretry waits out before
// its retry.
func TestTapDelay(t *testing.T) {
	cfg, err := serviceconfig.Parse([]byte(retryUnavailable))
	if err != nil {
		t.Fatal(err)
	}
	c := shed.DefaultConfig()
	c.InitialLimit, c.MinLimit, c.MaxLimit = 1, 1, 1
	c.RetryShare = 0.9
	s, _ := shed.New(c)
	entered, release := make(chan struct{}), make(chan struct{})
	srv := grpctest.Start(t, grpctest.Handlers{Unary: func(_ context.Context, _ int, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		if string(req.GetPayload().GetBody()) == "hold" {
			close(entered)
			<-release
		}
		return &testpb.SimpleResponse{}, nil
	}}, grpc.InTapHandle(s.TapHandle()), grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor()))
	client := testpb.NewTestServiceClient(srv.Dial(t, grpcretry.DialOptions(cfg)...))
	// Ten calls served: the Shedder may invite up to nine retries.
	for range 10 {
		if _, err := client.UnaryCall(context.Background(), grpctest.Request("x")); err != nil {
			t.Fatal(err)
		}
	}
	first := make(chan error, 1)
	go func() { _, err := client.UnaryCall(context.Background(), grpctest.Request("hold")); first <- err }()
	<-entered
	// Shed by the tap, within the share: invited back after a delay.
	// The first call ends once the Shedder has shed, and a retry is
	// served.
	go func() {
		for s.Stats().ShedRetry == 0 {
			time.Sleep(time.Millisecond)
		}
		close(release)
	}()
	var n int
	if _, err := client.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n)); err != nil || n < 2 {
		t.Fatalf("%d attempts, %v; want a retry served", n, err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Admitted != 12 || st.ShedRetry != int64(n-1) || st.ShedStop != 0 || st.InFlight != 0 {
		t.Fatalf("stats %+v after %d attempts", st, n)
	}
}
