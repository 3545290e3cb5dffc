package ratelimit

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"google.golang.org/grpc/metadata"
)

var quotaNow = time.Unix(1_700_000_000, 0)

func TestParseQuota(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fields map[string]string
		want   rebound.Quota
		err    string // a part of the error; "" for none
	}{
		{"nothing", nil, rebound.Quota{}, ""},
		{"draft 08+", map[string]string{"RateLimit": `"default";r=50;t=30`, "RateLimit-Policy": `"default";q=100;w=60`},
			rebound.Quota{Remaining: 50, Reset: 30 * time.Second, Limit: 100}, ""},
		{"draft 08+ token names, the lowest rate of two", map[string]string{"RateLimit": `burst;r=9;t=1, day;r=1000;t=3600`, "RateLimit-Policy": `burst;q=10;w=1, day;q=5000;w=86400`},
			rebound.Quota{Remaining: 1000, Reset: time.Hour, Limit: 5000}, ""},
		{"draft 08+ without policy", map[string]string{"RateLimit": `"p";r=5;t=10`},
			rebound.Quota{Remaining: 5, Reset: 10 * time.Second}, ""},
		{"draft 08+ no reset", map[string]string{"RateLimit": `"p";r=5`}, rebound.Quota{}, ""},
		{"draft 08+ no remaining", map[string]string{"RateLimit": `"p";t=5`}, rebound.Quota{}, "RateLimit: no remaining quota (r)"},
		{"draft 08+ quota 0", map[string]string{"RateLimit": `"p";r=0;t=5`, "RateLimit-Policy": `"p";q=0`}, rebound.Quota{}, "RateLimit-Policy: the quota (q) of p is 0"},
		{"draft 08+ r not an integer", map[string]string{"RateLimit": `"p";r=abc;t=5`}, rebound.Quota{}, "RateLimit: r is not an integer"},
		{"draft 08+ negative r", map[string]string{"RateLimit": `"p";r=-1;t=5`}, rebound.Quota{Remaining: -1, Reset: 5 * time.Second}, ""},
		{"draft 05-07", map[string]string{"RateLimit": `limit=100, remaining=50, reset=30`},
			rebound.Quota{Remaining: 50, Reset: 30 * time.Second, Limit: 100}, ""},
		{"draft 05-07 limit 0", map[string]string{"RateLimit": `limit=0, remaining=0, reset=30`}, rebound.Quota{}, "RateLimit: limit is 0"},
		{"draft 05-07 no reset", map[string]string{"RateLimit": `limit=100, remaining=50`}, rebound.Quota{}, "RateLimit: no reset"},
		{"RateLimit malformed", map[string]string{"RateLimit": `%%%`}, rebound.Quota{}, "RateLimit: "},
		{"drafts 00-04", map[string]string{"RateLimit-Limit": `100, 100;w=60`, "RateLimit-Remaining": `7`, "RateLimit-Reset": `12`},
			rebound.Quota{Remaining: 7, Reset: 12 * time.Second, Limit: 100}, ""},
		{"drafts 00-04 remaining not a number", map[string]string{"RateLimit-Remaining": `lots`, "RateLimit-Reset": `12`}, rebound.Quota{}, "RateLimit-Remaining: \"lots\" is not an integer"},
		{"drafts 00-04 no reset", map[string]string{"RateLimit-Remaining": `7`}, rebound.Quota{}, "RateLimit-Reset: missing"},
		{"X delta-seconds", map[string]string{"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": " 59 ", "X-RateLimit-Reset": "42"},
			rebound.Quota{Remaining: 59, Reset: 42 * time.Second, Limit: 60}, ""},
		{"X Unix time", map[string]string{"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "4999", "X-RateLimit-Reset": "1700000600"},
			rebound.Quota{Remaining: 4999, Reset: 10 * time.Minute, Limit: 5000}, ""},
		{"X Unix time with a fraction", map[string]string{"X-RateLimit-Remaining": "3", "X-RateLimit-Reset": "1700000001.250"},
			rebound.Quota{Remaining: 3, Reset: 1250 * time.Millisecond}, ""},
		{"X fractional seconds", map[string]string{"X-RateLimit-Remaining": "3", "X-RateLimit-Reset": "0.5"},
			rebound.Quota{Remaining: 3, Reset: 500 * time.Millisecond}, ""},
		{"X Unix time in the past", map[string]string{"X-RateLimit-Remaining": "3", "X-RateLimit-Reset": "1699999990"},
			rebound.Quota{Remaining: 3, Reset: -10 * time.Second}, ""},
		{"X limit 0", map[string]string{"X-RateLimit-Limit": "0", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "5"}, rebound.Quota{}, "X-RateLimit-Limit: the limit is 0"},
		{"X remaining not a number", map[string]string{"X-RateLimit-Remaining": "1e3", "X-RateLimit-Reset": "5"}, rebound.Quota{}, `X-RateLimit-Remaining: "1e3" is not an integer`},
		{"X reset not a number", map[string]string{"X-RateLimit-Remaining": "3", "X-RateLimit-Reset": "soon"}, rebound.Quota{}, `X-RateLimit-Reset: "soon" is not`},
		{"X reset NaN", map[string]string{"X-RateLimit-Remaining": "3", "X-RateLimit-Reset": "NaN"}, rebound.Quota{}, `X-RateLimit-Reset: "NaN" is not`},
		{"X negative remaining", map[string]string{"X-RateLimit-Remaining": "-4", "X-RateLimit-Reset": "5"}, rebound.Quota{Remaining: -4, Reset: 5 * time.Second}, ""},
		{"IETF before X", map[string]string{"RateLimit": `"p";r=5;t=10`, "X-RateLimit-Remaining": "99", "X-RateLimit-Reset": "1"},
			rebound.Quota{Remaining: 5, Reset: 10 * time.Second}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.fields {
				h.Set(k, v)
			}
			q, err := ParseQuota(h.Values, quotaNow)
			if tc.err != "" {
				if !errors.Is(err, rebound.ErrQuota) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseQuota = %+v, %v; want an ErrQuota containing %q", q, err, tc.err)
				}
				return
			}
			if err != nil || q != tc.want {
				t.Fatalf("ParseQuota = %+v, %v; want %+v", q, err, tc.want)
			}
			// The same fields as gRPC metadata, under lower-case names.
			md := metadata.MD{}
			for k, v := range tc.fields {
				md.Set(strings.ToLower(k), v)
			}
			if q2, err := ParseQuota(md.Get, quotaNow); err != nil || q2 != q {
				t.Fatalf("from metadata: %+v, %v; from headers %+v", q2, err, q)
			}
		})
	}
}

// FuzzParseQuota: no value of any field panics, and every error wraps
// rebound.ErrQuota.
func FuzzParseQuota(f *testing.F) {
	f.Add(`"default";r=50;t=30`, `"default";q=100;w=60`, "", "", "", "")
	f.Add(`limit=100, remaining=50, reset=30`, "", "", "", "", "")
	f.Add("", "", "100, 100;w=60", "7", "12", "")
	f.Add("", "", "", "", "", "1700000001.250")
	f.Add("", "", "", "-1", "99999999999999999999", "1e9")
	f.Fuzz(func(t *testing.T, rl, policy, limit, rem, reset, xreset string) {
		h := http.Header{}
		set := func(k, v string) {
			if v != "" {
				h.Set(k, v)
			}
		}
		set("RateLimit", rl)
		set("RateLimit-Policy", policy)
		set("RateLimit-Limit", limit)
		set("RateLimit-Remaining", rem)
		set("RateLimit-Reset", reset)
		set("X-RateLimit-Limit", limit)
		set("X-RateLimit-Remaining", rem)
		set("X-RateLimit-Reset", xreset)
		q, err := ParseQuota(h.Values, quotaNow)
		if err != nil && !errors.Is(err, rebound.ErrQuota) {
			t.Fatalf("error %v does not wrap ErrQuota", err)
		}
		if err == nil && q.Limit < 0 {
			return // the limiter's to refuse
		}
		h.Del("RateLimit")
		h.Del("RateLimit-Remaining")
		h.Del("RateLimit-Reset")
		if _, err := ParseQuota(h.Values, quotaNow); err != nil && !errors.Is(err, rebound.ErrQuota) {
			t.Fatalf("X fields: error %v does not wrap ErrQuota", err)
		}
	})
}
