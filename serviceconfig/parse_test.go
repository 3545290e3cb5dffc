package serviceconfig_test

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound/serviceconfig"
)

// checkLines compares lines of output, printing both lists on a mismatch.
func checkLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n\t%s\nwant:\n\t%s", what, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

func warningLines(ws []serviceconfig.Warning) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.String())
	}
	return out
}

func TestParseFullConfig(t *testing.T) {
	in := `{
	  "loadBalancingPolicy": "round_robin",
	  "loadBalancingConfig": [{"round_robin": {}}],
	  "healthCheckConfig": {"serviceName": "x"},
	  "methodConfig": [
	    {
	      "name": [{"service": "pkg.Echo", "method": "Get"}, {"service": "pkg.Echo", "method": "List"}],
	      "retryPolicy": {
	        "maxAttempts": 4,
	        "initialBackoff": "0.1s",
	        "maxBackoff": "1s",
	        "backoffMultiplier": 2,
	        "retryableStatusCodes": ["UNAVAILABLE", 10]
	      },
	      "timeout": "2.5s",
	      "waitForReady": true,
	      "maxRequestMessageBytes": 1024,
	      "maxResponseMessageBytes": "2048"
	    },
	    {
	      "name": [{"service": "pkg.Echo"}],
	      "hedgingPolicy": {
	        "maxAttempts": 3,
	        "hedgingDelay": "0.5s",
	        "nonFatalStatusCodes": ["unavailable", "internal", "aborted"]
	      }
	    },
	    {"name": [{}], "waitForReady": false}
	  ],
	  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
	}`
	c, errs := parse(t, in)
	if errs != nil {
		t.Fatalf("errors: %q", errs)
	}
	want := serviceconfig.Config{
		LoadBalancingPolicy: "round_robin",
		MethodConfigs: []serviceconfig.MethodConfig{
			{
				Names: []serviceconfig.Name{{Service: "pkg.Echo", Method: "Get"}, {Service: "pkg.Echo", Method: "List"}},
				RetryPolicy: &serviceconfig.RetryPolicy{
					MaxAttempts:          4,
					InitialBackoff:       100 * time.Millisecond,
					MaxBackoff:           time.Second,
					BackoffMultiplier:    2,
					RetryableStatusCodes: serviceconfig.NewCodeSet(serviceconfig.Unavailable, serviceconfig.Aborted),
				},
				Timeout:                 2500 * time.Millisecond,
				WaitForReady:            ptr(true),
				MaxRequestMessageBytes:  ptr(int64(1024)),
				MaxResponseMessageBytes: ptr(int64(2048)),
			},
			{
				Names: []serviceconfig.Name{{Service: "pkg.Echo"}},
				HedgingPolicy: &serviceconfig.HedgingPolicy{
					MaxAttempts:         3,
					HedgingDelay:        500 * time.Millisecond,
					NonFatalStatusCodes: serviceconfig.NewCodeSet(serviceconfig.Unavailable, serviceconfig.Internal, serviceconfig.Aborted),
				},
			},
			{Names: []serviceconfig.Name{{}}, WaitForReady: ptr(false)},
		},
		RetryThrottling: &serviceconfig.RetryThrottling{MaxTokens: 10, TokenRatio: 0.1},
	}
	if got := exported(c); !reflect.DeepEqual(got, want) {
		t.Errorf("Parse:\n got %+v\nwant %+v", got, want)
	}
}

func TestParseEmptyConfigs(t *testing.T) {
	for _, in := range []string{`{}`, ` { } `, "\t{\n}\r\n", `{"methodConfig":null}`, `{"methodConfig":[]}`, `{"loadBalancingPolicy":null}`} {
		c, errs := parse(t, in)
		if errs != nil {
			t.Errorf("Parse(%q) errors: %q", in, errs)
			continue
		}
		if got := exported(c); !reflect.DeepEqual(got, serviceconfig.Config{}) {
			t.Errorf("Parse(%q) = %+v, want an empty config", in, got)
		}
		if c.MethodConfig("/a.B/C") != nil {
			t.Errorf("Parse(%q).MethodConfig found an entry", in)
		}
	}
}

func TestParseTopLevel(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{`[]`, []string{"serviceconfig: a service config must be a JSON object, got array"}},
		{`1`, []string{"serviceconfig: a service config must be a JSON object, got number"}},
		{`"x"`, []string{"serviceconfig: a service config must be a JSON object, got string"}},
		{`true`, []string{"serviceconfig: a service config must be a JSON object, got boolean"}},
		{`{"methodConfig":{}}`, []string{"serviceconfig: methodConfig: must be a JSON array of objects, got object"}},
		{`{"methodConfig":"x"}`, []string{"serviceconfig: methodConfig: must be a JSON array of objects, got string"}},
		{`{"methodConfig":[1, {"name":[{}]}, [], null]}`, []string{
			"serviceconfig: methodConfig[0]: must be a JSON object, got number",
			"serviceconfig: methodConfig[2]: must be a JSON object, got array",
		}},
		{`{"loadBalancingPolicy":1}`, []string{"serviceconfig: loadBalancingPolicy: must be a string, got number"}},
		{`{"loadBalancingPolicy":["round_robin"]}`, []string{"serviceconfig: loadBalancingPolicy: must be a string, got array"}},
	}
	for _, tc := range tests {
		_, errs := parse(t, tc.in)
		checkLines(t, tc.in, errs, tc.want)
	}
}

func TestParseSyntaxErrors(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"", "serviceconfig: invalid JSON: unexpected end of input (line 1, column 1)"},
		{"   ", "serviceconfig: invalid JSON: unexpected end of input (line 1, column 4)"},
		{"{", "serviceconfig: invalid JSON: unexpected end of input (line 1, column 2)"},
		{"{\n  \"methodConfig\": [", "serviceconfig: invalid JSON: unexpected end of input (line 2, column 20)"},
		{`{"a":"x`, "serviceconfig: invalid JSON: unexpected end of input (line 1, column 8)"},
		{`{"a" 1}`, "serviceconfig: invalid JSON: invalid character '1' after object key (line 1, column 6)"},
		{"{\"a\":1,\r\n}", "serviceconfig: invalid JSON: invalid character '}' looking for beginning of object key string (line 2, column 1)"},
		{`[1,]`, "serviceconfig: invalid JSON: invalid character ']' looking for beginning of value (line 1, column 4)"},
		{`{} x`, "serviceconfig: invalid JSON: invalid character 'x' after top-level value (line 1, column 4)"},
		{`{} {}`, "serviceconfig: invalid JSON: invalid character '{' after top-level value (line 1, column 4)"},
		{`{}}`, "serviceconfig: invalid JSON: invalid character '}' after top-level value (line 1, column 3)"},
		{`{"a":01}`, "serviceconfig: invalid JSON: invalid character '1' after object key:value pair (line 1, column 7)"},
		{`{"a":tru}`, "serviceconfig: invalid JSON: invalid character '}' in literal true (expecting 'e') (line 1, column 9)"},
		{`{'a':1}`, "serviceconfig: invalid JSON: invalid character '\\'' looking for beginning of object key string (line 1, column 2)"},
		{"\ufeff\ufeff{}", "serviceconfig: invalid JSON: invalid character 'ï' looking for beginning of value (line 1, column 1)"},
		{`{"a":NaN}`, "serviceconfig: invalid JSON: invalid character 'N' looking for beginning of value (line 1, column 6)"},
	}
	for _, tc := range tests {
		_, errs := parse(t, tc.in)
		checkLines(t, tc.in, errs, []string{tc.want})
	}
}

func TestParseDeepNesting(t *testing.T) {
	// Unknown fields are not inspected, but they are decoded: nesting up
	// to the limit is fine, beyond it is an error rather than a crash.
	deep := func(n int) string {
		return `{"x":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}`
	}
	if _, errs := parse(t, deep(9999)); errs != nil {
		t.Errorf("nesting 10000 deep: %q", errs)
	}
	_, errs := parse(t, deep(10000))
	checkLines(t, "nesting 10001 deep", errs, []string{
		"serviceconfig: invalid JSON: nested deeper than 10000 levels (line 1, column 10005)",
	})
	_, err := serviceconfig.Parse([]byte(strings.Repeat(`{"a":`, 1<<20)), serviceconfig.MaxBytes(math.MaxInt))
	if err == nil || !strings.Contains(err.Error(), "nested deeper than 10000 levels") {
		t.Errorf("a million open objects: %v", err)
	}
}

// A field written twice is accepted, the last one winning, as grpc-go
// (encoding/json) reads it, with a warning at the repeat.
func TestParseDuplicateKeys(t *testing.T) {
	tests := []struct {
		in    string
		warns []string
		check func(*serviceconfig.Config) bool
	}{
		{`{"methodConfig":[],"methodConfig":[{"name":[{}],"timeout":"1s"}]}`,
			[]string{`methodConfig: "methodConfig" is set more than once in this object; the last is used, as in grpc-go, but other gRPC implementations may reject the config`},
			func(c *serviceconfig.Config) bool { return len(c.MethodConfigs) == 1 }},
		{retryConfig(validRetry.with("maxAttempts", `2,"maxAttempts":4`)),
			[]string{`methodConfig[0].retryPolicy.maxAttempts: "maxAttempts" is set more than once in this object; the last is used, as in grpc-go, but other gRPC implementations may reject the config`},
			func(c *serviceconfig.Config) bool { return retryPolicy(c).MaxAttempts == 4 }},
		{methodConfigs(obj{{"name", `[{"service":"a.B","service":"c.D"}]`}}),
			[]string{`methodConfig[0].name[0].service: "service" is set more than once in this object; the last is used, as in grpc-go, but other gRPC implementations may reject the config`},
			func(c *serviceconfig.Config) bool { return c.MethodConfigs[0].Names[0].Service == "c.D" }},
		// Keys are compared after unescaping, and a repeat in another case
		// counts too: the last wins whatever its spelling.
		{`{"retryThrottling":{"maxTokens":1,"tokenRatio":1,"token\u0052atio":2,"TokenRatio":3}}`,
			[]string{
				`retryThrottling.tokenRatio: "tokenRatio" is set more than once in this object; the last is used, as in grpc-go, but other gRPC implementations may reject the config`,
				`retryThrottling.TokenRatio: A6 spells this field "tokenRatio"; grpc-go accepts any letter case, other gRPC implementations do not`,
				`retryThrottling.TokenRatio: "tokenRatio" is set more than once in this object; the last is used, as in grpc-go, but other gRPC implementations may reject the config`,
			},
			func(c *serviceconfig.Config) bool { return c.RetryThrottling.TokenRatio == 3 }},
		{retryConfig(validRetry.with("maxAttempts", `7,"MAXATTEMPTS":3`)),
			[]string{
				`methodConfig[0].retryPolicy.MAXATTEMPTS: A6 spells this field "maxAttempts"; grpc-go accepts any letter case, other gRPC implementations do not`,
				`methodConfig[0].retryPolicy.MAXATTEMPTS: "maxAttempts" is set more than once in this object; the last is used, as in grpc-go, but other gRPC implementations may reject the config`,
			},
			func(c *serviceconfig.Config) bool { return retryPolicy(c).MaxAttempts == 3 }},
		// Unknown keys are not compared, nor what is inside them.
		{`{"x":1,"x":2}`, []string{"x: unknown field, ignored", "x: unknown field, ignored"}, nil},
		{`{"a b":{"y":1,"y":2}}`, []string{`["a b"]: unknown field, ignored`}, nil},
		{`{"loadBalancingConfig":[{"round_robin":{},"round_robin":{}}]}`, nil, nil},
	}
	for _, tc := range tests {
		c, errs := parse(t, tc.in)
		if errs != nil {
			t.Errorf("%s: errors %q", tc.in, errs)
			continue
		}
		checkLines(t, tc.in, warningLines(c.Warnings), tc.warns)
		if tc.check != nil && !tc.check(c) {
			t.Errorf("%s: the last value did not win: %+v", tc.in, exported(c))
		}
	}
}

func TestParseNames(t *testing.T) {
	tests := []struct {
		name      string
		entries   []string // raw "name" values, one per methodConfig entry ("" leaves it out)
		wantNames [][]serviceconfig.Name
		wantErrs  []string
	}{
		{
			name:      "method",
			entries:   []string{`[{"service":"a.B","method":"M"}]`},
			wantNames: [][]serviceconfig.Name{{{Service: "a.B", Method: "M"}}},
		},
		{
			name:      "service",
			entries:   []string{`[{"service":"a.B"}]`, `[{"service":"c.D","method":""}]`, `[{"service":"e.F","method":null}]`},
			wantNames: [][]serviceconfig.Name{{{Service: "a.B"}}, {{Service: "c.D"}}, {{Service: "e.F"}}},
		},
		{
			name:      "default",
			entries:   []string{`[{}]`},
			wantNames: [][]serviceconfig.Name{{{}}},
		},
		{
			name:      "default spelled out",
			entries:   []string{`[{"service":"","method":""}]`},
			wantNames: [][]serviceconfig.Name{{{}}},
		},
		{
			name:      "default with nulls",
			entries:   []string{`[{"service":null,"method":null}]`},
			wantNames: [][]serviceconfig.Name{{{}}},
		},
		{
			// Entries that name no method apply to no call: they are
			// left out of MethodConfigs.
			name:    "no names",
			entries: []string{"", `[]`, `null`},
		},
		{
			name:      "named entries between unnamed ones",
			entries:   []string{`[]`, `[{"service":"a.B"}]`, `null`, `[{"service":"c.D"}]`, `[]`},
			wantNames: [][]serviceconfig.Name{{{Service: "a.B"}}, {{Service: "c.D"}}},
		},
		{
			name:     "method without service",
			entries:  []string{`[{"method":"M"}]`},
			wantErrs: []string{`serviceconfig: methodConfig[0].name[0]: method "M" needs a service`},
		},
		{
			name:     "method with empty service",
			entries:  []string{`[{"service":"","method":"M"}]`},
			wantErrs: []string{`serviceconfig: methodConfig[0].name[0]: method "M" needs a service`},
		},
		{
			name:     "duplicate within an entry",
			entries:  []string{`[{"service":"a.B","method":"M"},{"service":"x.Y"},{"service":"a.B","method":"M"}]`},
			wantErrs: []string{`serviceconfig: methodConfig[0].name[2]: duplicate name {"service":"a.B","method":"M"} (also in methodConfig[0].name[0])`},
		},
		{
			name:    "duplicates across entries",
			entries: []string{`[{"service":"a.B"},{}]`, `[{"service":"x.Y"},{"service":"a.B","method":""}]`, `[{"service":"","method":""}]`},
			wantErrs: []string{
				`serviceconfig: methodConfig[1].name[1]: duplicate name {"service":"a.B"} (also in methodConfig[0].name[0])`,
				`serviceconfig: methodConfig[2].name[0]: duplicate name {} (also in methodConfig[0].name[1])`,
			},
		},
		{
			name:      "same method in different services",
			entries:   []string{`[{"service":"a.B","method":"M"}]`, `[{"service":"c.D","method":"M"}]`},
			wantNames: [][]serviceconfig.Name{{{Service: "a.B", Method: "M"}}, {{Service: "c.D", Method: "M"}}},
		},
		{
			name:      "names are case sensitive",
			entries:   []string{`[{"service":"a.B","method":"M"}]`, `[{"service":"a.b","method":"m"}]`},
			wantNames: [][]serviceconfig.Name{{{Service: "a.B", Method: "M"}}, {{Service: "a.b", Method: "m"}}},
		},
		{
			name:    "wrong types",
			entries: []string{`{}`, `[[]]`, `["a.B"]`, `[{"service":1}]`, `[{"service":"a.B","method":true}]`},
			wantErrs: []string{
				"serviceconfig: methodConfig[0].name: must be a JSON array of objects, got object",
				"serviceconfig: methodConfig[1].name[0]: must be a JSON object, got array",
				"serviceconfig: methodConfig[2].name[0]: must be a JSON object, got string",
				"serviceconfig: methodConfig[3].name[0].service: must be a string, got number",
				"serviceconfig: methodConfig[4].name[0].method: must be a string, got boolean",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var entries []obj
			for _, raw := range tc.entries {
				entries = append(entries, obj{}.with("name", raw))
			}
			c, errs := parse(t, methodConfigs(entries...))
			checkLines(t, "errors", errs, tc.wantErrs)
			if c == nil {
				return
			}
			var got [][]serviceconfig.Name
			for _, mc := range c.MethodConfigs {
				got = append(got, mc.Names)
			}
			if !reflect.DeepEqual(got, tc.wantNames) {
				t.Errorf("names = %v, want %v", got, tc.wantNames)
			}
		})
	}
}

func TestNameString(t *testing.T) {
	tests := []struct {
		in   serviceconfig.Name
		want string
	}{
		{serviceconfig.Name{}, `{}`},
		{serviceconfig.Name{Service: "a.B"}, `{"service":"a.B"}`},
		{serviceconfig.Name{Service: "a.B", Method: "M"}, `{"service":"a.B","method":"M"}`},
		{serviceconfig.Name{Method: "M"}, `{"method":"M"}`},
		{serviceconfig.Name{Service: `"<&>"`, Method: "\n"}, `{"service":"\"<&>\"","method":"\n"}`},
	}
	for _, tc := range tests {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("%#v.String() = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestParseWarnings(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"valid config", methodConfigs(validMethod.with("retryPolicy", validRetry.String())), nil},
		{"uninterpreted gRPC fields", `{"loadBalancingConfig":[{"pick_first":{}}],"healthCheckConfig":{"serviceName":""}}`, nil},
		{
			name: "unknown fields everywhere",
			in: `{"foo":1,"methodConfig":[{"name":[{"service":"a.B","version":2}],"bar":{},` +
				`"retryPolicy":{"maxAttempts":2,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":[14],"jitter":0.2},` +
				`"hedgingPolicy":null}],"retryThrottling":{"maxTokens":1,"tokenRatio":1,"perMethod":true}}`,
			want: []string{
				"foo: unknown field, ignored",
				"methodConfig[0].name[0].version: unknown field, ignored",
				"methodConfig[0].bar: unknown field, ignored",
				"methodConfig[0].retryPolicy.jitter: unknown field, ignored",
				"retryThrottling.perMethod: unknown field, ignored",
			},
		},
		{
			name: "keys that are not identifiers",
			in:   `{"a.b":1,"":2,"x\"y":3,"1x":4,"_ok1":5,"caf\u00e9":6,"\n":7}`,
			want: []string{
				`["a.b"]: unknown field, ignored`,
				`[""]: unknown field, ignored`,
				`["x\"y"]: unknown field, ignored`,
				`["1x"]: unknown field, ignored`,
				`_ok1: unknown field, ignored`,
				`["café"]: unknown field, ignored`,
				`["\n"]: unknown field, ignored`,
			},
		},
		{
			name: "misspelled fields",
			in:   `{"method_config":[],"retry-throttling":{},"retryThrottling":{"maxTokens":1,"tokenRatio":1,"MAX_TOKENS":2}}`,
			want: []string{
				`method_config: unknown field, ignored (did you mean "methodConfig"?)`,
				`["retry-throttling"]: unknown field, ignored (did you mean "retryThrottling"?)`,
				`retryThrottling.MAX_TOKENS: unknown field, ignored (did you mean "maxTokens"?)`,
			},
		},
		{
			// A letter dropped, added, changed or two swapped, at every
			// level, the top included; a key too far from every field
			// gets no guess.
			name: "near misses",
			in: `{"retryThrotling":{},"methodConfg":[],"loadBalancingPolcy":"x","healthCheckConfigs":{},` +
				`"methodConfig":[{"nmae":[],"name":[{"servce":"a.B","methdo":"M"}],"timout":"1s","waitForReday":true,` +
				`"maxRequestMesageBytes":1,"maxResponseMessageByte":1,` +
				`"retryPolicy":{"maxAtempts":2,"maxAttempts":2,"initialBackof":"1s","initialBackoff":"1s","maxBackoff":"1s",` +
				`"backofMultiplier":2,"backoffMultiplier":2,"retryableStatusCode":[14],` +
				`"retryableStatusCodes":[14],"perAtemptRecvTimeout":"1s","initalBackoff":"1s"}},` +
				`{"name":[{"service":"c.D"}],"hedgingPolicy":{"maxAttempts":2,"hedgingDelya":"1s","nonFatalStatusCode":[]}}],` +
				`"retryThrottling":{"maxToken":1,"tokenRation":1,"maxTokens":1,"tokenRatio":1,"token":1},"xyz":1,"retryThrottlingPolicyX":1}`,
			want: []string{
				`retryThrotling: unknown field, ignored (did you mean "retryThrottling"?)`,
				`methodConfg: unknown field, ignored (did you mean "methodConfig"?)`,
				`loadBalancingPolcy: unknown field, ignored (did you mean "loadBalancingPolicy"?)`,
				`healthCheckConfigs: unknown field, ignored (did you mean "healthCheckConfig"?)`,
				`methodConfig[0].nmae: unknown field, ignored (did you mean "name"?)`,
				`methodConfig[0].name[0].servce: unknown field, ignored (did you mean "service"?)`,
				`methodConfig[0].name[0].methdo: unknown field, ignored (did you mean "method"?)`,
				`methodConfig[0].timout: unknown field, ignored (did you mean "timeout"?)`,
				`methodConfig[0].waitForReday: unknown field, ignored (did you mean "waitForReady"?)`,
				`methodConfig[0].maxRequestMesageBytes: unknown field, ignored (did you mean "maxRequestMessageBytes"?)`,
				`methodConfig[0].maxResponseMessageByte: unknown field, ignored (did you mean "maxResponseMessageBytes"?)`,
				`methodConfig[0].retryPolicy.maxAtempts: unknown field, ignored (did you mean "maxAttempts"?)`,
				`methodConfig[0].retryPolicy.initialBackof: unknown field, ignored (did you mean "initialBackoff"?)`,
				`methodConfig[0].retryPolicy.backofMultiplier: unknown field, ignored (did you mean "backoffMultiplier"?)`,
				`methodConfig[0].retryPolicy.retryableStatusCode: unknown field, ignored (did you mean "retryableStatusCodes"?)`,
				`methodConfig[0].retryPolicy.perAtemptRecvTimeout: unknown field, ignored (did you mean "perAttemptRecvTimeout"?)`,
				`methodConfig[0].retryPolicy.initalBackoff: unknown field, ignored (did you mean "initialBackoff"?)`,
				`methodConfig[1].hedgingPolicy.hedgingDelya: unknown field, ignored (did you mean "hedgingDelay"?)`,
				`methodConfig[1].hedgingPolicy.nonFatalStatusCode: unknown field, ignored (did you mean "nonFatalStatusCodes"?)`,
				`retryThrottling.maxToken: unknown field, ignored (did you mean "maxTokens"?)`,
				`retryThrottling.tokenRation: unknown field, ignored (did you mean "tokenRatio"?)`,
				`retryThrottling.token: unknown field, ignored`,
				`xyz: unknown field, ignored`,
				`retryThrottlingPolicyX: unknown field, ignored`,
			},
		},
		{
			name: "no names",
			in:   methodConfigs(obj{{"timeout", `"1s"`}}, obj{{"name", "[]"}}, obj{{"name", "null"}}),
			want: []string{
				`methodConfig[0]: no "name" list, so this entry applies to no method`,
				`methodConfig[1].name: empty, so this entry applies to no method`,
				`methodConfig[2]: no "name" list, so this entry applies to no method`,
			},
		},
		{
			name: "slash in a name",
			in:   methodConfigs(obj{{"name", `[{"service":"/a.B"},{"service":"a.B","method":"M/N"}]`}}),
			want: []string{
				`methodConfig[0].name[0]: contains "/", so it matches no call`,
				`methodConfig[0].name[1]: contains "/", so it matches no call`,
			},
		},
		{
			name: "maxAttempts above the client limit",
			in: methodConfigs(
				validMethod.with("retryPolicy", validRetry.with("maxAttempts", "6").String()),
				obj{{"name", `[{}]`}, {"hedgingPolicy", validHedge.with("maxAttempts", "100000000000000000000").String()}},
				obj{{"name", `[{"service":"t.T"}]`}, {"retryPolicy", validRetry.with("maxAttempts", "5").String()}},
			),
			want: []string{
				"methodConfig[0].retryPolicy.maxAttempts: 6 is above the default client limit of 5; clients make at most 5 attempts unless their limit is raised",
				"methodConfig[1].hedgingPolicy.maxAttempts: 100000000000000000000 is above the default client limit of 5; clients make at most 5 attempts unless their limit is raised",
			},
		},
		{
			name: "maxBackoff below initialBackoff",
			in:   retryConfig(validRetry.with("initialBackoff", `"2s"`, "maxBackoff", `"1s"`)),
			want: []string{"methodConfig[0].retryPolicy.maxBackoff: is less than initialBackoff, so every backoff is capped at maxBackoff"},
		},
		{
			name: "duplicate status codes",
			in: methodConfigs(
				validMethod.with("retryPolicy", validRetry.with("retryableStatusCodes", `[14, "ABORTED", "unavailable", 10]`).String()),
				obj{{"name", `[{}]`}, {"hedgingPolicy", validHedge.with("nonFatalStatusCodes", `["internal", 13]`).String()}},
			),
			want: []string{
				"methodConfig[0].retryPolicy.retryableStatusCodes[2]: duplicate status code UNAVAILABLE (also at methodConfig[0].retryPolicy.retryableStatusCodes[0])",
				"methodConfig[0].retryPolicy.retryableStatusCodes[3]: duplicate status code ABORTED (also at methodConfig[0].retryPolicy.retryableStatusCodes[1])",
				"methodConfig[1].hedgingPolicy.nonFatalStatusCodes[1]: duplicate status code INTERNAL (also at methodConfig[1].hedgingPolicy.nonFatalStatusCodes[0])",
			},
		},
		{
			name: "zero timeout",
			in:   methodConfigs(validMethod.with("timeout", `"0s"`)),
			want: []string{"methodConfig[0].timeout: a timeout of 0 is treated as no timeout (grpc-go instead fails every call at once); omit the field to say so"},
		},
		{
			name: "tokenRatio truncated to zero",
			in:   `{"retryThrottling":{"maxTokens":10,"tokenRatio":0.0009}}`,
			want: []string{"retryThrottling.tokenRatio: 0.0009 is 0.000 once the decimal places beyond 3 are dropped, so successful calls never restore tokens"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, errs := parse(t, tc.in)
			if errs != nil {
				t.Fatalf("errors: %q", errs)
			}
			checkLines(t, "warnings", warningLines(c.Warnings), tc.want)
			// Suggestion is the guess the message names, and only that.
			for _, w := range c.Warnings {
				_, guess, _ := strings.Cut(w.Message, "(did you mean \"")
				guess, _, _ = strings.Cut(guess, "\"?)")
				if w.Suggestion != guess {
					t.Errorf("%s: Suggestion %q, want %q", w, w.Suggestion, guess)
				}
			}
		})
	}
}

func TestParseReportsEveryError(t *testing.T) {
	in := `{
	  "methodConfig": [
	    {"name": [{"service": "a.B"}], "retryPolicy": {"maxAttempts": 1, "initialBackoff": "0s", "maxBackoff": "1", "backoffMultiplier": 0, "retryableStatusCodes": []}},
	    {"name": [{"service": "a.B"}, {"method": "M"}], "hedgingPolicy": {"maxAttempts": "3", "hedgingDelay": "-1s", "nonFatalStatusCodes": [99]}, "timeout": "-1s", "waitForReady": "yes"},
	    {"name": [{}], "retryPolicy": {}, "maxRequestMessageBytes": -1, "unknown": 1}
	  ],
	  "retryThrottling": {"maxTokens": 1001, "tokenRatio": -1}
	}`
	_, errs := parse(t, in)
	checkLines(t, "errors", errs, []string{
		"serviceconfig: methodConfig[0].retryPolicy.maxAttempts: must be greater than 1, got 1",
		"serviceconfig: methodConfig[0].retryPolicy.initialBackoff: must be greater than 0",
		`serviceconfig: methodConfig[0].retryPolicy.maxBackoff: invalid duration "1": missing "s" suffix`,
		"serviceconfig: methodConfig[0].retryPolicy.backoffMultiplier: must be greater than 0, got 0",
		"serviceconfig: methodConfig[0].retryPolicy.retryableStatusCodes: must be non-empty unless perAttemptRecvTimeout is set",
		`serviceconfig: methodConfig[1].name[0]: duplicate name {"service":"a.B"} (also in methodConfig[0].name[0])`,
		`serviceconfig: methodConfig[1].name[1]: method "M" needs a service`,
		"serviceconfig: methodConfig[1].hedgingPolicy.maxAttempts: must be a JSON integer, got string",
		"serviceconfig: methodConfig[1].hedgingPolicy.hedgingDelay: must not be negative",
		"serviceconfig: methodConfig[1].hedgingPolicy.nonFatalStatusCodes[0]: invalid status code 99; valid codes are 0 to 16",
		"serviceconfig: methodConfig[1].timeout: must not be negative",
		"serviceconfig: methodConfig[1].waitForReady: must be a boolean, got string",
		"serviceconfig: methodConfig[2].retryPolicy.maxAttempts: must be specified",
		"serviceconfig: methodConfig[2].retryPolicy.initialBackoff: must be specified",
		"serviceconfig: methodConfig[2].retryPolicy.maxBackoff: must be specified",
		"serviceconfig: methodConfig[2].retryPolicy.backoffMultiplier: must be specified",
		"serviceconfig: methodConfig[2].retryPolicy.retryableStatusCodes: must be specified unless perAttemptRecvTimeout is set",
		"serviceconfig: methodConfig[2].maxRequestMessageBytes: must not be negative, got -1",
		"serviceconfig: retryThrottling.maxTokens: must be in the range (0, 1000], got 1001",
		"serviceconfig: retryThrottling.tokenRatio: must be greater than 0, got -1",
	})
}

func TestParseErrorType(t *testing.T) {
	_, err := serviceconfig.Parse([]byte(`{"retryThrottling":{"maxTokens":0,"tokenRatio":1}}`))
	var pe *serviceconfig.Error
	if !errors.As(err, &pe) {
		t.Fatalf("errors.As(%v, *Error) = false", err)
	}
	if pe.Path != "retryThrottling.maxTokens" || pe.Message != "must be in the range (0, 1000], got 0" {
		t.Errorf("Error = %+v", *pe)
	}
	if got := (&serviceconfig.Error{Message: "m"}).Error(); got != "serviceconfig: m" {
		t.Errorf("Error without a path = %q", got)
	}
	if got := (serviceconfig.Warning{Message: "m"}).String(); got != "m" {
		t.Errorf("Warning without a path = %q", got)
	}

	var errs []string

	// A long value is shortened in the message, without splitting a
	// character.
	_, errs = parse(t, retryConfig(validRetry.with("retryableStatusCodes", `["`+strings.Repeat("€", 100)+`"]`)))
	if want := `unknown status code name "` + strings.Repeat("€", 21) + `..."`; len(errs) != 1 || !strings.HasSuffix(errs[0], want) {
		t.Errorf("long name: %q, want suffix %q", errs, want)
	}
	// A long value is shortened in the message.
	_, errs = parse(t, `{"retryThrottling":{"maxTokens":`+strings.Repeat("1", 1000)+`,"tokenRatio":1}}`)
	if len(errs) != 1 || len(errs[0]) > 200 || !strings.HasSuffix(errs[0], "...") {
		t.Errorf("long value: %q", errs)
	}
}

func TestParseDoesNotRetainInput(t *testing.T) {
	data := []byte(methodConfigs(obj{{"name", `[{"service":"a.B","method":"M"}]`}}))
	c, err := serviceconfig.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	for i := range data {
		data[i] = 'x'
	}
	if got := c.MethodConfigs[0].Names[0]; got != (serviceconfig.Name{Service: "a.B", Method: "M"}) {
		t.Errorf("after overwriting the input, name = %v", got)
	}
}

// The gRPC fields that rebound does not interpret are kept exactly as
// written, for grpcretry to hand to grpc-go; a field named in another case
// is an unknown field, not one of them.
func TestParseKeepsGRPCFields(t *testing.T) {
	c, err := serviceconfig.Parse([]byte(`{
	  "loadBalancingConfig": [{"rebound_distinct": {"childPolicy": [{"round_robin": {}}]}}],
	  "healthCheckConfig": {"serviceName": "echo"},
	  "methodConfig": []
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(c.LoadBalancingConfig), `[{"rebound_distinct": {"childPolicy": [{"round_robin": {}}]}}]`; got != want {
		t.Errorf("LoadBalancingConfig = %s, want %s", got, want)
	}
	if got, want := string(c.HealthCheckConfig), `{"serviceName": "echo"}`; got != want {
		t.Errorf("HealthCheckConfig = %s, want %s", got, want)
	}

	// As in grpc-go, a field in another letter case is the same field (with
	// a warning), and the last one written wins.
	c, err = serviceconfig.Parse([]byte(`{"loadBalancingConfig": null, "healthCheckConfig": null, "LoadBalancingConfig": [{"round_robin": {}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(c.LoadBalancingConfig) != `[{"round_robin": {}}]` || c.HealthCheckConfig != nil {
		t.Errorf("got LoadBalancingConfig %s, HealthCheckConfig %s; want the last one written and nil", c.LoadBalancingConfig, c.HealthCheckConfig)
	}
	if len(c.Warnings) != 2 || c.Warnings[0].Path != "LoadBalancingConfig" || c.Warnings[1].Path != "LoadBalancingConfig" {
		t.Errorf("Warnings = %v, want two for LoadBalancingConfig (spelling and repeat)", c.Warnings)
	}
}

func TestParseGRPCFieldNull(t *testing.T) {
	c, err := serviceconfig.Parse([]byte(`{"loadBalancingConfig": null, "healthCheckConfig": {"serviceName": ""}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.LoadBalancingConfig != nil || string(c.HealthCheckConfig) != `{"serviceName": ""}` {
		t.Errorf("got LoadBalancingConfig %q, HealthCheckConfig %q; want nil and the object", c.LoadBalancingConfig, c.HealthCheckConfig)
	}
}

// Entries that name no method are left out of MethodConfigs; lookups and
// Lint find the kept ones in their slots, and paths still number the
// entries as written.
func TestUnnamedEntriesLeftOut(t *testing.T) {
	retry := func(codes string) string {
		return `"retryPolicy":{"maxAttempts":2,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[` + codes + `]}`
	}
	c, err := serviceconfig.Parse([]byte(`{"methodConfig":[{},
		{"name":[{"service":"a.B"}],` + retry(`"UNAVAILABLE","INVALID_ARGUMENT"`) + `},
		null,
		{` + retry(`"OK"`) + `},
		{"name":[{"service":"c.D"}],"timeout":"2s",` + retry(`"UNAVAILABLE"`) + `}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.MethodConfigs) != 2 {
		t.Fatalf("%d entries kept, want the 2 that name a method", len(c.MethodConfigs))
	}
	if c.MethodConfig("/a.B/M") != &c.MethodConfigs[0] || c.MethodConfig("/c.D/M") != &c.MethodConfigs[1] || c.MethodConfigs[1].Timeout != 2*time.Second {
		t.Fatal("lookups do not find the kept entries")
	}
	var got []string
	for _, w := range serviceconfig.Lint(c) {
		got = append(got, w.Path)
	}
	if want := []string{"methodConfig[1].retryPolicy.retryableStatusCodes[1]"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Lint paths %q, want %q (entry 3's OK names no method)", got, want)
	}
}

// A config that starts with a UTF-8 byte order mark is read past it, with
// a warning at 1:1 that grpc-go rejects it; lines and columns count from
// after it, as editors count them, and its warning comes first, beside
// errors too.
func TestParseByteOrderMark(t *testing.T) {
	const bom = "\ufeff"
	c, err := serviceconfig.Parse([]byte(bom + "{\"methodConfig\":[{\"name\":[{}],\"timeout\":\"1s\",\"x\":1}]}"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 2 || c.Warnings[0].Line != 1 || c.Warnings[0].Column != 1 || c.Warnings[0].Path != "" ||
		!strings.Contains(c.Warnings[0].Message, "byte order mark") || !strings.Contains(c.Warnings[0].Message, "grpc-go rejects it") {
		t.Fatalf("warnings %v, want the byte order mark's first", c.Warnings)
	}
	if w := c.Warnings[1]; w.Path != "methodConfig[0].x" || w.Line != 1 || w.Column != 46 {
		t.Errorf("unknown field at %d:%d %s, want 1:46 methodConfig[0].x (counted after the mark)", w.Line, w.Column, w.Path)
	}
	if c.MethodConfigs[0].Timeout != time.Second {
		t.Errorf("timeout %v, want 1s", c.MethodConfigs[0].Timeout)
	}
	for _, in := range []string{bom + `{"methodConfig":1}`, bom + `{`} {
		_, err := serviceconfig.Parse([]byte(in))
		var pe *serviceconfig.ParseError
		if !errors.As(err, &pe) || len(pe.Warnings) != 1 || !strings.Contains(pe.Warnings[0].Message, "byte order mark") {
			t.Errorf("%q: %v, want an error and the byte order mark's warning", in, err)
		}
	}
}
