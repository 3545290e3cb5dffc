package serviceconfig

import (
	"math"
	"math/big"
	"regexp"
	"testing"
)

func TestMilli(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"-0", 0},
		{"0.5466", 546},
		{"0.1", 100},
		{"1e-1", 100},
		{"0.29", 290},
		{"0.0009", 0},
		{"0.001", 1},
		{"-0.0019", -1},
		{"5466E-4", 546},
		{"0.05466e+1", 546},
		{"1", 1000},
		{"1000", 1000000},
		{"0.99999999999999999999", 999},
		{"9223372036854775.807", math.MaxInt64},
		{"9223372036854775.806", math.MaxInt64 - 1},
		{"9223372036854775.808", math.MaxInt64},
		{"-9223372036854775.807", -math.MaxInt64},
		{"1e15", 1e18},
		{"1e16", math.MaxInt64},
		{"1e999999999999999999999", math.MaxInt64},
		{"1e-999999999999999999999", 0},
		{"123456789012345678901234567890e-30", 123},
		{"1234567890123456789012.345", math.MaxInt64},
		{"00", 0}, // not valid JSON, but splitNumber must not care
	}
	for _, tc := range tests {
		if got := splitNumber(tc.in).milli(); got != tc.want {
			t.Errorf("milli(%s) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

var jsonNumberRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?([0-9]+))?$`)

// FuzzMilli checks the exact decimal truncation against math/big.
func FuzzMilli(f *testing.F) {
	for _, s := range []string{"0.5466", "1e-1", "0.29", "-12.3456e2", "9223372036854775.807", "1e16", "0.0009"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m := jsonNumberRE.FindStringSubmatch(s)
		if m == nil || len(m[4]) > 4 { // keep big.Rat's work small
			return
		}
		n := splitNumber(s)
		r, ok := new(big.Rat).SetString(s)
		if !ok {
			t.Fatalf("big.Rat cannot parse %q", s)
		}
		if got, want := n.isZero(), r.Sign() == 0; got != want {
			t.Errorf("isZero(%s) = %v, want %v", s, got, want)
		}
		if got, want := n.isInteger(), m[2] == "" && m[3] == ""; got != want {
			t.Errorf("isInteger(%s) = %v, want %v", s, got, want)
		}
		r.Mul(r, big.NewRat(1000, 1))
		q := new(big.Int).Quo(r.Num(), r.Denom()) // truncates toward zero
		want := int64(math.MaxInt64)
		switch {
		case q.IsInt64() && q.Int64() != math.MinInt64:
			want = q.Int64()
		case q.Sign() < 0:
			want = -math.MaxInt64
		}
		if got := n.milli(); got != want {
			t.Errorf("milli(%s) = %d, want %d", s, got, want)
		}
	})
}
