package serviceconfig_test

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/serviceconfig"
)

// hostile are inputs built to make a parser slow or greedy, each about size
// bytes: they are what issue 13.1 measured (1M unknown keys, huge ignored
// subtrees, 1M duplicate codes, multi-megabyte keys), plus a large valid
// config and a list of bad values.
func hostile(size int) []struct {
	name string
	data []byte
} {
	var out []struct {
		name string
		data []byte
	}
	add := func(name string, b *strings.Builder) {
		out = append(out, struct {
			name string
			data []byte
		}{name, []byte(b.String())})
	}
	var b strings.Builder

	b.WriteString(`{"methodConfig":[{"name":[{}]}]`)
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, `,"k%07d":0`, i)
	}
	b.WriteString("}")
	add("unknown_keys", &b)

	b.Reset()
	b.WriteString(`{"methodConfig":[{"name":[{}],"future":[`)
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"a":[1,2.5,"three",{"b":null,"c":[true,false]}],"d":"\u00e9\n"}`)
	}
	b.WriteString("]}]}")
	add("ignored_subtree", &b)

	b.Reset()
	b.WriteString(`{"methodConfig":[{"name":[{}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"`)
	for b.Len() < size {
		b.WriteString(`,"UNAVAILABLE",14`)
	}
	b.WriteString("]}}]}")
	add("duplicate_codes", &b)

	b.Reset()
	b.WriteString(`{"methodConfig":[{"name":[{}],"retryPolicy":{"`)
	b.WriteString(strings.Repeat("k", size/2))
	b.WriteString(`":1,"maxAttempts":"`)
	b.WriteString(strings.Repeat("v", size/2))
	b.WriteString(`"}}]}`)
	add("huge_key_and_value", &b)

	b.Reset()
	b.WriteString(`{"methodConfig":[`)
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"name":[{"service":"pkg.Service%d","method":"Get"},{"service":"pkg.Service%d","method":"List"}],`+
			`"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]},"timeout":"2s"}`, i, i)
	}
	b.WriteString("]}")
	add("valid_methods", &b)

	// The smallest valid entries name no method: Parse leaves them out,
	// where a 72-byte MethodConfig for each 3 bytes of input would be 24x.
	b.Reset()
	b.WriteString(`{"methodConfig":[{}`)
	for b.Len() < size {
		b.WriteString(`,{}`)
	}
	b.WriteString("]}")
	add("empty_entries", &b)

	// The smallest entries that name a method, all the default name: a
	// MethodConfig and a Name for each 13 bytes, though the duplicates
	// make the config invalid.
	b.Reset()
	b.WriteString(`{"methodConfig":[{"name":[{}]}`)
	for b.Len() < size {
		b.WriteString(`,{"name":[{}]}`)
	}
	b.WriteString("]}")
	add("named_entries", &b)

	b.Reset()
	b.WriteString(`{"methodConfig":[{"name":[{}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":[`)
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"NOPE",99`)
	}
	b.WriteString("]}}]}")
	add("invalid_codes", &b)
	return out
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Parse keeps at most 100 errors and 100 warnings, counts the rest, shortens
// what it quotes and allocates a small multiple of its input.
func TestParseBounds(t *testing.T) {
	const size = 1 << 20
	for _, in := range hostile(size) {
		t.Run(in.name, func(t *testing.T) {
			var c *serviceconfig.Config
			var err error
			n := allocated(func() { c, err = serviceconfig.Parse(in.data) })
			limit := 10 * uint64(len(in.data))
			if n > limit {
				t.Errorf("Parse of %d bytes allocated %d bytes, more than %dx", len(in.data), n, limit/uint64(len(in.data)))
			}
			var errs []*serviceconfig.Error
			var warns []serviceconfig.Warning
			if err != nil {
				pe := err.(*serviceconfig.ParseError)
				errs, warns = pe.Errors, pe.Warnings
			} else {
				warns = c.Warnings
			}
			if len(errs) > 101 || len(warns) > 101 {
				t.Errorf("%d errors and %d warnings, want at most 100 each and a summary", len(errs), len(warns))
			}
			for _, e := range errs {
				if len(e.Error()) > 400 {
					t.Errorf("error of %d bytes: %.100s...", len(e.Error()), e.Error())
				}
			}
			for _, w := range warns {
				if len(w.String()) > 400 {
					t.Errorf("warning of %d bytes: %.100s...", len(w.String()), w.String())
				}
			}
		})
	}
}

func TestParseProblemCaps(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"methodConfig":[{"name":[{}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":[14`)
	for range 1000 {
		b.WriteString(`,99,"UNAVAILABLE"`)
	}
	b.WriteString(`]}}]`)
	for i := range 300 {
		fmt.Fprintf(&b, `,"k%d":0`, i)
	}
	b.WriteString(`}`)
	_, err := serviceconfig.Parse([]byte(b.String()))
	pe, ok := err.(*serviceconfig.ParseError)
	if !ok {
		t.Fatalf("Parse error %T %v, want *ParseError", err, err)
	}
	if len(pe.Errors) != 101 || pe.Errors[100].Error() != "serviceconfig: and 900 more errors" {
		t.Fatalf("%d errors, the last %v; want 100 and a summary of 900 more", len(pe.Errors), pe.Errors[len(pe.Errors)-1])
	}
	// The first 100 in document order are kept: elements 1, 3, 5, ...
	for i, e := range pe.Errors[:100] {
		if want := fmt.Sprintf("methodConfig[0].retryPolicy.retryableStatusCodes[%d]", 2*i+1); e.Path != want {
			t.Fatalf("error %d at %s, want %s", i, e.Path, want)
		}
	}
	// 1000 duplicate codes and 300 unknown keys: the first 100 duplicates.
	if len(pe.Warnings) != 101 || pe.Warnings[100].String() != "and 1200 more warnings" {
		t.Fatalf("%d warnings, the last %v; want 100 and a summary of 1200 more", len(pe.Warnings), pe.Warnings[len(pe.Warnings)-1])
	}
	if w := pe.Warnings[0]; w.Path != "methodConfig[0].retryPolicy.retryableStatusCodes[2]" || w.Line != 1 || w.Column == 0 {
		t.Errorf("first warning %+v", w)
	}
}

func TestParseMaxBytes(t *testing.T) {
	big := []byte(`{"x":"` + strings.Repeat(" ", serviceconfig.DefaultMaxBytes) + `"}`)
	_, err := serviceconfig.Parse(big)
	want := fmt.Sprintf("serviceconfig: the config is %d bytes, more than the limit of %d bytes (set with serviceconfig.MaxBytes)", len(big), serviceconfig.DefaultMaxBytes)
	if err == nil || err.Error() != want {
		t.Errorf("Parse of %d bytes: %v, want %q", len(big), err, want)
	}
	if _, err := serviceconfig.Parse(big, serviceconfig.MaxBytes(len(big))); err != nil {
		t.Errorf("Parse with MaxBytes(%d): %v", len(big), err)
	}
	small := []byte(`{"methodConfig":[]}`)
	if _, err := serviceconfig.Parse(small, serviceconfig.MaxBytes(len(small)-1)); err == nil || !strings.Contains(err.Error(), "more than the limit of 18 bytes") {
		t.Errorf("Parse with MaxBytes(18) of 19 bytes: %v", err)
	}
	if _, err := serviceconfig.Parse(small, serviceconfig.MaxBytes(0)); err != nil {
		t.Errorf("MaxBytes(0) means the default: %v", err)
	}
}

// BenchmarkParseHostile reports throughput (MB/s of wall time, and
// MB/cpu-s of the process's CPU time, GC included) and allocated bytes per
// input byte (alloc-B/B) of Parse on each hostile input of 16 MiB.
func BenchmarkParseHostile(b *testing.B) {
	for _, in := range hostile(16 << 20) {
		b.Run(in.name, func(b *testing.B) {
			b.SetBytes(int64(len(in.data)))
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			cpu := cpuTime()
			for b.Loop() {
				_, _ = serviceconfig.Parse(in.data, serviceconfig.MaxBytes(math.MaxInt))
			}
			if cpu = cpuTime() - cpu; cpu > 0 {
				b.ReportMetric(float64(len(in.data))*float64(b.N)/1e6/cpu.Seconds(), "MB/cpu-s")
			}
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/float64(len(in.data)), "alloc-B/B")
		})
	}
}
