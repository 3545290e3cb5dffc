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

// previousCtxs holds contexts that carry previousMD as their outgoing
// metadata, and nothing else.
var previousCtxs = func() []context.Context {
	ctxs := make([]context.Context, len(previousMD))
	for i, md := range previousMD {
		ctxs[i] = metadata.NewOutgoingContext(context.Background(), md)
	}
	return ctxs
}()

// previousCtx is a context without outgoing metadata of its own, given the
// outgoing metadata of md, one of previousCtxs: what
// metadata.NewOutgoingContext returns in two allocations, in one, or none
// when it is part of an object the call has made anyway.
type previousCtx struct {
	context.Context
	md context.Context
}

// Value answers metadata's key from md, and every other from the context.
func (c *previousCtx) Value(key any) any {
	if v := c.md.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}

// withPreviousAttempts returns ctx for an attempt that follows prev
// others: it carries grpc-previous-rpc-attempts (A6). When ctx has no
// outgoing metadata of its own, which is the common case, it costs one
// allocation, or none given into, where metadata.AppendToOutgoingContext
// makes four.
func withPreviousAttempts(ctx context.Context, prev int) context.Context {
	return withPreviousAttemptsIn(ctx, prev, nil)
}

// withPreviousAttemptsIn is withPreviousAttempts that, in the common case,
// makes its context in *into, unless into is nil. *into must not have been
// handed out before.
func withPreviousAttemptsIn(ctx context.Context, prev int, into *previousCtx) context.Context {
	md, ok := metadata.FromOutgoingContext(ctx) // a copy, made only if there is one
	if !ok && prev >= 1 && prev <= len(previousCtxs) {
		if into == nil {
			into = new(previousCtx)
		}
		into.Context, into.md = ctx, previousCtxs[prev-1]
		return into
	}
	if !ok {
		md = metadata.MD{}
	}
	md.Append(a6.PreviousAttemptsHeader, strconv.Itoa(prev))
	return metadata.NewOutgoingContext(ctx, md)
}
