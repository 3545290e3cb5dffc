package serviceconfig_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rebound-go/rebound/serviceconfig"
)

// grpcGoParse runs grpc-go's own service config parser on js: grpc.NewClient
// parses a default service config up front and fails if it is invalid. It
// connects to nothing.
func grpcGoParse(js string) error {
	cc, err := grpc.NewClient("passthrough:///unused",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(js))
	if err != nil {
		return err
	}
	return cc.Close()
}

const repeated = `"%s" is set more than once in this object; the last is used, as in grpc-go, but other gRPC implementations may reject the config`

func caseWarning(path, canonical string) string {
	return path + `: A6 spells this field "` + canonical + `"; grpc-go accepts any letter case, other gRPC implementations do not`
}

// Every spelling that grpc-go's parser accepts and A6 does not use is
// accepted, with a warning that names A6's spelling at the JSON path of what
// was written. Each case is checked against grpc-go itself first.
func TestParseGRPCGoSpellings(t *testing.T) {
	canonical := func(c *serviceconfig.Config) serviceconfig.Config { return exported(c) }
	tests := []struct {
		name  string
		in    string
		warns []string
		// want is the config in A6 spelling that in must parse the same as
		// (warnings aside), or empty to use check.
		want  string
		check func(t *testing.T, c *serviceconfig.Config)
	}{
		{
			name: "field names in any letter case",
			in: `{"LoadBalancingPolicy":"round_robin","MethodConfig":[{"Name":[{"Service":"a.B","METHOD":"M"}],` +
				`"RetryPolicy":{"MaxAttempts":3,"InitialBackoff":"0.1s","maxbackoff":"1s","BackoffMultiplier":2,"RetryableStatusCodes":["UNAVAILABLE"]},` +
				`"Timeout":"1s","WaitForReady":true,"MaxRequestMessageBytes":1024,"maxResponseMessageBYTES":2048}],` +
				`"RetryThrottling":{"MaxTokens":10,"TokenRatio":0.1}}`,
			want: `{"loadBalancingPolicy":"round_robin","methodConfig":[{"name":[{"service":"a.B","method":"M"}],` +
				`"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]},` +
				`"timeout":"1s","waitForReady":true,"maxRequestMessageBytes":1024,"maxResponseMessageBytes":2048}],` +
				`"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}`,
			warns: []string{
				caseWarning("LoadBalancingPolicy", "loadBalancingPolicy"),
				caseWarning("MethodConfig", "methodConfig"),
				caseWarning("MethodConfig[0].Name", "name"),
				caseWarning("MethodConfig[0].Name[0].Service", "service"),
				caseWarning("MethodConfig[0].Name[0].METHOD", "method"),
				caseWarning("MethodConfig[0].RetryPolicy", "retryPolicy"),
				caseWarning("MethodConfig[0].RetryPolicy.MaxAttempts", "maxAttempts"),
				caseWarning("MethodConfig[0].RetryPolicy.InitialBackoff", "initialBackoff"),
				caseWarning("MethodConfig[0].RetryPolicy.maxbackoff", "maxBackoff"),
				caseWarning("MethodConfig[0].RetryPolicy.BackoffMultiplier", "backoffMultiplier"),
				caseWarning("MethodConfig[0].RetryPolicy.RetryableStatusCodes", "retryableStatusCodes"),
				caseWarning("MethodConfig[0].Timeout", "timeout"),
				caseWarning("MethodConfig[0].WaitForReady", "waitForReady"),
				caseWarning("MethodConfig[0].MaxRequestMessageBytes", "maxRequestMessageBytes"),
				caseWarning("MethodConfig[0].maxResponseMessageBYTES", "maxResponseMessageBytes"),
				caseWarning("RetryThrottling", "retryThrottling"),
				caseWarning("RetryThrottling.MaxTokens", "maxTokens"),
				caseWarning("RetryThrottling.TokenRatio", "tokenRatio"),
			},
		},
		{
			// encoding/json folds case as Unicode does: ſ (U+017F) is an s.
			name:  "Unicode case folding",
			in:    retryConfig(validRetry.with("maxAttempts", "", "maxAttempt\u017f", "4")),
			want:  retryConfig(validRetry.with("maxAttempts", "4")),
			warns: []string{caseWarning(`methodConfig[0].retryPolicy["maxAttempt`+"\u017f"+`"]`, "maxAttempts")},
		},
		{
			name: "a field written twice, in two cases",
			in:   retryConfig(validRetry.with("maxAttempts", `2,"MaxAttempts":4`)),
			want: retryConfig(validRetry.with("maxAttempts", "4")),
			warns: []string{
				caseWarning("methodConfig[0].retryPolicy.MaxAttempts", "maxAttempts"),
				"methodConfig[0].retryPolicy.MaxAttempts: " + strings.ReplaceAll(repeated, "%s", "maxAttempts"),
			},
		},
		{
			name: "durations without an integer part or a fraction",
			in:   retryConfig(validRetry.with("initialBackoff", `".01s"`, "maxBackoff", `"2.s"`)),
			want: retryConfig(validRetry.with("initialBackoff", `"0.01s"`, "maxBackoff", `"2s"`)),
			warns: []string{
				`methodConfig[0].retryPolicy.initialBackoff: ".01s" is not a proto3 JSON duration; grpc-go reads it as "0.010s", A6's spelling`,
				`methodConfig[0].retryPolicy.maxBackoff: "2.s" is not a proto3 JSON duration; grpc-go reads it as "2s", A6's spelling`,
			},
		},
		{
			name: "durations with leading zeros or signs",
			in:   methodConfigs(validMethod.with("timeout", `"007.5s"`), obj{{"name", `[{"service":"x.Y"}]`}, {"timeout", `"+1.+5s"`}}, obj{{"name", `[{"service":"z.Z"}]`}, {"timeout", `"--2s"`}}),
			want: methodConfigs(validMethod.with("timeout", `"7.5s"`), obj{{"name", `[{"service":"x.Y"}]`}, {"timeout", `"1.05s"`}}, obj{{"name", `[{"service":"z.Z"}]`}, {"timeout", `"2s"`}}),
			warns: []string{
				`methodConfig[0].timeout: "007.5s" is not a proto3 JSON duration; grpc-go reads it as "7.500s", A6's spelling`,
				`methodConfig[1].timeout: "+1.+5s" is not a proto3 JSON duration; grpc-go reads it as "1.050s", A6's spelling`,
				`methodConfig[2].timeout: "--2s" is not a proto3 JSON duration; grpc-go reads it as "2s", A6's spelling`,
			},
		},
		{
			name: "durations beyond time.Duration",
			in:   hedgeConfig(validHedge.with("hedgingDelay", `"315576000000s"`)),
			want: hedgeConfig(validHedge.with("hedgingDelay", `"9223372036.854775807s"`)),
			warns: []string{
				`methodConfig[0].hedgingPolicy.hedgingDelay: "315576000000s" is beyond the longest time.Duration, so it is read as "9223372036.854775807s" (about 292 years), as grpc-go reads it`,
			},
		},
		{
			name: "maxTokens as a whole number in another form",
			in:   `{"retryThrottling":{"maxTokens":10.0,"tokenRatio":0.1}}`,
			want: `{"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}`,
			warns: []string{
				"retryThrottling.maxTokens: 10.0 is read as 10, as grpc-go reads it; A6 writes maxTokens as an integer: 10",
			},
		},
		{
			name:  "a null service config",
			in:    `null`,
			want:  `{}`,
			warns: []string{"a null service config is read as {}, as grpc-go reads it; write {}"},
		},
		{
			name: "null entries, names and codes",
			in:   `{"methodConfig":[null,{"name":[null],"retryPolicy":` + validRetry.with("retryableStatusCodes", `[null,"UNAVAILABLE"]`).String() + `}]}`,
			want: `{"methodConfig":[{},{"name":[{}],"retryPolicy":` + validRetry.with("retryableStatusCodes", `["OK","UNAVAILABLE"]`).String() + `}]}`,
			warns: []string{
				"methodConfig[0]: null is read as {}, an entry that applies to no method, as grpc-go reads it; remove it",
				"methodConfig[1].name[0]: null is read as {}, the default name, as grpc-go reads it; write {}",
				`methodConfig[1].retryPolicy.retryableStatusCodes[0]: null is read as OK (0), as grpc-go reads it; write "OK" if that is meant`,
			},
			check: func(t *testing.T, c *serviceconfig.Config) {
				// The null entry names no method, so it is left out.
				if len(c.MethodConfigs) != 1 || c.MethodConfig("/any.Service/Method") != &c.MethodConfigs[0] {
					t.Errorf("a null name is not the default name")
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := grpcGoParse(tc.in); err != nil {
				t.Fatalf("grpc-go rejects the config, so the case is wrong: %v", err)
			}
			c, errs := parse(t, tc.in)
			if errs != nil {
				t.Fatalf("Parse(%s) errors:\n\t%s", tc.in, strings.Join(errs, "\n\t"))
			}
			var got []string
			for _, w := range c.Warnings {
				if !strings.HasPrefix(w.Message, `no "name" list`) {
					got = append(got, w.String())
				}
			}
			checkLines(t, "warnings", got, tc.warns)
			if tc.want != "" {
				wc, werrs := parse(t, tc.want)
				if werrs != nil {
					t.Fatalf("Parse(want) errors: %q", werrs)
				}
				g, w := canonical(c), canonical(wc)
				g.Warnings, w.Warnings = nil, nil
				if !reflect.DeepEqual(g, w) {
					t.Errorf("Parse(%s) =\n\t%+v\nwant, as for %s:\n\t%+v", tc.in, g, tc.want, w)
				}
			}
			if tc.check != nil {
				tc.check(t, c)
			}
		})
	}
}

// Where A6 and grpc-go differ, Parse follows A6: each of these configs
// works in grpc-go and is rejected here, with the error named.
func TestParseA6OverGRPCGo(t *testing.T) {
	tests := []struct {
		name, in, wantErr string
	}{
		{"both policies", methodConfigs(validMethod.with("retryPolicy", validRetry.String(), "hedgingPolicy", validHedge.String())),
			"methodConfig[0]: retryPolicy and hedgingPolicy are mutually exclusive; set at most one"},
		{"hedging policy checked", hedgeConfig(validHedge.with("maxAttempts", "1")),
			"methodConfig[0].hedgingPolicy.maxAttempts: must be greater than 1, got 1"},
		{"negative timeout", methodConfigs(validMethod.with("timeout", `"-1s"`)),
			"methodConfig[0].timeout: must not be negative"},
		{"negative message limit", methodConfigs(validMethod.with("maxRequestMessageBytes", "-1")),
			"methodConfig[0].maxRequestMessageBytes: must not be negative, got -1"},
		{"fractional maxTokens", `{"retryThrottling":{"maxTokens":10.5,"tokenRatio":0.1}}`,
			"retryThrottling.maxTokens: must be a JSON integer, got 10.5"},
		{"retryThrottling without methodConfig", `{"retryThrottling":{"maxTokens":0,"tokenRatio":0.1}}`,
			"retryThrottling.maxTokens: must be in the range (0, 1000], got 0"},
		{"invalid retry policy in an entry without names", methodConfigs(obj{{"retryPolicy", validRetry.with("maxAttempts", "1").String()}}),
			"methodConfig[0].retryPolicy.maxAttempts: must be greater than 1, got 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := grpcGoParse(tc.in); err != nil {
				t.Fatalf("grpc-go rejects the config, so the case is wrong: %v", err)
			}
			_, errs := parse(t, tc.in)
			checkLines(t, "errors", errs, []string{"serviceconfig: " + tc.wantErr})
		})
	}
}

// a6Difference reports whether Parse's rejection of the config in, which
// grpc-go accepts, is one of the deliberate differences that
// TestParseA6OverGRPCGo shows, or one that comes from grpc-go merging a
// repeated object.
func a6Difference(in string, pe *serviceconfig.ParseError) bool {
	// grpc-go checks retryThrottling only if methodConfig is present.
	var top struct{ MethodConfig *json.RawMessage }
	_ = json.Unmarshal([]byte(in), &top)
	throttlingUnchecked := top.MethodConfig == nil
	for _, w := range pe.Warnings {
		if strings.Contains(w.Message, "is set more than once") {
			return true
		}
	}
	nameless := func(path string) bool {
		for _, w := range pe.Warnings {
			if w.Message == `no "name" list, so this entry applies to no method` && strings.HasPrefix(path, w.Path) {
				return true
			}
		}
		return false
	}
	for _, e := range pe.Errors {
		switch {
		case strings.Contains(strings.ToLower(e.Path), "hedgingpolicy"),
			strings.Contains(strings.ToLower(e.Path), "perattemptrecvtimeout"),
			strings.Contains(e.Message, "mutually exclusive"),
			strings.HasPrefix(e.Message, "must not be negative"),
			strings.HasPrefix(strings.ToLower(e.Path), "retrythrottling.maxtokens") && strings.HasPrefix(e.Message, "must be a JSON integer"),
			strings.HasPrefix(e.Message, "and ") && e.Path == "",
			throttlingUnchecked && strings.HasPrefix(strings.ToLower(e.Path), "retrythrottling"),
			nameless(e.Path):
		default:
			return false
		}
	}
	return true
}

// FuzzGRPCGoCompat checks that every config grpc-go's parser accepts is
// accepted by Parse too, but for the differences A6 demands.
func FuzzGRPCGoCompat(f *testing.F) {
	for _, s := range []string{
		`null`, `{}`, lookupConfig,
		retryConfig(validRetry.with("maxAttempts", "", "MAXATTEMPTS", "3", "initialBackoff", `".5s"`)),
		methodConfigs(obj{{"Name", `[null, {"Service":"a.B"}]`}, {"timeout", `"-0.s"`}}),
		`{"retryThrottling":{"maxTokens":1e3,"TokenRatio":0.0001}}`,
		`{"methodConfig":[{"name":[{}],"retryPolicy":{"maxAttempts":2,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[null,14]}}],"methodConfig":null}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if len(in) > 4096 || grpcGoParse(in) != nil {
			return
		}
		_, err := serviceconfig.Parse([]byte(in))
		var pe *serviceconfig.ParseError
		if err != nil && (!errors.As(err, &pe) || !a6Difference(in, pe)) {
			t.Fatalf("grpc-go accepts %s; Parse says:\n%v", in, err)
		}
	})
}
