package gopanic

import (
	"errors"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
)

func TestRunPanic(t *testing.T) {
	var got *Panic
	Run(func() { panic(io.ErrUnexpectedEOF) }, func(p *Panic) { got = p })
	if got == nil || got.Value != io.ErrUnexpectedEOF || !errors.Is(got, io.ErrUnexpectedEOF) {
		t.Fatalf("got %#v, want the panic's value", got)
	}
	// The stack is the panicking goroutine's, down to the panic.
	if !strings.Contains(string(got.Stack), "TestRunPanic.func1") || !strings.Contains(got.Error(), io.ErrUnexpectedEOF.Error()) {
		t.Fatalf("message %q lacks the value or the panic's frame", got.Error())
	}
}

func TestRunReturns(t *testing.T) {
	called := false
	Run(func() {}, func(*Panic) { called = true })
	if called {
		t.Fatal("handle called for a function that returned")
	}
}

func TestRunPanicNil(t *testing.T) {
	var got *Panic
	Run(func() { panic(nil) }, func(p *Panic) { got = p })
	var pn *runtime.PanicNilError
	if got == nil || got.goexit || !errors.As(got, &pn) {
		t.Fatalf("got %#v, want the runtime's PanicNilError", got)
	}
}

// TestRaiseAgain: raised on the caller's goroutine, a Panic is what the
// caller recovers, its value kept; raised again on a goroutine of the
// call, it is carried as it is.
func TestRaiseAgain(t *testing.T) {
	p := &Panic{Value: "boom", Stack: []byte("stack")}
	var carried *Panic
	Run(p.Raise, func(q *Panic) { carried = q })
	if carried != p {
		t.Fatalf("carried %#v, want the Panic itself", carried)
	}
	defer func() {
		r := recover()
		if r != p || !strings.HasPrefix(p.Error(), "boom\n") || !strings.Contains(p.Error(), "stack") {
			t.Fatalf("recovered %v", r)
		}
	}()
	p.Raise()
}

// TestGoexit: a goroutine's runtime.Goexit is handed over as such, and
// raising it ends the raising goroutine the same way.
func TestGoexit(t *testing.T) {
	var (
		wg  sync.WaitGroup
		got *Panic
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		Run(runtime.Goexit, func(p *Panic) { got = p })
		t.Error("Run returned after runtime.Goexit")
	}()
	wg.Wait()
	if got == nil || !got.goexit {
		t.Fatalf("got %#v, want a Goexit", got)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		got.Raise()
		t.Error("Raise of a Goexit returned")
	}()
	wg.Wait()
}
