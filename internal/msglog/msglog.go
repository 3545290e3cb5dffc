// Package msglog keeps the request messages a streaming call has sent, so
// that a new attempt can be sent the same messages (A6 "Memory Management
// (Buffering)"). grpcretry and connectretry (both majors) keep them here,
// and count what they keep against package replay's limits. It is apart
// from package replay so that httpretry, which keeps bodies, not
// messages, does not import protobuf.
//
// A message is kept as its wire encoding, made when the application sends
// it, not as the message itself: the transports encode a message inside
// Send, so an application that reuses or changes its message after Send
// returns sees no harm without retries, and must see none with them. A
// replay decodes the encoding into a new message of the same type, so the
// server of a retry gets exactly the same message, and interceptors and
// codecs still see a proto message. Only proto messages can be kept this
// way; a front door commits a call that sends any other.
//
// Encodings live in buffers recycled through size-classed pools: keeping a
// message then costs an encoding into memory already there, not an
// allocation and its share of garbage collection, which on a loaded
// machine cost as much as the encoding. A buffer goes back to its pool
// when its Entry is freed; the front door frees entries, and decodes
// replays, under its call's lock, so no one reads a buffer once it is
// back.
package msglog

import (
	"math/bits"
	"sync"
	"unsafe"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// entryOverhead is what a kept message costs beyond its encoding: its place
// in the buffer. Counting it keeps a stream of empty messages bounded too.
const entryOverhead = int(unsafe.Sizeof(Entry{}))

// Entry is one kept message: its encoding and its type. The zero value
// holds nothing.
type Entry struct {
	data   []byte
	pooled *[]byte // data's buffer, when it came from a pool
	typ    protoreflect.MessageType
}

// Cost is what e counts against the buffer limits: the memory it holds,
// the whole capacity of its buffer, so that the limits bound real memory.
func (e Entry) Cost() int { return cap(e.data) + entryOverhead }

// Message returns a new message decoded from e. proto.Unmarshal copies
// what it keeps, so the message outlives e's buffer.
func (e Entry) Message() (any, error) {
	m := e.typ.New().Interface()
	if err := proto.Unmarshal(e.data, m); err != nil {
		return nil, err
	}
	return m, nil
}

// Free gives e's buffer back to its pool; e must not be used after.
func (e Entry) Free() {
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
		// as capacity: Cost counts it.
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

// Encode returns m's entry when m is a proto message whose cost is at most
// limit, and false otherwise: the message cannot be kept, because its type
// is unknown, it does not encode, or it is too large to fit at all.
func Encode(m any, limit int) (Entry, bool) {
	pm, ok := m.(proto.Message)
	if !ok {
		return Entry{}, false
	}
	n := proto.Size(pm)
	if n+entryOverhead > limit {
		return Entry{}, false
	}
	buf, pooled := newBuffer(n)
	e := Entry{data: buf, pooled: pooled, typ: pm.ProtoReflect().Type()}
	if e.Cost() > limit {
		e.Free()
		return Entry{}, false
	}
	// Size has just cached the sizes that Marshal needs; the application
	// may not change the message during Send.
	data, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(buf, pm)
	if err != nil || len(data) != n || cap(data) != cap(buf) {
		e.Free()
		return Entry{}, false
	}
	e.data = data
	return e, true
}

// Buffer is the replay log of one call: message i of the call (counting
// from 0) is entries[i-base]. Messages before base were freed once the
// attempt the call committed to had sent them. The zero value is empty.
// It is not safe for concurrent use.
type Buffer struct {
	entries []Entry
	base    int
	bytes   int      // the cost of the entries
	first   [1]Entry // entries' backing array while it is empty: most calls keep one message
}

// End returns the number of messages the log has taken.
func (b *Buffer) End() int { return b.base + len(b.entries) }

// Base returns the number of the first message still kept.
func (b *Buffer) Base() int { return b.base }

// Bytes returns the cost of the messages kept.
func (b *Buffer) Bytes() int { return b.bytes }

// At returns message i; Base() <= i < End().
func (b *Buffer) At(i int) Entry { return b.entries[i-b.base] }

// Push appends e.
func (b *Buffer) Push(e Entry) {
	if b.entries == nil {
		b.entries = b.first[:0]
	}
	b.entries = append(b.entries, e)
	b.bytes += e.Cost()
}

// FreeBefore frees the messages before i and returns their cost.
func (b *Buffer) FreeBefore(i int) int {
	k := min(max(i-b.base, 0), len(b.entries))
	if k == 0 {
		return 0
	}
	freed := 0
	for j := range k {
		freed += b.entries[j].Cost()
		b.entries[j].Free()
		b.entries[j] = Entry{}
	}
	b.entries = b.entries[k:]
	if len(b.entries) == 0 {
		b.entries = nil // let the backing array go
	}
	b.base += k
	b.bytes -= freed
	return freed
}
