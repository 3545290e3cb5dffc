package ratelimit

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/rebound-go/rebound"
)

// Fields returns the values of a response's field by name: http.Header's
// Values, metadata.MD's Get (which lower-cases the name).
type Fields func(name string) []string

// unixThreshold is where a reset value stops being delta-seconds and
// becomes a Unix time (2001-09-09): no window resets 31 years from now.
// httpretry's WithRateLimitReset reads resets the same way.
const unixThreshold = 1_000_000_000

// ParseQuota returns the quota a response publishes at now, from the
// first of these that it carries:
//
//   - the IETF RateLimit field of draft-ietf-httpapi-ratelimit-headers-08
//     and later, a list of policies with their remaining quota (r) and
//     reset (t, delta-seconds), `"default";r=50;t=30`: of several, the
//     one that allows the lowest rate; its limit is the quota (q) of the
//     policy of that name in RateLimit-Policy, `"default";q=100;w=60`;
//   - the RateLimit field of drafts 05-07, a dictionary,
//     `limit=100, remaining=50, reset=30`;
//   - the RateLimit-Remaining and RateLimit-Reset fields of drafts 00-04,
//     with RateLimit-Limit (`100` or `100, 100;w=60`: the first);
//   - X-RateLimit-Remaining and X-RateLimit-Reset, with X-RateLimit-Limit,
//     the reset in delta-seconds or, from 1000000000, a Unix time, either
//     with a fraction (`1700000000.250`).
//
// The IETF fields are Structured Field Values (RFC 9651), parsed with
// github.com/dunglas/httpsfv. A response that publishes none of them
// gives the zero Quota and nil. A field that is malformed, or a limit of
// 0, gives an error that wraps rebound.ErrQuota and names the field; the
// values themselves (a negative remainder, a reset in the past or years
// away) are the limiter's to judge (see rebound.AdaptiveRateLimit.Observe).
func ParseQuota(get Fields, now time.Time) (rebound.Quota, error) {
	if v := get("RateLimit"); len(v) > 0 {
		return parseIETF(v, get("RateLimit-Policy"))
	}
	if rem, reset := get("RateLimit-Remaining"), get("RateLimit-Reset"); len(rem) > 0 || len(reset) > 0 {
		return parseSeparate("RateLimit-", get, now, true)
	}
	if rem, reset := get("X-RateLimit-Remaining"), get("X-RateLimit-Reset"); len(rem) > 0 || len(reset) > 0 {
		return parseSeparate("X-RateLimit-", get, now, false)
	}
	return rebound.Quota{}, nil
}

func quotaErr(field, format string, a ...any) error {
	return fmt.Errorf("%w: %s: %s", rebound.ErrQuota, field, fmt.Sprintf(format, a...))
}

// parseIETF parses the RateLimit field, of the newest drafts (a list) or
// of drafts 05-07 (a dictionary).
func parseIETF(v, policy []string) (rebound.Quota, error) {
	if list, err := httpsfv.UnmarshalList(v); err == nil {
		return parsePolicies(list, policy)
	}
	dict, err := httpsfv.UnmarshalDictionary(v)
	if err != nil {
		return rebound.Quota{}, quotaErr("RateLimit", "%q is neither a list of policies nor a dictionary: %v", strings.Join(v, ", "), err)
	}
	var q rebound.Quota
	rem, ok, err := dictInt(dict, "remaining")
	if err != nil || !ok {
		return q, orMissing(err, "RateLimit", "remaining")
	}
	reset, ok, err := dictInt(dict, "reset")
	if err != nil || !ok {
		return q, orMissing(err, "RateLimit", "reset")
	}
	limit, ok, err := dictInt(dict, "limit")
	if err != nil {
		return q, err
	}
	if ok && limit == 0 {
		return q, quotaErr("RateLimit", "limit is 0")
	}
	q.Remaining, q.Reset, q.Limit = rem, deltaSeconds(reset), limit
	return q, nil
}

func orMissing(err error, field, key string) error {
	if err != nil {
		return err
	}
	return quotaErr(field, "no %s", key)
}

// dictInt returns the integer of key in d.
func dictInt(d *httpsfv.Dictionary, key string) (int64, bool, error) {
	m, ok := d.Get(key)
	if !ok {
		return 0, false, nil
	}
	it, isItem := m.(httpsfv.Item)
	n, isInt := it.Value.(int64)
	if !isItem || !isInt {
		return 0, false, quotaErr("RateLimit", "%s is not an integer", key)
	}
	return n, true, nil
}

// parsePolicies parses the newest drafts' RateLimit list: the policy
// that allows the lowest rate (remainder over reset) sets the quota.
func parsePolicies(list httpsfv.List, policy []string) (rebound.Quota, error) {
	var (
		best  rebound.Quota
		name  any
		found bool
	)
	for i, m := range list {
		it, ok := m.(httpsfv.Item)
		if !ok {
			return best, quotaErr("RateLimit", "policy %d is an inner list", i)
		}
		r, ok, err := paramInt(it.Params, "RateLimit", "r")
		if err != nil || !ok {
			return best, orMissing(err, "RateLimit", fmt.Sprintf("remaining quota (r) in policy %d", i))
		}
		t, ok, err := paramInt(it.Params, "RateLimit", "t")
		if err != nil {
			return best, err
		}
		if !ok {
			continue // no reset: no rate
		}
		q := rebound.Quota{Remaining: r, Reset: deltaSeconds(t)}
		if !found || lowerRate(q, best) {
			best, name, found = q, it.Value, true
		}
	}
	if !found {
		return rebound.Quota{}, nil
	}
	if len(policy) == 0 {
		return best, nil
	}
	pl, err := httpsfv.UnmarshalList(policy)
	if err != nil {
		return rebound.Quota{}, quotaErr("RateLimit-Policy", "%q is not a list of policies: %v", strings.Join(policy, ", "), err)
	}
	for _, m := range pl {
		it, ok := m.(httpsfv.Item)
		if !ok || it.Value != name {
			continue
		}
		limit, ok, err := paramInt(it.Params, "RateLimit-Policy", "q")
		if err != nil {
			return rebound.Quota{}, err
		}
		if ok && limit == 0 {
			return rebound.Quota{}, quotaErr("RateLimit-Policy", "the quota (q) of %v is 0", name)
		}
		best.Limit = limit
		break
	}
	return best, nil
}

// lowerRate reports whether a allows a lower rate than b.
func lowerRate(a, b rebound.Quota) bool {
	if a.Reset <= 0 || b.Reset <= 0 {
		return a.Reset > b.Reset // a reset now allows anything
	}
	return float64(a.Remaining)/a.Reset.Seconds() < float64(b.Remaining)/b.Reset.Seconds()
}

func paramInt(p *httpsfv.Params, field, key string) (int64, bool, error) {
	if p == nil {
		return 0, false, nil
	}
	v, ok := p.Get(key)
	if !ok {
		return 0, false, nil
	}
	n, ok := v.(int64)
	if !ok {
		return 0, false, quotaErr(field, "%s is not an integer", key)
	}
	return n, true, nil
}

// deltaSeconds returns n seconds; a negative n stays negative, for the
// limiter to refuse.
func deltaSeconds(n int64) time.Duration {
	if n > int64(math.MaxInt64/time.Second) {
		return math.MaxInt64
	}
	if n < int64(math.MinInt64/time.Second) {
		return math.MinInt64
	}
	return time.Duration(n) * time.Second
}

// parseSeparate parses the three fields of prefix: Remaining and Reset
// (both needed), Limit if present. The oldest IETF drafts' are Structured
// Field Values (sfv); the X- ones are plain numbers.
func parseSeparate(prefix string, get Fields, now time.Time, sfv bool) (rebound.Quota, error) {
	var q rebound.Quota
	remName, resetName, limitName := prefix+"Remaining", prefix+"Reset", prefix+"Limit"
	rem, err := plainInt(remName, get(remName), sfv)
	if err != nil {
		return q, err
	}
	reset, err := parseResetValue(resetName, get(resetName), now, sfv)
	if err != nil {
		return q, err
	}
	if v := get(limitName); len(v) > 0 {
		limit, err := plainInt(limitName, v, sfv)
		if err != nil {
			return q, err
		}
		if limit == 0 {
			return q, quotaErr(limitName, "the limit is 0")
		}
		q.Limit = limit
	}
	q.Remaining, q.Reset = rem, reset
	return q, nil
}

// plainInt parses an integer field: a Structured Field Values list whose
// first member is an integer (`100` or `100, 100;w=60`), or a plain
// decimal integer, surrounding spaces ignored.
func plainInt(name string, v []string, sfv bool) (int64, error) {
	if len(v) == 0 {
		return 0, quotaErr(name, "missing")
	}
	if sfv {
		list, err := httpsfv.UnmarshalList(v)
		if err != nil || len(list) == 0 {
			return 0, quotaErr(name, "%q is not an integer", strings.Join(v, ", "))
		}
		it, _ := list[0].(httpsfv.Item)
		n, ok := it.Value.(int64)
		if !ok {
			return 0, quotaErr(name, "%q is not an integer", strings.Join(v, ", "))
		}
		return n, nil
	}
	s := strings.Trim(v[0], " \t")
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || s == "" || s[0] == '+' {
		return 0, quotaErr(name, "%q is not an integer", v[0])
	}
	return n, nil
}

// parseResetValue parses a reset: delta-seconds, or from unixThreshold a
// Unix time, either with a fraction in the plain form; the result is
// negative for a Unix time before now, and saturates far out.
func parseResetValue(name string, v []string, now time.Time, sfv bool) (time.Duration, error) {
	if len(v) == 0 {
		return 0, quotaErr(name, "missing")
	}
	var secs, nanos int64
	if sfv {
		n, err := plainInt(name, v, true)
		if err != nil {
			return 0, err
		}
		secs = n
	} else {
		s := strings.Trim(v[0], " \t")
		whole, frac, dot := strings.Cut(s, ".")
		if !digits(whole) || dot && !digits(frac) {
			return 0, quotaErr(name, "%q is not a number of seconds or a Unix time", v[0])
		}
		n, err := strconv.ParseInt(whole, 10, 64)
		if err != nil {
			n = math.MaxInt64 // digits only: too large
		}
		secs = n
		for i := range 9 {
			nanos *= 10
			if i < len(frac) {
				nanos += int64(frac[i] - '0')
			}
		}
	}
	if secs >= unixThreshold {
		if secs > now.Unix()+int64(math.MaxInt64/time.Second) {
			return math.MaxInt64, nil
		}
		return time.Unix(secs, nanos).Sub(now), nil
	}
	return deltaSeconds(secs) + time.Duration(nanos), nil
}

// digits reports whether s is one or more ASCII digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
