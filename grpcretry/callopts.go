package grpcretry

import (
	"context"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/rebound-go/rebound/internal/a6"
)

// countAttempts is the call option of [CountAttempts].
type countAttempts struct {
	grpc.EmptyCallOption
	n *int
}

// CountAttempts returns a call option that stores in *n how many attempts
// the call made, hedges included, once it returns (1 when it was not
// retried). For a stream, *n is set when the stream ends: it is valid once
// RecvMsg has returned an error (io.EOF included) or the response of a
// call that is not server-streaming (CloseAndRecv has returned), or once
// opening the stream failed.
func CountAttempts(n *int) grpc.CallOption { return countAttempts{n: n} }

func attemptsOut(opts []grpc.CallOption) *int {
	for _, o := range opts {
		if a, ok := o.(countAttempts); ok && a.n != nil {
			return a.n
		}
	}
	return nil
}

// PreviousAttempts returns, in a server handler, the number of attempts of
// this call that came before this one, from the grpc-previous-rpc-attempts
// header: 0 on the first attempt or when the header is missing or invalid.
func PreviousAttempts(ctx context.Context) int {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md[a6.PreviousAttemptsHeader]
	if len(v) != 1 {
		return 0
	}
	n, err := strconv.Atoi(v[0])
	if err != nil || n < 0 {
		return 0
	}
	return n
}
