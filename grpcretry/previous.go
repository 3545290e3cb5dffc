package grpcretry

import (
	"context"
	"strconv"

	"google.golang.org/grpc/metadata"

	"github.com/rebound-go/rebound/internal/a6"
)

// previousMD holds the grpc-previous-rpc-attempts metadata of attempts 2
// to len+1, made once: grpc-go only reads outgoing metadata, and no one
// may change it once it is in a context.
var previousMD = func() []metadata.MD {
	mds := make([]metadata.MD, 8)
	for i := range mds {
		mds[i] = metadata.MD{a6.PreviousAttemptsHeader: {strconv.Itoa(i + 1)}}
	}
	return mds
}()

// withPreviousAttempts returns ctx for an attempt that follows prev
// others: it carries grpc-previous-rpc-attempts (A6). When ctx has no
// outgoing metadata of its own, which is the common case, it costs half
// the allocations of metadata.AppendToOutgoingContext.
func withPreviousAttempts(ctx context.Context, prev int) context.Context {
	md, ok := metadata.FromOutgoingContext(ctx) // a copy, made only if there is one
	if !ok && prev >= 1 && prev <= len(previousMD) {
		return metadata.NewOutgoingContext(ctx, previousMD[prev-1])
	}
	if !ok {
		md = metadata.MD{}
	}
	md.Append(a6.PreviousAttemptsHeader, strconv.Itoa(prev))
	return metadata.NewOutgoingContext(ctx, md)
}
