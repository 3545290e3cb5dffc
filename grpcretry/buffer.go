package grpcretry

import (
	"unsafe"

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

// entryOverhead is what a kept message costs beyond its encoding: its place
// in the buffer. Counting it keeps a stream of empty messages bounded too.
const entryOverhead = int(unsafe.Sizeof(entry{}))

// entry is one kept message: its encoding and its type.
type entry struct {
	data []byte
	typ  protoreflect.MessageType
}

// cost is what e counts against the buffer limits: the memory it holds.
// The encoding's capacity is its allocation, rounded up to the
// allocator's size class (a 32 KiB message and a few bytes take 40 KiB),
// so that the limits bound real memory.
func (e entry) cost() int { return cap(e.data) + entryOverhead }

// message returns a new message decoded from e.
func (e entry) message() (any, error) {
	m := e.typ.New().Interface()
	if err := proto.Unmarshal(e.data, m); err != nil {
		return nil, err
	}
	return m, nil
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
	// append, unlike make, gives the whole size class as capacity.
	buf := append([]byte(nil), make([]byte, n)...)[:0]
	if cap(buf)+entryOverhead > limit {
		return entry{}, false
	}
	// Size has just cached the sizes that Marshal needs; the application
	// may not change the message during SendMsg.
	data, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(buf, pm)
	if err != nil || len(data) != n {
		return entry{}, false
	}
	return entry{data: data, typ: pm.ProtoReflect().Type()}, true
}

// buffer is the replay log of one call: message i of the call (counting
// from 0) is entries[i-base]. Messages before base were freed once the
// attempt the call committed to had sent them. The zero value is empty.
// It is not safe for concurrent use.
type buffer struct {
	entries []entry
	base    int
	bytes   int // the cost of the entries
}

// end returns the number of messages the log has taken.
func (b *buffer) end() int { return b.base + len(b.entries) }

// at returns message i; base <= i < end.
func (b *buffer) at(i int) entry { return b.entries[i-b.base] }

// push appends e.
func (b *buffer) push(e entry) {
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
