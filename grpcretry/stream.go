package grpcretry

import (
	"context"

	"google.golang.org/grpc"
)

// StreamClientInterceptor returns the interceptor for streaming calls. It is
// safe for concurrent use.
func (c *Client) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return c.stream
}

func (c *Client) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if n := attemptsOut(opts); n != nil {
		*n = 1
	}
	return streamer(ctx, desc, cc, method, opts...)
}
