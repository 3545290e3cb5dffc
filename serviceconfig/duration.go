package serviceconfig

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// maxProtoSeconds bounds the seconds of a google.protobuf.Duration
// (about 10,000 years).
const maxProtoSeconds = 315_576_000_000

// ParseDuration parses the proto3 JSON form of a google.protobuf.Duration:
// decimal seconds followed by "s", such as "0.1s", "1s", "-1.5s" or
// "1.000000001s".
//
// The numeric part must be a JSON number without an exponent, as A6
// requires: an optional '-', an integer part without leading zeros, and an
// optional '.' followed by one to nine digits. So "1", "s", "1.s", ".5s",
// "01s", "+1s", "1e3s", "1 s" and "1.0000000001s" are all rejected.
//
// The proto range is ±315,576,000,000s, but a time.Duration holds only about
// ±292 years (±9223372036.854775807s). A value outside the time.Duration
// range is an error naming that limit, whether or not it fits the proto
// range; it is never truncated, saturated or wrapped around.
func ParseDuration(s string) (time.Duration, error) {
	d, err := parseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("serviceconfig: invalid duration %q: %w", excerpt(s), err)
	}
	return d, nil
}

var (
	errDurationRange      = errors.New("out of range: exceeds the time.Duration limit of ±9223372036.854775807s (about 292 years)")
	errDurationProtoRange = errors.New("out of range: a proto Duration is at most ±315576000000s")
)

// parseDuration is ParseDuration without the prefix and quoting in errors,
// so that Parse can put the JSON path in front.
func parseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New(`empty string; want decimal seconds ending in "s", like "1.5s"`)
	}
	if s[len(s)-1] != 's' {
		return 0, errors.New(`missing "s" suffix`)
	}
	num := s[:len(s)-1]
	neg := false
	if num != "" && num[0] == '-' {
		neg = true
		num = num[1:]
	}
	intPart, frac := num, ""
	hasDot := false
	for i := 0; i < len(num); i++ {
		c := num[i]
		switch {
		case '0' <= c && c <= '9':
		case c == '.' && !hasDot:
			hasDot = true
			intPart, frac = num[:i], num[i+1:]
		default:
			return 0, fmt.Errorf("unexpected %s; want decimal seconds ending in \"s\", like \"1.5s\"", describeByte(c))
		}
	}
	switch {
	case intPart == "":
		return 0, errors.New("missing integer part before the seconds")
	case len(intPart) > 1 && intPart[0] == '0':
		return 0, errors.New("leading zeros are not allowed")
	case hasDot && frac == "":
		return 0, errors.New(`missing digits after "."`)
	case len(frac) > 9:
		return 0, errors.New("more than 9 fractional digits (nanosecond precision)")
	}
	// Twelve digits hold every in-range value; a longer string is out of
	// range and might not fit a uint64.
	if len(intPart) > 12 {
		return 0, errDurationProtoRange
	}
	secs, _ := strconv.ParseUint(intPart, 10, 64) // at most 12 digits: cannot fail
	if secs > maxProtoSeconds {
		return 0, errDurationProtoRange
	}
	var nanos uint64
	for i := 0; i < 9; i++ {
		nanos *= 10
		if i < len(frac) {
			nanos += uint64(frac[i] - '0')
		}
	}
	const maxSecs = 1<<63/uint64(time.Second) + 1 // first whole second that cannot fit
	if secs >= maxSecs {
		return 0, errDurationRange
	}
	mag := secs*uint64(time.Second) + nanos // < maxSecs*1e9 < 2^64
	if neg {
		if mag > 1<<63 {
			return 0, errDurationRange
		}
		// -(1<<63) is representable, but its magnitude is not.
		return time.Duration(-int64(mag-1) - 1), nil
	}
	if mag > 1<<63-1 {
		return 0, errDurationRange
	}
	return time.Duration(mag), nil
}

// parseDurationGRPCGo reads s as grpc-go's service config parser reads a
// duration, and reports false where that parser fails. It accepts more than
// proto3 JSON: an optional '-', then seconds and a fraction split at one
// '.', either of which may be missing or carry its own sign (each is read
// by strconv.ParseInt); the seconds must not exceed the proto limit, the
// fraction has at most 9 characters, and values beyond the time.Duration
// range saturate. So ".5s", "1.s", "01s" and "+1s" are accepted, and "--1s"
// is 1s.
func parseDurationGRPCGo(s string) (time.Duration, bool) {
	if !strings.HasSuffix(s, "s") {
		return 0, false
	}
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	intPart, frac, _ := strings.Cut(s[:len(s)-1], ".")
	if strings.Contains(frac, ".") {
		return 0, false
	}
	var sec, ns int64
	if intPart != "" {
		v, err := strconv.ParseInt(intPart, 10, 64)
		if err != nil || v > maxProtoSeconds {
			return 0, false
		}
		sec = v
	}
	if frac != "" {
		if len(frac) > 9 {
			return 0, false
		}
		v, err := strconv.ParseInt(frac, 10, 64)
		if err != nil {
			return 0, false
		}
		for i := len(frac); i < 9; i++ {
			v *= 10
		}
		ns = v
	}
	if intPart == "" && frac == "" {
		return 0, false
	}
	if neg {
		sec, ns = -sec, -ns
	}
	const (
		maxSec = math.MaxInt64 / int64(time.Second)
		maxNs  = math.MaxInt64 % int64(time.Second)
		minSec = math.MinInt64 / int64(time.Second)
		minNs  = math.MinInt64 % int64(time.Second)
	)
	switch {
	case sec > maxSec || (sec == maxSec && ns >= maxNs):
		return math.MaxInt64, true
	case sec < minSec || (sec == minSec && ns <= minNs):
		return math.MinInt64, true
	}
	return time.Duration(sec*int64(time.Second) + ns), true
}

// FormatDuration returns d in the canonical proto3 JSON form that
// ParseDuration accepts: seconds with 0, 3, 6 or 9 fractional digits and an
// "s" suffix, such as "1s", "0.100s" or "-0.000000001s". For every d,
// ParseDuration(FormatDuration(d)) returns d.
func FormatDuration(d time.Duration) string {
	mag := uint64(d)
	sign := ""
	if d < 0 {
		mag = -mag // two's complement: correct for math.MinInt64 too
		sign = "-"
	}
	secs := strconv.FormatUint(mag/uint64(time.Second), 10)
	nanos := mag % uint64(time.Second)
	switch {
	case nanos == 0:
		return sign + secs + "s"
	case nanos%1e6 == 0:
		return fmt.Sprintf("%s%s.%03ds", sign, secs, nanos/1e6)
	case nanos%1e3 == 0:
		return fmt.Sprintf("%s%s.%06ds", sign, secs, nanos/1e3)
	default:
		return fmt.Sprintf("%s%s.%09ds", sign, secs, nanos)
	}
}

// describeByte names c for an error message without printing half of a
// multi-byte UTF-8 sequence as if it were a character.
func describeByte(c byte) string {
	if c < utf8.RuneSelf {
		return "character " + strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}
