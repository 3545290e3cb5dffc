package httpretry

import (
	"context"
	"io"
	"testing"
	"time"
)

// stalled is a body whose data never comes: a read blocks until Close.
func stalled() (*io.PipeReader, *io.PipeWriter) { return io.Pipe() }

// The drain ends when the request's context does, however long its own
// timeout, and leaves the body closed.
func TestDrainEndsWithContext(t *testing.T) {
	body, w := stalled()
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		drain(ctx, body, time.Hour)
	}()
	// The drain reads the first bytes, then waits for more.
	if _, err := w.Write([]byte("partial")); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-returned
	if _, err := w.Write([]byte("x")); err != io.ErrClosedPipe {
		t.Fatalf("writing after the drain: %v, want the body closed", err)
	}
}

// The drain ends at its timeout when the body stalls.
func TestDrainEndsAtTimeout(t *testing.T) {
	body, w := stalled()
	defer w.Close()
	drain(context.Background(), body, time.Millisecond)
	if _, err := w.Write([]byte("x")); err != io.ErrClosedPipe {
		t.Fatalf("writing after the drain: %v, want the body closed", err)
	}
}

// The drain reads at most one byte past the limit, then closes.
func TestDrainStopsAtLimit(t *testing.T) {
	body, w := stalled()
	written := make(chan int64)
	go func() {
		n, _ := io.Copy(w, zeros{})
		written <- n
	}()
	drain(context.Background(), body, time.Hour)
	if n := <-written; n > drainLimit+1 {
		t.Fatalf("%d bytes read, want at most %d", n, drainLimit+1)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }
