package msglog

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Every size that is pooled maps to a class whose capacity holds it, at
// most 25% larger, and every class index is in range.
func TestPoolClasses(t *testing.T) {
	for n := pooledMin + 1; n <= pooledMax; n += 1 + n/97 {
		size := poolSize(n)
		if size < n || size > n+n/4 {
			t.Fatalf("poolSize(%d) = %d, want within [n, 1.25n]", n, size)
		}
		c := poolClass(size)
		if c < 0 || c >= len(pools) {
			t.Fatalf("poolClass(%d) = %d, out of range", size, c)
		}
		if poolSize(size) != size {
			t.Fatalf("poolSize(%d) = %d: a class size must map to itself", size, poolSize(size))
		}
	}
}

// A kept message decodes into a new message equal to the one sent, small
// or pooled, and one that does not fit the limit, or is not a proto
// message, is not kept.
func TestEncode(t *testing.T) {
	for _, n := range []int{0, 10, pooledMin, 4 * pooledMin} {
		m := wrapperspb.String(strings.Repeat("x", n))
		e, ok := Encode(m, 1<<30)
		if !ok {
			t.Fatalf("%d bytes: not kept", n)
		}
		got, err := e.Message()
		if err != nil || !proto.Equal(got.(proto.Message), m) {
			t.Fatalf("%d bytes: decoded %v, %v", n, got, err)
		}
		if e.Cost() < proto.Size(m) {
			t.Fatalf("%d bytes: cost %d below the encoding's size", n, e.Cost())
		}
		e.Free()
	}
	if _, ok := Encode(wrapperspb.String(strings.Repeat("x", 100)), 50); ok {
		t.Fatal("a message over the limit was kept")
	}
	if _, ok := Encode("not proto", 1<<30); ok {
		t.Fatal("a message that is not proto was kept")
	}
}

// FreeBefore frees from the front and keeps numbering messages from the
// call's start.
func TestBuffer(t *testing.T) {
	var b Buffer
	for i := range 3 {
		e, _ := Encode(wrapperspb.Int32(int32(i)), 1<<20)
		b.Push(e)
	}
	if b.End() != 3 || b.Base() != 0 || b.Bytes() == 0 {
		t.Fatalf("end %d, base %d, bytes %d", b.End(), b.Base(), b.Bytes())
	}
	before := b.Bytes()
	freed := b.FreeBefore(2)
	if b.Base() != 2 || b.End() != 3 || b.Bytes() != before-freed {
		t.Fatalf("after FreeBefore(2): base %d, end %d, bytes %d (freed %d of %d)", b.Base(), b.End(), b.Bytes(), freed, before)
	}
	m, err := b.At(2).Message()
	if err != nil || m.(*wrapperspb.Int32Value).GetValue() != 2 {
		t.Fatalf("message 2 is %v, %v", m, err)
	}
	b.FreeBefore(b.End())
	if b.Bytes() != 0 || b.entries != nil {
		t.Fatal("an emptied buffer still holds entries")
	}
}
