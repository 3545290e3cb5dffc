package httpretry

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// maxSeconds is the largest delta-seconds a time.Duration holds.
const maxSeconds = math.MaxInt64 / int64(time.Second)

// ParseRetryAfter parses a Retry-After header value (RFC 9110 section
// 10.2.3) and returns how long to wait from now. The value is either
// delta-seconds, digits only with no sign or fraction (too large a number
// saturates at the longest time.Duration), or an HTTP-date in any of the
// formats [http.ParseTime] accepts, the obsolete RFC 850 and asctime ones
// included; a date at or before now gives 0. Surrounding spaces and tabs
// are ignored. ok is false, and the duration 0, when v is neither. The
// duration is never negative.
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return 0, false
	}
	if n, ok := parseSeconds(v); ok {
		if n > maxSeconds {
			return math.MaxInt64, true
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// parseSeconds parses a run of ASCII digits, saturating just above
// maxSeconds instead of overflowing.
func parseSeconds(v string) (int64, bool) {
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n <= maxSeconds {
			n = n*10 + int64(c-'0')
		}
	}
	return n, true
}
