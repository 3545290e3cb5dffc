package serviceconfig_test

import (
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/serviceconfig"
)

// parse runs Parse, checks the contract between its results and the shape of
// its error, and returns the config and the error's lines.
func parse(t *testing.T, in string) (*serviceconfig.Config, []string) {
	t.Helper()
	c, err := serviceconfig.Parse([]byte(in))
	if (c == nil) == (err == nil) {
		t.Fatalf("Parse(%.200s) = %v, %v: want exactly one of them nil", in, c, err)
	}
	if err == nil {
		return c, nil
	}
	u, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("Parse error %T has no Unwrap() []error", err)
	}
	var lines []string
	for _, e := range u.Unwrap() {
		var pe *serviceconfig.Error
		if !errors.As(e, &pe) {
			t.Errorf("Parse error element %T is not a *serviceconfig.Error", e)
		}
		msg := e.Error()
		if !strings.HasPrefix(msg, "serviceconfig: ") || strings.Contains(msg, "\n") {
			t.Errorf("Parse error element %q: want one line starting with \"serviceconfig: \"", msg)
		}
		lines = append(lines, msg)
	}
	if got := strings.Join(lines, "\n"); got != err.Error() {
		t.Errorf("Parse error = %q, want its elements joined by newlines: %q", err.Error(), got)
	}
	return nil, lines
}

// exported returns c without its unexported lookup state, for comparisons.
func exported(c *serviceconfig.Config) serviceconfig.Config {
	return serviceconfig.Config{
		LoadBalancingPolicy: c.LoadBalancingPolicy,
		MethodConfigs:       c.MethodConfigs,
		RetryThrottling:     c.RetryThrottling,
		Warnings:            c.Warnings,
	}
}

func ptr[T any](v T) *T { return &v }

// obj is a JSON object under construction: keys with raw JSON values, in
// order.
type obj [][2]string

// with returns a copy of o with the given key, raw value pairs set; an empty
// raw value removes the key.
func (o obj) with(kv ...string) obj {
	out := slices.Clone(o)
	for i := 0; i+1 < len(kv); i += 2 {
		k, v := kv[i], kv[i+1]
		j := slices.IndexFunc(out, func(f [2]string) bool { return f[0] == k })
		switch {
		case j >= 0 && v == "":
			out = slices.Delete(out, j, j+1)
		case j >= 0:
			out[j][1] = v
		case v != "":
			out = append(out, [2]string{k, v})
		}
	}
	return out
}

func (o obj) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Quote(f[0]) + ":" + f[1])
	}
	b.WriteByte('}')
	return b.String()
}

var (
	validRetry = obj{
		{"maxAttempts", "3"},
		{"initialBackoff", `"0.1s"`},
		{"maxBackoff", `"1s"`},
		{"backoffMultiplier", "2"},
		{"retryableStatusCodes", `["UNAVAILABLE"]`},
	}
	validHedge = obj{
		{"maxAttempts", "3"},
		{"hedgingDelay", `"0.5s"`},
		{"nonFatalStatusCodes", `["UNAVAILABLE"]`},
	}
	validMethod   = obj{{"name", `[{"service":"s.S"}]`}}
	validThrottle = obj{{"maxTokens", "10"}, {"tokenRatio", "0.1"}}
)

// methodConfigs returns a service config with the given methodConfig
// entries.
func methodConfigs(entries ...obj) string {
	var parts []string
	for _, e := range entries {
		parts = append(parts, e.String())
	}
	return `{"methodConfig":[` + strings.Join(parts, ",") + `]}`
}

// fieldCase is one value for one field: raw JSON (empty to leave the field
// out), and either the error message that follows the field's path or the
// value the field parses to.
type fieldCase struct {
	raw     string
	wantErr string
	want    any
}

// runFieldCases checks each case: build returns the config holding raw,
// at is the JSON path that errors must name, and get extracts the parsed
// value.
func runFieldCases(t *testing.T, at string, build func(raw string) string, get func(*serviceconfig.Config) any, cases []fieldCase) {
	t.Helper()
	for _, tc := range cases {
		name := tc.raw
		if name == "" {
			name = "absent"
		}
		t.Run(name, func(t *testing.T) {
			in := build(tc.raw)
			c, errs := parse(t, in)
			if tc.wantErr != "" {
				want := []string{"serviceconfig: " + at + ": " + tc.wantErr}
				if !slices.Equal(errs, want) {
					t.Errorf("Parse(%s) errors:\n\t%s\nwant:\n\t%s", in, strings.Join(errs, "\n\t"), want[0])
				}
				return
			}
			if errs != nil {
				t.Fatalf("Parse(%s) errors:\n\t%s\nwant none", in, strings.Join(errs, "\n\t"))
			}
			if got := get(c); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Parse(%s): %s = %#v, want %#v", in, at, got, tc.want)
			}
		})
	}
}
