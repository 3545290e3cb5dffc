package bounded

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

func TestBoundAndRecency(t *testing.T) {
	m := New[string, int](8)
	absent := errors.New("absent")
	has := func(k string) bool {
		_, err := m.Get(k, func() (int, error) { return 0, absent })
		return err == nil
	}
	for i := range 8 {
		if v, _ := m.Get(fmt.Sprint(i), func() (int, error) { return i, nil }); v != i {
			t.Fatalf("Get(%d) = %d", i, v)
		}
	}
	m.Get("x", func() (int, error) { return -1, nil }) // full: evicts one
	if m.Len() != 8 {
		t.Fatalf("Len %d, want 8", m.Len())
	}
	var used []string // what is left of 0..3, used again
	for i := range 4 {
		if k := fmt.Sprint(i); has(k) {
			used = append(used, k)
		}
	}
	m.Get("y", func() (int, error) { return -2, nil })
	for _, k := range append(used, "x") {
		if !has(k) {
			t.Fatalf("%s, used since the last eviction, was evicted", k)
		}
	}
	for i := range 10_000 {
		m.Get(fmt.Sprint("k", i), func() (int, error) { return i, nil })
	}
	if m.Len() > 8 {
		t.Fatalf("Len %d, want at most 8", m.Len())
	}
}

func TestMakeError(t *testing.T) {
	m := New[string, int](2)
	boom := errors.New("boom")
	if _, err := m.Get("a", func() (int, error) { return 0, boom }); err != boom || m.Len() != 0 {
		t.Fatalf("Get = %v with %d entries, want boom and none kept", err, m.Len())
	}
}

func TestConcurrent(t *testing.T) {
	m := New[int, int](16)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				k := (i * (g + 1)) % 64
				if v, _ := m.Get(k, func() (int, error) { return k, nil }); v != k {
					t.Errorf("Get(%d) = %d", k, v)
					return
				}
			}
		}()
	}
	wg.Wait()
	if m.Len() > 16 {
		t.Fatalf("Len %d, want at most 16", m.Len())
	}
}

func BenchmarkGetPresent(b *testing.B) {
	m := New[string, int](DefaultMax)
	m.Get("host", func() (int, error) { return 1, nil })
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Get("host", nil)
		}
	})
}
