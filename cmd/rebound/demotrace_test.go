package main

import (
	"bytes"
	"context"
	"encoding/json"
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
	checkTraceFile(t, file)
	const call, attempt = "Sent.grpc.testing.TestService.UnaryCall", "Attempt.grpc.testing.TestService.UnaryCall"
	text := out.String()
	for _, want := range []string{call + "  OK", "├─ " + attempt + " previous-rpc-attempts=0  UNAVAILABLE", "· pushback received 20ms (attempt 2)", "· hedge cancelled (attempt 1)"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
}

// checkTraceFile checks that file holds one JSON document, an array of the
// spans of one retried and one hedged call: the retried call's three
// attempts, and the hedged call's two, the first cancelled when the hedge
// won.
func checkTraceFile(t *testing.T, file string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var spans []jsonSpan
	if err := json.Unmarshal(data, &spans); err != nil {
		t.Fatalf("the trace file is not one JSON array of spans: %v", err)
	}
	const call, attempt = "Sent.grpc.testing.TestService.UnaryCall", "Attempt.grpc.testing.TestService.UnaryCall"
	var calls []jsonSpan
	for _, s := range spans {
		if s.Name == call {
			calls = append(calls, s)
		}
	}
	if len(calls) != 2 {
		t.Fatalf("%d call spans, want 2 (retried, hedged)", len(calls))
	}
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
}
