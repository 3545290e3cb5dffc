package grpcretry

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"
)

// A streaming call keeps what the application sent, as its encoding in a
// replay.Buffer, so that a new attempt can be sent the same messages (A6
// "Memory Management (Buffering)"; see package replay). Only proto messages
// can be kept; any other commits the call (see stream.go).

// A unary or server-streaming call keeps nothing: the application's one
// request message stays in the call's hands until the call ends. Its
// encoded size still counts against both buffer limits, as A6 asks, so
// that the limits bound what retries hold on to: a request that does not
// fit is sent once and not retried or hedged. A hedged call and a server
// stream count it from the start; a retried unary call from its first
// failure, when a retry first needs it (see unaryCall.buffer).

// release gives back n bytes of the client's buffer.
func (c *Client) release(n int) { c.buffers.Release(n) }

// reserveRequest takes the room of a one-message call's request in the
// buffer, and reports how much it took and whether the request fits: it
// does not when it is larger than the per-call limit or than what is left
// of the total. A request whose size cannot be told is taken to fit, and
// takes nothing.
func (c *Client) reserveRequest(req any, opts []grpc.CallOption) (int, bool) {
	n, ok := requestSize(req, opts)
	if !ok {
		return 0, true
	}
	if !c.buffers.Reserve(0, n) {
		return 0, false
	}
	return n, true
}

// requestSize returns the encoded size of req: proto.Size for a proto
// message, or else the length of its encoding by the codec the call
// options name. It reports false when there is no such codec (one set on
// the ClientConn with grpc.WithDefaultCallOptions is out of an
// interceptor's sight) or the request does not encode.
func requestSize(req any, opts []grpc.CallOption) (int, bool) {
	if m, ok := req.(proto.Message); ok {
		return proto.Size(m), true
	}
	var codec encoding.CodecV2
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.ForceCodecV2CallOption:
			codec = o.CodecV2
		case grpc.ForceCodecCallOption:
			data, err := o.Codec.Marshal(req)
			return len(data), err == nil
		case grpc.ContentSubtypeCallOption:
			if codec == nil {
				codec = encoding.GetCodecV2(o.ContentSubtype)
			}
		}
	}
	if codec == nil {
		return 0, false
	}
	data, err := codec.Marshal(req)
	if err != nil {
		return 0, false
	}
	n := data.Len()
	data.Free()
	return n, true
}
