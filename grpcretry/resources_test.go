package grpcretry_test

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/grpctest"
)

// settle runs the garbage collector until cond holds: cleanups of
// collected objects run on a goroutine of the runtime's, after the cycle
// that found them.
func settle(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		runtime.GC()
		runtime.Gosched()
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A long-lived Client that many ClientConns pass through keeps nothing of
// the conns that were closed and dropped (issue 13).
func TestClosedConnsReleased(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 10,000 conns")
	}
	cfg := retryConfig(t, 3, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}`)
	c, err := grpcretry.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	interceptor := c.UnaryClientInterceptor()
	ok := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	churn := func(n int) {
		for range n {
			cc, err := grpc.NewClient("passthrough:///127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			if err := interceptor(context.Background(), grpctest.UnaryCall, grpctest.Request("x"), new(struct{}), cc, ok); err != nil {
				t.Fatal(err)
			}
			cc.Close()
		}
	}
	churn(100) // warm grpc-go's own process-wide state
	settle(t, func() bool { return grpcretry.Targets(c) == 0 })
	base := heapInUse()
	churn(10_000)
	settle(t, func() bool { return grpcretry.Targets(c) == 0 })
	after := heapInUse()
	// Kept, the targets took about 6.5 KB each: 65 MB for these.
	if growth := int64(after) - int64(base); growth > 1<<20 {
		t.Fatalf("heap grew by %d bytes over 10,000 closed conns, want under 1 MiB", growth)
	}
	t.Logf("heap %d -> %d bytes", base, after)
	runtime.KeepAlive(c) // what it holds must count in both readings
}

// TestLatestConnAndClientCollected: the conn of a Client's latest call,
// which the Client keeps to know it at the next call, is collected once
// closed and left, and so is a Client left after its last call.
func TestLatestConnAndClientCollected(t *testing.T) {
	c, err := grpcretry.New(retryConfig(t, 3, `"UNAVAILABLE"`, ""))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("passthrough:///127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	if err := c.UnaryClientInterceptor()(context.Background(), grpctest.UnaryCall, grpctest.Request("x"), new(struct{}), cc, ok); err != nil {
		t.Fatal(err)
	}
	cc.Close()
	conn, client := weak.Make(cc), weak.Make(c)
	cc, c = nil, nil
	settle(t, func() bool { return conn.Value() == nil })
	settle(t, func() bool { return client.Value() == nil })
}
