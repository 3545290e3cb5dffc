package connectretry_test

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/internal/clocktest"
)

// exclusiveSends is an interceptor of the application's, installed after
// rebound's, that relies on connect's contract for the write side of a
// stream: Send, RequestHeader and CloseRequest are never called at once.
// The first attempt's second Send blocks, as a Send does whose message
// the transport cannot take yet (flow control), until the attempt's
// context ends or either side of its stream is closed: connect's request
// body is a pipe, whose reader net/http closes as the context ends or,
// over HTTP/2, as the response body is closed.
type exclusiveSends struct {
	blocked chan struct{} // closed as the first attempt's second Send blocks
	overlap atomic.Bool   // CloseRequest came during a Send
}

func (*exclusiveSends) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

func (*exclusiveSends) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func (x *exclusiveSends) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		return &exclusiveConn{StreamingClientConn: next(ctx, spec), x: x, ctx: ctx, closed: make(chan struct{}), respClosed: make(chan struct{})}
	}
}

type exclusiveConn struct {
	connect.StreamingClientConn
	x       *exclusiveSends
	ctx     context.Context
	sending atomic.Bool
	sends   int           // written by Send alone: -race sees two at once
	closed  chan struct{} // closed by CloseRequest
	close   sync.Once

	respClosed chan struct{} // closed by CloseResponse
	closeResp  sync.Once
}

func (c *exclusiveConn) Send(m any) error {
	c.sending.Store(true)
	defer c.sending.Store(false)
	c.sends++
	if c.sends == 2 && c.RequestHeader().Get("Grpc-Previous-Rpc-Attempts") == "" {
		close(c.x.blocked)
		select {
		case <-c.ctx.Done():
			return connect.NewError(connect.CodeCanceled, c.ctx.Err())
		case <-c.closed:
			return io.EOF
		case <-c.respClosed:
			return io.EOF
		}
	}
	return c.StreamingClientConn.Send(m)
}

func (c *exclusiveConn) CloseRequest() error {
	if c.sending.Load() {
		c.x.overlap.Store(true)
	}
	c.close.Do(func() { close(c.closed) })
	return c.StreamingClientConn.CloseRequest()
}

func (c *exclusiveConn) CloseResponse() error {
	c.closeResp.Do(func() { close(c.respClosed) })
	return c.StreamingClientConn.CloseResponse()
}

// TestRetryWaitsForSendInProgress: a bidi stream whose first attempt fails
// while the application's Send on it is blocked is retried without
// closing that attempt's request side under the Send, which connect's
// contract forbids: its response side is closed first, which connect
// allows and which ends the Send (a kept message: the Send returns nil,
// and the retry is sent it), and only then its request side. The server
// sees both attempts.
func TestRetryWaitsForSendInProgress(t *testing.T) {
	srv := startServerOver(t, handlers{}, overH2C) // its bidi streams fail UNAVAILABLE
	i, err := connectretry.New(retryConfig(t, 2, `"UNAVAILABLE"`, ""), connectretry.WithClock(clocktest.NewAuto()))
	if err != nil {
		t.Fatal(err)
	}
	x := &exclusiveSends{blocked: make(chan struct{})}
	client := connect.NewClient[msg, msg](srv.client, srv.url+bidiStream, connect.WithGRPC(), connect.WithInterceptors(i, x))
	st := client.CallBidiStream(context.Background())
	if err := st.Send(wrapperspb.String("a")); err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() { sent <- st.Send(wrapperspb.String("b")) }()
	<-x.blocked
	if _, err := st.Receive(); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("Receive: %v, want the second attempt's UNAVAILABLE", err)
	}
	if err := <-sent; err != nil {
		t.Fatalf("the blocked Send of a kept message returned %v, want nil", err)
	}
	_ = st.CloseRequest()
	_ = st.CloseResponse()
	if x.overlap.Load() {
		t.Fatal("the first attempt's CloseRequest came during the application's Send on it")
	}
	if n := srv.count(bidiStream); n != 2 {
		t.Fatalf("server saw %d attempts, want 2", n)
	}
}
