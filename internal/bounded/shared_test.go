package bounded

import (
	"errors"
	"runtime"
	"testing"
	"time"
)

func TestSharedSameKeySameValue(t *testing.T) {
	var s Shared[string, int]
	made := 0
	mk := func() (*int, error) { made++; return new(int), nil }
	a, _ := s.Get("a", mk)
	a2, _ := s.Get("a", mk)
	b, _ := s.Get("b", mk)
	if a != a2 || a == b || made != 2 {
		t.Fatalf("a=%p a2=%p b=%p made=%d, want a==a2!=b and 2 made", a, a2, b, made)
	}
	if _, err := s.Get("c", func() (*int, error) { return nil, errors.New("bad") }); err == nil {
		t.Fatal("Get kept quiet about mk's error")
	}
	if n := s.Len(); n != 2 {
		t.Fatalf("Len = %d after an error, want 2", n)
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
}

func TestSharedDropsCollected(t *testing.T) {
	var s Shared[int, [64]byte]
	for i := range 100 {
		if _, err := s.Get(i, func() (*[64]byte, error) { return new([64]byte), nil }); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Len() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 100 unheld values still registered", s.Len())
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}
