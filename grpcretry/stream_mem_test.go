package grpcretry_test

import (
	"context"
	"io"
	"runtime"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/grpctest"
)

// liveHeap returns the bytes of live heap objects. Two collections empty
// the sync.Pools (grpc-go's buffer pools among them) of what they hold.
func liveHeap() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestStreamMemoryBounded streams 64 MiB (16 MiB with -short, still 16
// times the limit) through a client stream with a 1 MiB per-RPC limit. Attempt 1 fails after 16 messages, so the call is retried
// and what was kept is replayed; then the buffer overflows and the call
// commits. The retry layer never keeps more than the limit: its own count,
// checked after every message, says so, and so does the live heap
// (runtime.MemStats) against the same stream through bare grpc-go, sampled
// after each of the first 40 messages and every 15 MiB later, each time
// once the server has read all that was sent.
func TestStreamMemoryBounded(t *testing.T) {
	const (
		// 30 KiB keeps each message inside one of grpc-go's pooled
		// buffer sizes, whose churn would otherwise blur the samples.
		msgSize = 30 << 10
		perRPC  = 1 << 20
	)
	mib := 64
	if testing.Short() {
		mib = 16
	}
	messages := (mib<<20 + msgSize - 1) / msgSize
	var read atomic.Int64 // messages the attempt in progress has read
	changed, retried := make(chan struct{}, 1), make(chan struct{})
	srv := grpctest.Start(t, grpctest.Handlers{ClientStream: func(n int, s grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
		md, _ := metadata.FromIncomingContext(s.Context())
		failing := len(md.Get("fail-first")) > 0
		if failing && grpcretry.PreviousAttempts(s.Context()) == 1 {
			close(retried)
		}
		var got int32
		for k := 1; ; k++ {
			req, err := s.Recv()
			if err == io.EOF {
				return s.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: got})
			}
			if err != nil {
				return err
			}
			got += int32(len(req.GetPayload().GetBody()))
			if failing && k == 16 && grpcretry.PreviousAttempts(s.Context()) == 0 {
				return status.Error(codes.Unavailable, "failed after 16 messages")
			}
			read.Store(int64(k))
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}}, grpc.InitialWindowSize(256<<10), grpc.InitialConnWindowSize(512<<10))
	req := &testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: make([]byte, msgSize)}}

	// stream sends 64 MiB on c and returns the largest growth of the live
	// heap it saw over the first MiB and over the rest, and the most bytes
	// rc kept (rc nil: bare grpc-go). Growth is measured from the first
	// message on: opening a stream allocates a transient megabyte in
	// grpc-go.
	stream := func(ctx context.Context, c testpb.TestServiceClient, rc *grpcretry.Client) (early, late, kept int64) {
		t.Helper()
		var base int64
		var n int
		st, err := c.StreamingInputCall(ctx, grpcretry.CountAttempts(&n))
		if err != nil {
			t.Fatal(err)
		}
		for i := range messages {
			if rc != nil && i == 16 {
				// Attempt 1 has failed and attempt 2 is open; without
				// this wait the call could commit to attempt 1 first.
				<-retried
			}
			if err := st.Send(req); err != nil {
				t.Fatalf("Send %d: %v", i, err)
			}
			if rc != nil {
				k := grpcretry.BufferedBytes(rc)
				if k > perRPC {
					t.Fatalf("after message %d the retry layer keeps %d bytes, over the %d limit", i, k, perRPC)
				}
				kept = max(kept, k)
			}
			if i < 40 || i%512 == 0 {
				// Sample once the server has read all that was sent, so
				// that no message is in flight.
				for read.Load() < int64(i+1) {
					<-changed
				}
				switch h := liveHeap(); {
				case i == 0:
					base = h
				case i < 40:
					early = max(early, h-base)
				default:
					late = max(late, h-base)
				}
			}
		}
		resp, err := st.CloseAndRecv()
		if err != nil || int(resp.GetAggregatedPayloadSize()) != messages*msgSize {
			t.Fatalf("CloseAndRecv = %v, %v; want %d bytes received", resp, err, messages*msgSize)
		}
		if rc != nil && n != 2 {
			t.Fatalf("Attempts %d, want 2", n)
		}
		return early, late, kept
	}

	bareEarly, bareLate, _ := stream(context.Background(), testpb.NewTestServiceClient(srv.Dial(t, grpc.WithDisableRetry())), nil)
	read.Store(0)
	c, rc := streamClient(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""), clocktest.NewAuto(), grpcretry.WithBufferLimits(rebound.DefaultBufferTotal, perRPC))
	early, late, kept := stream(metadata.AppendToOutgoingContext(context.Background(), "fail-first", "1"), c, rc)
	if k := grpcretry.BufferedBytes(rc); k != 0 {
		t.Fatalf("%d bytes kept after the call", k)
	}
	t.Logf("%d MiB in 30 KiB messages, 1 MiB per-RPC limit: rebound kept at most %d bytes. Live heap growth in the first MiB: %d bytes through rebound, %d through bare grpc-go; over the other %d MiB: %d and %d",
		mib, kept, early, bareEarly, mib-1, late, bareLate)
	switch {
	case kept < perRPC*3/4:
		t.Fatalf("at most %d bytes kept: the test did not fill the buffer", kept)
	case early < kept/2:
		t.Fatalf("the live heap grew by %d bytes only: no sample caught the buffer full", early)
	case early > bareEarly+perRPC+perRPC/8:
		t.Fatalf("the live heap grew by %d bytes through rebound, %d through grpc-go: more than the %d limit apart", early, bareEarly, perRPC)
	case late > bareLate+perRPC/4:
		t.Fatalf("after commit the live heap grew by %d bytes through rebound, %d through grpc-go: rebound still holds memory", late, bareLate)
	}
}
