package grpcretry

import (
	"math/bits"
	"sync"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// A streaming call keeps what the application sent so that a new attempt
// can be sent the same messages (A6 "Memory Management (Buffering)").
//
// A message is kept as its wire encoding, made when the application sends
// it, not as the message itself: grpc-go encodes a message inside SendMsg,
// so an application that reuses or changes its message after SendMsg
// returns sees no harm without retries, and must see none with them. A
// replay decodes the encoding into a new message of the same type, so the
// server of a retry gets exactly the same message, and stats handlers and
// codecs still see a proto message. Only proto messages can be kept this
// way; any other message commits the call (see stream.go).
//
// Encodings live in buffers recycled through size-classed pools: keeping a
// message then costs an encoding into memory already there, not an
// allocation and its share of garbage collection, which on a loaded
// machine cost as much as the encoding. A buffer goes back to its pool
// when the message is freed, under the call's lock; replays decode under
// that lock too, so no one reads a buffer once it is back.

// entryOverhead is what a kept message costs beyond its encoding: its place
// in the buffer. Counting it keeps a stream of empty messages bounded too.
const entryOverhead = int(unsafe.Sizeof(entry{}))

// entry is one kept message: its encoding and its type.
type entry struct {
	data   []byte
	pooled *[]byte // data's buffer, when it came from a pool
	typ    protoreflect.MessageType
}

// cost is what e counts against the buffer limits: the memory it holds,
// the whole capacity of its buffer, so that the limits bound real memory.
func (e entry) cost() int { return cap(e.data) + entryOverhead }

// message returns a new message decoded from e. proto.Unmarshal copies
// what it keeps, so the message outlives e's buffer.
func (e entry) message() (any, error) {
	m := e.typ.New().Interface()
	if err := proto.Unmarshal(e.data, m); err != nil {
		return nil, err
	}
	return m, nil
}

// free gives e's buffer back to its pool; e must not be used after.
func (e entry) free() {
	if e.pooled != nil {
		*e.pooled = e.data[:0]
		pools[poolClass(cap(e.data))].Put(e.pooled)
	}
}

// Buffers of more than pooledMin and at most pooledMax bytes are pooled,
// in classes a quarter of a power of two apart: a buffer is at most 25%
// larger than the encoding it holds. Smaller encodings cost little to
// allocate; larger ones are rare and kept only under raised limits.
const (
	pooledMinLog = 9
	pooledMaxLog = 22
	pooledMin    = 1 << pooledMinLog // 512 B
	pooledMax    = 1 << pooledMaxLog // 4 MiB
)

var pools [(pooledMaxLog - pooledMinLog) * 4]sync.Pool

// poolSize returns the capacity of the class that holds n bytes,
// pooledMin < n <= pooledMax: n rounded up to a quarter of the power of
// two below it.
func poolSize(n int) int {
	step := 1 << (bits.Len(uint(n-1)) - 3)
	return (n + step - 1) / step * step
}

// poolClass returns the index of the class of capacity size (a poolSize).
func poolClass(size int) int {
	k := bits.Len(uint(size-1)) - 1 // size is in (2^k, 2^(k+1)]
	return (k-pooledMinLog)*4 + size>>(k-2) - 5
}

// newBuffer returns an empty buffer with room for n bytes, and the pool
// handle to give it back with, if it is pooled.
func newBuffer(n int) ([]byte, *[]byte) {
	if n <= pooledMin || n > pooledMax {
		// append, unlike make, gives the allocator's whole size class
		// as capacity: cost counts it.
		return append([]byte(nil), make([]byte, n)...)[:0], nil
	}
	size := poolSize(n)
	p, _ := pools[poolClass(size)].Get().(*[]byte)
	if p == nil {
		b := make([]byte, 0, size)
		p = &b
	}
	return (*p)[:0], p
}

// encode returns m's entry when m is a proto message whose cost is at most
// limit, and false otherwise: the message cannot be kept, because its type
// is unknown, it does not encode, or it is too large to fit at all.
func encode(m any, limit int) (entry, bool) {
	pm, ok := m.(proto.Message)
	if !ok {
		return entry{}, false
	}
	n := proto.Size(pm)
	if n+entryOverhead > limit {
		return entry{}, false
	}
	buf, pooled := newBuffer(n)
	e := entry{data: buf, pooled: pooled, typ: pm.ProtoReflect().Type()}
	if e.cost() > limit {
		e.free()
		return entry{}, false
	}
	// Size has just cached the sizes that Marshal needs; the application
	// may not change the message during SendMsg.
	data, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(buf, pm)
	if err != nil || len(data) != n || cap(data) != cap(buf) {
		e.free()
		return entry{}, false
	}
	e.data = data
	return e, true
}

// buffer is the replay log of one call: message i of the call (counting
// from 0) is entries[i-base]. Messages before base were freed once the
// attempt the call committed to had sent them. The zero value is empty.
// It is not safe for concurrent use.
type buffer struct {
	entries []entry
	base    int
	bytes   int      // the cost of the entries
	first   [1]entry // entries' backing array while it is empty: most calls keep one message
}

// end returns the number of messages the log has taken.
func (b *buffer) end() int { return b.base + len(b.entries) }

// at returns message i; base <= i < end.
func (b *buffer) at(i int) entry { return b.entries[i-b.base] }

// push appends e.
func (b *buffer) push(e entry) {
	if b.entries == nil {
		b.entries = b.first[:0]
	}
	b.entries = append(b.entries, e)
	b.bytes += e.cost()
}

// freeBefore frees the messages before i and returns their cost.
func (b *buffer) freeBefore(i int) int {
	k := min(max(i-b.base, 0), len(b.entries))
	if k == 0 {
		return 0
	}
	freed := 0
	for j := range k {
		freed += b.entries[j].cost()
		b.entries[j].free()
		b.entries[j] = entry{}
	}
	b.entries = b.entries[k:]
	if len(b.entries) == 0 {
		b.entries = nil // let the backing array go
	}
	b.base += k
	b.bytes -= freed
	return freed
}

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
