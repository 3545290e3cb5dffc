package connectretry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry"
)

// See grpcretry's TestAdaptiveThrottle: two attempts reach a server that
// refuses everything, then every call fails locally.
func TestAdaptiveThrottle(t *testing.T) {
	s := startServer(t, handlers{unary: func(context.Context, int, *request) (*connect.Response[msg], error) {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("down"))
	}}, false)
	c, _ := dial(t, s, connectProtocol, retryConfig(t, 3, `"UNAVAILABLE"`, ""),
		connectretry.WithServerName(fmt.Sprint("adaptive-", time.Now().UnixNano())),
		connectretry.WithAdaptiveThrottle(rebound.AdaptiveThrottleConfig{}))
	for i := range 10 {
		_, err := c.unary.CallUnary(context.Background(), connect.NewRequest(&msg{Value: "x"}))
		if connect.CodeOf(err) != connect.CodeUnavailable || !errors.Is(err, rebound.ErrThrottled) {
			t.Fatalf("call %d: %v, want unavailable ending with ErrThrottled", i, err)
		}
	}
	if n := s.count(unary); n != 2 {
		t.Fatalf("server saw %d attempts, want 2", n)
	}
	st, err := c.serverStream.CallServerStream(context.Background(), connect.NewRequest(&msg{Value: "x"}))
	if err == nil {
		for st.Receive() {
		}
		err = st.Err()
		st.Close()
	}
	if !errors.Is(err, rebound.ErrRejectedLocally) {
		t.Fatalf("stream: %v, want a local rejection", err)
	}
	if n := s.count(serverStream); n != 0 {
		t.Fatalf("server saw %d streams, want 0", n)
	}
}
