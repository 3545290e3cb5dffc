package grpcretry

import (
	"encoding/json"
	"log/slog"
	"testing"

	"google.golang.org/grpc/resolver"
	grpcsc "google.golang.org/grpc/serviceconfig"

	"github.com/rebound-go/rebound/serviceconfig"
)

// parseRecorder is the grpc-go side of a wrapped resolver: it records the
// service configs rebound asks grpc-go to parse and the state it hands on.
type parseRecorder struct {
	resolver.ClientConn // nil: only the methods below are called
	parsed              []string
	states              []resolver.State
}

func (r *parseRecorder) ParseServiceConfig(js string) *grpcsc.ParseResult {
	r.parsed = append(r.parsed, js)
	return &grpcsc.ParseResult{}
}

func (r *parseRecorder) UpdateState(st resolver.State) error {
	r.states = append(r.states, st)
	return nil
}

// FuzzResolverConfig feeds what a name resolver delivers (for DNS, the
// serviceConfig of the TXT record, which any DNS operator, or anyone who
// spoofs DNS, controls) through the resolver wrapper: a config that
// serviceconfig.Parse accepts replaces the one in force, any other input is
// counted, leaves the config in force alone and gives grpc-go no config;
// and grpc-go is never handed a field that would make it retry or hedge
// beside rebound.
func FuzzResolverConfig(f *testing.F) {
	for _, s := range []string{
		`{}`,
		`{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`,
		`{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":"x"},"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}`,
		`{"loadBalancingPolicy":"round_robin","methodConfig":[{"name":[{}],"hedgingPolicy":{"maxAttempts":3,"hedgingDelay":"0.01s"}}]}`,
		`{"MethodConfig":[{"Name":[{"Service":"a.B"}],"RetryPolicy":{"MaxAttempts":2,"InitialBackoff":".01s","MaxBackoff":"1s","BackoffMultiplier":1,"RetryableStatusCodes":["unavailable"]}}]}`,
		`{"methodConfig":[{"retryPolicy":{"maxAttempts":0}}]}`,
		`null`, `[]`, `{"loadBalancingConfig":`, "",
	} {
		f.Add(s)
	}
	own := &serviceconfig.Config{}
	f.Fuzz(func(t *testing.T, js string) {
		c, err := New(own, WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		grpcGo := &parseRecorder{}
		s := c.slot("fuzz:///target")
		w := &configConn{ClientConn: grpcGo, c: c, s: s, parsed: map[*grpcsc.ParseResult]parsedConfig{}}
		pr := w.ParseServiceConfig(js)
		if err := w.UpdateState(resolver.State{ServiceConfig: pr}); (err == nil) != (pr.Err == nil) {
			t.Fatalf("UpdateState: %v, for a parse error %v", err, pr.Err)
		}
		want, perr := serviceconfig.Parse([]byte(js))
		got := s.cfg.Load()
		switch {
		case perr != nil && pr.Err == nil:
			t.Fatalf("Parse rejects the config (%v) but the wrapper passed it on", perr)
		case perr != nil:
			if got != own || c.ResolverConfigErrors() != 1 {
				t.Fatalf("a rejected config: config in force changed (%v), %d errors counted; want the own config, 1", got != own, c.ResolverConfigErrors())
			}
			if len(grpcGo.states) != 1 || grpcGo.states[0].ServiceConfig != nil {
				t.Fatalf("a rejected config reached grpc-go: %+v", grpcGo.states)
			}
		default:
			if pr.Err != nil || got == own || got == nil || c.ResolverConfigErrors() != 0 {
				t.Fatalf("a valid config was not applied: %v", pr.Err)
			}
			if len(got.MethodConfigs) != len(want.MethodConfigs) || (got.RetryThrottling == nil) != (want.RetryThrottling == nil) {
				t.Fatal("the config in force is not the one Parse makes of the input")
			}
		}
		for _, gjs := range grpcGo.parsed {
			var fields map[string]json.RawMessage
			if err := json.Unmarshal([]byte(gjs), &fields); err != nil {
				t.Fatalf("grpc-go was handed %q, not a JSON object: %v", gjs, err)
			}
			for k := range fields {
				switch k {
				case "loadBalancingPolicy", "loadBalancingConfig", "healthCheckConfig":
				default:
					t.Fatalf("grpc-go was handed the field %q (in %s)", k, gjs)
				}
			}
		}
	})
}
