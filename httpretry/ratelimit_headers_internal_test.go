package httpretry

import (
	"testing"
	"time"
)

func TestParseReset(t *testing.T) {
	now := time.Unix(1_700_000_000, 500_000_000)
	for _, tc := range []struct {
		v  string
		d  time.Duration
		ok bool
	}{
		{"0", 0, true},
		{" 30\t", 30 * time.Second, true},
		{"999999999", 999999999 * time.Second, true},
		{"1700000010", 9500 * time.Millisecond, true}, // a Unix time
		{"1700000000", 0, false},                      // not in the future
		{"1000000000", 0, false},
		{"99999999999999999999999", 1<<63 - 1, true},
		{"", 0, false},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"Wed, 21 Oct 2015 07:28:00 GMT", 0, false},
	} {
		d, ok := parseReset(tc.v, now)
		if d != tc.d || ok != tc.ok {
			t.Errorf("parseReset(%q) = %v, %v; want %v, %v", tc.v, d, ok, tc.d, tc.ok)
		}
	}
}

func FuzzParseReset(f *testing.F) {
	for _, v := range []string{"0", "30", "1700000010", "-1", "1.5", " 7 ", "99999999999999999999"} {
		f.Add(v)
	}
	now := time.Unix(1_700_000_000, 0)
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := parseReset(v, now)
		if d < 0 || (!ok && d != 0) {
			t.Fatalf("parseReset(%q) = %v, %v", v, d, ok)
		}
	})
}
