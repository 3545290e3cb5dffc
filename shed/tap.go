package shed

import (
	"context"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TapHandle returns a grpc-go tap handle (install it with
// grpc.InTapHandle) that sheds a request before grpc-go reads it.
//
// grpc-go reads, decompresses and decodes a unary request before any
// interceptor runs, so a request the interceptor sheds has already cost
// the server its reading: a small compressed request can decode to many
// megabytes. The tap handle runs as the request's headers arrive: when
// the server is at its limit, it rejects the request at once, unread.
// Otherwise it lets it through without taking a slot, and the
// interceptors, which must be installed too, admit it once it has been
// read: a client slow to send its request never holds a slot from the tap.
//
// What a tap handle can send back is a status, not trailers: its
// rejection is UNAVAILABLE with a google.rpc.RetryInfo detail for the
// pushback ([StopRetryAfter] for "don't retry"), which grpcretry and
// connectretry read (a retry waits at least its delay; one beyond their
// cap, 60s by default, ends retrying), as do Google's client libraries.
// grpc-go's built-in retry reads only the grpc-retry-pushback-ms trailer,
// which the interceptors send: behind the tap handle, its clients retry
// on their own backoff. Use the tap handle when requests are large or
// compressed and clients read RetryInfo; the interceptors alone when
// clients rely on grpc-go's retry. grpc-go takes one tap handle per
// server: to combine it with one of your own, call it from yours.
//
// It runs on the connection's reading goroutine and never blocks. It is
// safe for concurrent use.
func (s *Shedder) TapHandle() tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		pb, ok := s.gate(info.FullMethodName)
		if ok {
			return ctx, nil
		}
		return ctx, tapReject(pb)
	}
}

// tapReject is the status of a request the tap handle sheds.
func tapReject(pb Pushback) error {
	d := pb.Delay
	if pb.Stop {
		d = StopRetryAfter
	}
	st, err := status.New(codes.Unavailable, ErrOverloaded.Error()).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
	if err != nil {
		return rejectGRPC()
	}
	return st.Err()
}
