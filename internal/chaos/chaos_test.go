package chaos

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound/internal/testmain"
)

func TestMain(m *testing.M) { testmain.Run(m) }

func dial(t *testing.T, addr string) testpb.TestServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

func TestFaultsAndRestart(t *testing.T) {
	s, err := Start(Faults{ErrorRate: 0.5, FatalRate: 0.25, PushbackRate: 1, PushbackValues: []string{"-1"}}, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	c := dial(t, s.Addr)
	counts := map[codes.Code]int{}
	for range 400 {
		var tr metadata.MD
		_, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{}, grpc.Trailer(&tr))
		code := status.Code(err)
		counts[code]++
		if code != codes.OK && len(tr.Get("grpc-retry-pushback-ms")) != 1 {
			t.Fatalf("failure without the pushback trailer: %v", err)
		}
	}
	if counts[codes.OK] < 60 || counts[codes.Unavailable] < 160 || counts[codes.InvalidArgument] < 60 {
		t.Fatalf("code mix %v far from 25%% OK, 50%% UNAVAILABLE, 25%% INVALID_ARGUMENT", counts)
	}
	if s.Attempts() != 400 {
		t.Fatalf("Attempts = %d, want 400", s.Attempts())
	}
	s.Down()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err = c.UnaryCall(ctx, &testpb.SimpleRequest{})
	cancel()
	if status.Code(err) == codes.OK {
		t.Fatal("a server that is down answered")
	}
	// It keeps its address, where a new connection is reset, as one to a
	// port nobody listens on is refused: as the dial returns, or, on a
	// busy machine, before it does.
	conn, err := net.Dial("tcp", s.Addr)
	switch {
	case errors.Is(err, syscall.ECONNRESET):
	case err != nil:
		t.Fatalf("the address of a server that is down: %v, want the connection reset", err)
	default:
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := conn.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a connection to a server that is down read %d bytes, %v; want it reset", n, err)
		}
		conn.Close()
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = c.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.WaitForReady(true))
	if c := status.Code(err); c != codes.OK && c != codes.Unavailable && c != codes.InvalidArgument {
		t.Fatalf("after restart: %v", err)
	}
	if err := s.Restart(); err == nil {
		t.Fatal("Restart of a running server did not fail")
	}
	// Stop gives the address up: nothing accepts connections there.
	s.Stop()
	if conn, err := net.Dial("tcp", s.Addr); err == nil {
		conn.Close()
		t.Fatal("a stopped server's address accepts connections")
	}
	if err := s.Restart(); err == nil {
		t.Fatal("Restart after Stop did not fail")
	}
}

func TestOutage(t *testing.T) {
	s, err := Start(Faults{Outages: []Window{{0, time.Hour}}}, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	_, err = dial(t, s.Addr).UnaryCall(context.Background(), &testpb.SimpleRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("during an outage: %v", err)
	}
	// One attempt, in whichever slice the call took to arrive.
	if l := s.Load(); len(l) == 0 || l[len(l)-1] != 1 || sum(l) != 1 {
		t.Fatalf("load %v, want one attempt in the last slice", l)
	}
}

func sum(l []int64) (n int64) {
	for _, v := range l {
		n += v
	}
	return n
}

func TestSetOutage(t *testing.T) {
	s, err := Start(Faults{}, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	c := dial(t, s.Addr)
	for _, tc := range []struct {
		outage bool
		want   codes.Code
	}{{false, codes.OK}, {true, codes.Unavailable}, {false, codes.OK}} {
		s.SetOutage(tc.outage)
		if _, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{}); status.Code(err) != tc.want {
			t.Fatalf("outage %v: %v, want %v", tc.outage, err, tc.want)
		}
	}
	if n := s.Attempts(); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
}

func TestValidate(t *testing.T) {
	for _, f := range []Faults{{ErrorRate: 2}, {ErrorRate: 0.7, FatalRate: 0.7}, {Latency: -1}, {Outages: []Window{{2, 1}}}} {
		if _, err := Start(f, 1, 0); err == nil {
			t.Errorf("Start(%+v) accepted", f)
		}
	}
}
