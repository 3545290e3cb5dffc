package httpretry_test

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/rebound-go/rebound/httpretry"
)

var now = time.Date(2015, 10, 21, 7, 28, 0, 0, time.UTC)

func TestParseRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"120", 120 * time.Second, true},
		{" 5\t", 5 * time.Second, true},
		{"007", 7 * time.Second, true},
		{"9223372036", 9223372036 * time.Second, true},
		{"9223372037", math.MaxInt64, true},
		{"99999999999999999999999999", math.MaxInt64, true},
		{"Wed, 21 Oct 2015 07:28:30 GMT", 30 * time.Second, true}, // IMF-fixdate
		{"Wednesday, 21-Oct-15 07:29:00 GMT", time.Minute, true},  // RFC 850
		{"Wed Oct 21 07:28:01 2015", time.Second, true},           // asctime
		{"Tue, 20 Oct 2015 07:28:00 GMT", 0, true},                // in the past
		{"Wed, 21 Oct 2015 07:28:00 GMT", 0, true},                // now
		{"", 0, false},
		{"   ", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{"1.5", 0, false},
		{"1e3", 0, false},
		{"0x10", 0, false},
		{"5 s", 0, false},
		{"١٢", 0, false}, // Arabic-Indic digits
		{"Wed, 21 Oct 2015 07:28:30 PST", 0, false},
		{"2015-10-21T07:28:30Z", 0, false},
	} {
		got, ok := httpretry.ParseRetryAfter(tc.v, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, v := range []string{
		"0", "120", "007", "9223372036", "9223372037", "18446744073709551616",
		"Wed, 21 Oct 2015 07:28:30 GMT", "Wednesday, 21-Oct-15 07:29:00 GMT", "Wed Oct 21 07:28:01 2015",
		"Mon, 01 Jan 0001 00:00:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT",
		"", " ", "-1", "+1", "1.5", "1e3", "\t7\t", "٣",
	} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := httpretry.ParseRetryAfter(v, now)
		if d < 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v, negative", v, d)
		}
		if !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v, false; want 0 when not ok", v, d)
		}
		// Short digit strings are exact seconds.
		if n, err := strconv.ParseUint(v, 10, 64); err == nil && len(v) <= 9 {
			if !ok || d != time.Duration(n)*time.Second {
				t.Fatalf("ParseRetryAfter(%q) = %v, %v; want %ds", v, d, ok, n)
			}
		}
	})
}

func BenchmarkParseRetryAfter(b *testing.B) {
	b.ReportAllocs()
	for _, v := range []string{"120", "Wed, 21 Oct 2015 07:28:30 GMT"} {
		b.Run(v[:3], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				httpretry.ParseRetryAfter(v, now)
			}
		})
	}
}
