package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// jsonSpan is what the test reads of a span in the trace file.
type jsonSpan struct {
	Name        string
	SpanContext struct{ SpanID string }
	Parent      struct{ SpanID string }
	Events      []struct{ Name string }
}

func TestDemoTrace(t *testing.T) {
	file := filepath.Join(t.TempDir(), "trace.json")
	var out bytes.Buffer
	if err := writeDemoTrace(context.Background(), &out, file); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var spans []jsonSpan
	for dec := json.NewDecoder(f); ; {
		var s jsonSpan
		if err := dec.Decode(&s); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		spans = append(spans, s)
	}
	const call, attempt = "Sent.grpc.testing.TestService.UnaryCall", "Attempt.grpc.testing.TestService.UnaryCall"
	var calls []jsonSpan
	for _, s := range spans {
		if s.Name == call {
			calls = append(calls, s)
		}
	}
	if len(calls) != 2 {
		t.Fatalf("%d call spans, want 2 (retried, hedged):\n%s", len(calls), out.String())
	}
	// The retried call: three attempts; the hedged one: two, the first
	// cancelled when the hedge won.
	wantEvents := [][]string{
		{"backoff started", "pushback received", "backoff started"},
		{"hedge sent", "committed", "hedge cancelled"},
	}
	for i, c := range calls {
		n := 0
		for _, s := range spans {
			if s.Parent.SpanID == c.SpanContext.SpanID {
				n++
				if s.Name != attempt {
					t.Errorf("child %q of call %d", s.Name, i+1)
				}
			}
		}
		if want := []int{3, 2}[i]; n != want {
			t.Errorf("call %d: %d attempt spans, want %d", i+1, n, want)
		}
		var got []string
		for _, e := range c.Events {
			got = append(got, e.Name)
		}
		if !slices.Equal(got, wantEvents[i]) {
			t.Errorf("call %d events %q, want %q", i+1, got, wantEvents[i])
		}
	}
	text := out.String()
	for _, want := range []string{call + "  OK", "├─ " + attempt + " previous-rpc-attempts=0  UNAVAILABLE", "· pushback received 20ms (attempt 2)", "· hedge cancelled (attempt 1)"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
}

func TestDemoTraceFlag(t *testing.T) {
	file := filepath.Join(t.TempDir(), "trace.json")
	out, stderr, code := runCLI(t, "demo", "-duration", "100ms", "-rate", "50", "-outage", "0", "-svg", "", "-trace", file)
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, stderr)
	}
	if !strings.Contains(out, "Traces of one retried and one hedged call (spans in "+file+")") {
		t.Errorf("output lacks the traces:\n%s", out)
	}
	if fi, err := os.Stat(file); err != nil || fi.Size() == 0 {
		t.Errorf("trace file: %v, %v", fi, err)
	}
}
