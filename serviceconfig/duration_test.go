package serviceconfig_test

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound/serviceconfig"
)

func TestParseDuration(t *testing.T) {
	const (
		badChar  = "unexpected character"
		tooLarge = "out of range: exceeds the time.Duration limit of ±9223372036.854775807s (about 292 years)"
		proto    = "out of range: a proto Duration is at most ±315576000000s"
	)
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string // a substring of the error after the quoted input
	}{
		{in: "0s", want: 0},
		{in: "-0s", want: 0},
		{in: "0.0s", want: 0},
		{in: "-0.000s", want: 0},
		{in: "1s", want: time.Second},
		{in: "0.1s", want: 100 * time.Millisecond},
		{in: "0.100s", want: 100 * time.Millisecond},
		{in: "0.000000001s", want: 1},
		{in: "1.000000001s", want: time.Second + 1},
		{in: "1.5s", want: 1500 * time.Millisecond},
		{in: "-1.5s", want: -1500 * time.Millisecond},
		{in: "-0.000000001s", want: -1},
		{in: "10s", want: 10 * time.Second},
		{in: "3600s", want: time.Hour},
		{in: "9223372036s", want: 9223372036 * time.Second},
		{in: "9223372036.854775807s", want: math.MaxInt64},
		{in: "-9223372036.854775807s", want: -math.MaxInt64},
		{in: "-9223372036.854775808s", want: math.MinInt64},
		{in: "9223372036.854775808s", wantErr: tooLarge},
		{in: "-9223372036.854775809s", wantErr: tooLarge},
		{in: "9223372037s", wantErr: tooLarge},
		{in: "-9223372037s", wantErr: tooLarge},
		{in: "315576000000s", wantErr: tooLarge}, // within the proto range, beyond time.Duration
		{in: "-315576000000s", wantErr: tooLarge},
		{in: "315576000000.999999999s", wantErr: tooLarge},
		{in: "315576000001s", wantErr: proto},
		{in: "-315576000001s", wantErr: proto},
		{in: "999999999999s", wantErr: proto},
		{in: "1000000000000s", wantErr: proto},
		{in: "99999999999999999999999999999s", wantErr: proto},
		{in: "", wantErr: "empty string"},
		{in: "1", wantErr: `missing "s" suffix`},
		{in: "1S", wantErr: `missing "s" suffix`},
		{in: "1ms", wantErr: badChar + " 'm'"},
		{in: "1m", wantErr: `missing "s" suffix`},
		{in: "s", wantErr: "missing integer part"},
		{in: "-s", wantErr: "missing integer part"},
		{in: "-", wantErr: `missing "s" suffix`},
		{in: ".1s", wantErr: "missing integer part"},
		{in: "-.1s", wantErr: "missing integer part"},
		{in: "1.s", wantErr: `missing digits after "."`},
		{in: "01s", wantErr: "leading zeros"},
		{in: "00s", wantErr: "leading zeros"},
		{in: "-01.5s", wantErr: "leading zeros"},
		{in: "+1s", wantErr: badChar + " '+'"},
		{in: "--1s", wantErr: badChar + " '-'"},
		{in: "1e3s", wantErr: badChar + " 'e'"},
		{in: "1E3s", wantErr: badChar + " 'E'"},
		{in: "1.0000000001s", wantErr: "more than 9 fractional digits"},
		{in: "0.0000000000s", wantErr: "more than 9 fractional digits"},
		{in: "1 s", wantErr: badChar + " ' '"},
		{in: " 1s", wantErr: badChar + " ' '"},
		{in: "1s ", wantErr: `missing "s" suffix`},
		{in: "0x1s", wantErr: badChar + " 'x'"},
		{in: "NaNs", wantErr: badChar + " 'N'"},
		{in: "Infs", wantErr: badChar + " 'I'"},
		{in: "-Infs", wantErr: badChar + " 'I'"},
		{in: "1.2.3s", wantErr: badChar + " '.'"},
		{in: "1,5s", wantErr: badChar + " ','"},
		{in: "1_000s", wantErr: badChar + " '_'"},
		{in: "1ss", wantErr: badChar + " 's'"},
		{in: "１s", wantErr: "byte 0xef"}, // full-width digit
		{in: "1\x00s", wantErr: badChar + " '\\x00'"},
	}
	for _, tc := range tests {
		got, err := serviceconfig.ParseDuration(tc.in)
		if tc.wantErr == "" {
			if err != nil || got != tc.want {
				t.Errorf("ParseDuration(%q) = %v, %v; want %v, nil", tc.in, got, err, tc.want)
			}
			continue
		}
		if err == nil {
			t.Errorf("ParseDuration(%q) = %v, want error containing %q", tc.in, got, tc.wantErr)
			continue
		}
		prefix := "serviceconfig: invalid duration " + strconv.Quote(tc.in) + ": "
		if msg := err.Error(); !strings.HasPrefix(msg, prefix) || !strings.Contains(msg[len(prefix):], tc.wantErr) {
			t.Errorf("ParseDuration(%q) error = %q, want %q followed by %q", tc.in, msg, prefix, tc.wantErr)
		}
	}
}

func TestParseDurationLongInput(t *testing.T) {
	in := strings.Repeat("9", 1<<20) + "s"
	_, err := serviceconfig.ParseDuration(in)
	if err == nil || len(err.Error()) > 300 {
		t.Errorf("ParseDuration(1 MiB of digits) error = %.300q, want a short error", err)
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{1, "0.000000001s"},
		{-1, "-0.000000001s"},
		{1000, "0.000001s"},
		{1001, "0.000001001s"},
		{time.Millisecond, "0.001s"},
		{100 * time.Millisecond, "0.100s"},
		{1500 * time.Millisecond, "1.500s"},
		{-1500 * time.Millisecond, "-1.500s"},
		{time.Second, "1s"},
		{time.Hour, "3600s"},
		{time.Second + time.Microsecond, "1.000001s"},
		{math.MaxInt64, "9223372036.854775807s"},
		{math.MinInt64, "-9223372036.854775808s"},
		{math.MinInt64 + 1, "-9223372036.854775807s"},
	}
	for _, tc := range tests {
		got := serviceconfig.FormatDuration(tc.in)
		if got != tc.want {
			t.Errorf("FormatDuration(%d) = %q, want %q", int64(tc.in), got, tc.want)
		}
		back, err := serviceconfig.ParseDuration(got)
		if err != nil || back != tc.in {
			t.Errorf("ParseDuration(FormatDuration(%d)) = %d, %v", int64(tc.in), int64(back), err)
		}
	}
}
