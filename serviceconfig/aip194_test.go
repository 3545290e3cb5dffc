package serviceconfig_test

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/rebound-go/rebound/serviceconfig"
)

func TestAIP194(t *testing.T) {
	names := []serviceconfig.Name{{Service: "pkg.Library", Method: "GetBook"}, {Service: "pkg.Library", Method: "ListBooks"}}
	mc := serviceconfig.AIP194(names...)
	names[0].Method = "DeleteBook" // the names are copied

	want := serviceconfig.MethodConfig{
		Names: []serviceconfig.Name{{Service: "pkg.Library", Method: "GetBook"}, {Service: "pkg.Library", Method: "ListBooks"}},
		RetryPolicy: &serviceconfig.RetryPolicy{
			MaxAttempts:          5,
			InitialBackoff:       100 * time.Millisecond,
			MaxBackoff:           5 * time.Second,
			BackoffMultiplier:    2,
			RetryableStatusCodes: serviceconfig.NewCodeSet(serviceconfig.Unavailable),
		},
	}
	if !reflect.DeepEqual(mc, want) {
		t.Fatalf("AIP194 = %+v, want %+v", mc, want)
	}

	// The policy is a valid A6 policy: the same settings written as JSON
	// parse to it, without warnings.
	c, errs := parse(t, `{"methodConfig":[{
	  "name":[{"service":"pkg.Library","method":"GetBook"},{"service":"pkg.Library","method":"ListBooks"}],
	  "retryPolicy":{"maxAttempts":5,"initialBackoff":"0.1s","maxBackoff":"5s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`)
	if errs != nil {
		t.Fatal(errs)
	}
	if !reflect.DeepEqual(c.MethodConfigs[0], want) || c.Warnings != nil {
		t.Errorf("JSON form parses to %+v with warnings %v, want %+v", c.MethodConfigs[0], c.Warnings, want)
	}

	// Its attempts are not clamped by default, and the backoff bounds stay
	// below 1s within them.
	rp := mc.RetryPolicy
	if got := rp.Attempts(0); got != 5 {
		t.Errorf("Attempts(0) = %d, want 5", got)
	}
	var total time.Duration
	for retry := 1; retry < rp.Attempts(0); retry++ {
		total += rp.BackoffCeiling(retry)
	}
	if total != 1500*time.Millisecond {
		t.Errorf("sum of backoff ceilings = %v, want 1.5s", total)
	}

	built := &serviceconfig.Config{MethodConfigs: []serviceconfig.MethodConfig{mc}}
	if ws := serviceconfig.Lint(built); ws != nil {
		t.Errorf("Lint(AIP194 config) = %v, want nil", ws)
	}
	if got := built.MethodConfig("/pkg.Library/ListBooks"); got != &built.MethodConfigs[0] {
		t.Errorf("MethodConfig(ListBooks) = %v", got)
	}
	if got := built.MethodConfig("/pkg.Library/DeleteBook"); got != nil {
		t.Errorf("MethodConfig(DeleteBook) = %v, want nil", got)
	}

	if got := serviceconfig.AIP194(); got.Names != nil || got.RetryPolicy == nil {
		t.Errorf("AIP194() = %+v", got)
	}
}

// TestLintCategories checks every status code against the lists of AIP-194.
func TestLintCategories(t *testing.T) {
	const (
		never     = " should never be retried automatically (AIP-194)"
		generally = " should generally not be retried automatically (AIP-194)"
	)
	want := map[serviceconfig.Code]string{
		serviceconfig.OK:                 " should never be retried automatically (AIP-194); it is a success, so listing it has no effect",
		serviceconfig.Cancelled:          never,
		serviceconfig.Unknown:            generally,
		serviceconfig.InvalidArgument:    never,
		serviceconfig.DeadlineExceeded:   never,
		serviceconfig.NotFound:           never,
		serviceconfig.AlreadyExists:      never,
		serviceconfig.PermissionDenied:   never,
		serviceconfig.ResourceExhausted:  generally,
		serviceconfig.FailedPrecondition: never,
		serviceconfig.Aborted:            generally,
		serviceconfig.OutOfRange:         never,
		serviceconfig.Unimplemented:      never,
		serviceconfig.Internal:           generally,
		serviceconfig.Unavailable:        "",
		serviceconfig.DataLoss:           never,
		serviceconfig.Unauthenticated:    never,
	}
	for code := serviceconfig.OK; code <= serviceconfig.Unauthenticated; code++ {
		for _, hedging := range []bool{false, true} {
			mc := serviceconfig.MethodConfig{Names: []serviceconfig.Name{{}}}
			at := "methodConfig[0].retryPolicy.retryableStatusCodes"
			if hedging {
				mc.HedgingPolicy = &serviceconfig.HedgingPolicy{MaxAttempts: 2, NonFatalStatusCodes: serviceconfig.NewCodeSet(code)}
				at = "methodConfig[0].hedgingPolicy.nonFatalStatusCodes"
			} else {
				mc.RetryPolicy = &serviceconfig.RetryPolicy{MaxAttempts: 2, RetryableStatusCodes: serviceconfig.NewCodeSet(code)}
			}
			got := serviceconfig.Lint(&serviceconfig.Config{MethodConfigs: []serviceconfig.MethodConfig{mc}})
			var wantWs []serviceconfig.Warning
			if want[code] != "" {
				// A hand-built config has no element positions: the path
				// names the array.
				wantWs = []serviceconfig.Warning{{Path: at, Message: code.String() + want[code]}}
			}
			if !reflect.DeepEqual(got, wantWs) {
				t.Errorf("Lint(%s in %s) = %v, want %v", code, at, got, wantWs)
			}
		}
	}
}

func TestLint(t *testing.T) {
	c, errs := parse(t, `{"methodConfig":[
	  {"name":[{"service":"a.B"}], "retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
	    "retryableStatusCodes":["UNAVAILABLE", "invalid_argument", 13, "ok", "INVALID_ARGUMENT", 8]}},
	  {"name":[{"service":"c.D"}], "timeout":"1s"},
	  {"name":[{}], "hedgingPolicy":{"maxAttempts":3,"nonFatalStatusCodes":["aborted", "UNAVAILABLE", "DEADLINE_EXCEEDED"]}}
	]}`)
	if errs != nil {
		t.Fatal(errs)
	}
	checkLines(t, "Lint", warningLines(serviceconfig.Lint(c)), []string{
		"methodConfig[0].retryPolicy.retryableStatusCodes[1]: INVALID_ARGUMENT should never be retried automatically (AIP-194)",
		"methodConfig[0].retryPolicy.retryableStatusCodes[2]: INTERNAL should generally not be retried automatically (AIP-194)",
		"methodConfig[0].retryPolicy.retryableStatusCodes[3]: OK should never be retried automatically (AIP-194); it is a success, so listing it has no effect",
		"methodConfig[0].retryPolicy.retryableStatusCodes[5]: RESOURCE_EXHAUSTED should generally not be retried automatically (AIP-194)",
		"methodConfig[2].hedgingPolicy.nonFatalStatusCodes[0]: ABORTED should generally not be retried automatically (AIP-194)",
		"methodConfig[2].hedgingPolicy.nonFatalStatusCodes[2]: DEADLINE_EXCEEDED should never be retried automatically (AIP-194)",
	})
	// Lint reports only its own findings, not the parse warnings.
	checkLines(t, "Warnings", warningLines(c.Warnings), []string{
		"methodConfig[0].retryPolicy.retryableStatusCodes[4]: duplicate status code INVALID_ARGUMENT (also at methodConfig[0].retryPolicy.retryableStatusCodes[1])",
	})

	if ws := serviceconfig.Lint(nil); ws != nil {
		t.Errorf("Lint(nil) = %v", ws)
	}
	if ws := serviceconfig.Lint(&serviceconfig.Config{}); ws != nil {
		t.Errorf("Lint(empty) = %v", ws)
	}

	// A hand-built config lists codes in numeric order, by array path.
	built := &serviceconfig.Config{MethodConfigs: []serviceconfig.MethodConfig{{
		RetryPolicy: &serviceconfig.RetryPolicy{RetryableStatusCodes: serviceconfig.NewCodeSet(serviceconfig.Internal, serviceconfig.Cancelled, serviceconfig.Unavailable)},
	}}}
	checkLines(t, "Lint(built)", warningLines(serviceconfig.Lint(built)), []string{
		"methodConfig[0].retryPolicy.retryableStatusCodes: CANCELLED should never be retried automatically (AIP-194)",
		"methodConfig[0].retryPolicy.retryableStatusCodes: INTERNAL should generally not be retried automatically (AIP-194)",
	})
}

// IncludeLint puts Lint's warnings among Parse's, in document order, for a
// valid config (the same as Lint's) and for an invalid one, beside its
// errors; entries that name no method are not linted.
func TestIncludeLint(t *testing.T) {
	valid := `{"methodConfig":[
	  {"name":[{"service":"a.B"}], "retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
	    "retryableStatusCodes":["UNAVAILABLE", "invalid_argument", 13, "ok", "INVALID_ARGUMENT", 8]}},
	  {"name":[{}], "hedgingPolicy":{"maxAttempts":3,"nonFatalStatusCodes":["aborted", "UNAVAILABLE"]}}
	]}`
	c, err := serviceconfig.Parse([]byte(valid), serviceconfig.IncludeLint())
	if err != nil {
		t.Fatal(err)
	}
	checkLines(t, "Warnings with IncludeLint", warningLines(c.Warnings), []string{
		"methodConfig[0].retryPolicy.retryableStatusCodes[1]: INVALID_ARGUMENT should never be retried automatically (AIP-194)",
		"methodConfig[0].retryPolicy.retryableStatusCodes[2]: INTERNAL should generally not be retried automatically (AIP-194)",
		"methodConfig[0].retryPolicy.retryableStatusCodes[3]: OK should never be retried automatically (AIP-194); it is a success, so listing it has no effect",
		"methodConfig[0].retryPolicy.retryableStatusCodes[4]: duplicate status code INVALID_ARGUMENT (also at methodConfig[0].retryPolicy.retryableStatusCodes[1])",
		"methodConfig[0].retryPolicy.retryableStatusCodes[5]: RESOURCE_EXHAUSTED should generally not be retried automatically (AIP-194)",
		"methodConfig[1].hedgingPolicy.nonFatalStatusCodes[0]: ABORTED should generally not be retried automatically (AIP-194)",
	})
	// The same findings, places included, as Parse's warnings and Lint's
	// together.
	plain, err := serviceconfig.Parse([]byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	both := append(slices.Clone(plain.Warnings), serviceconfig.Lint(plain)...)
	if got := c.Warnings; len(got) != len(both) {
		t.Fatalf("%d warnings, want %d", len(got), len(both))
	}
	for _, w := range both {
		if !slices.Contains(c.Warnings, w) {
			t.Errorf("IncludeLint lacks %+v", w)
		}
	}

	// An invalid config: its errors, and the advice on every code list
	// written, whatever else is wrong; not the unnamed entry's.
	invalid := "{\"methodConfig\":[{\"name\":[{\"service\":\"a.B\"}],\"retryPolicy\":{\"maxAttempts\":2,\"initialBackoff\":\"0.1\",\n" +
		"\"maxBackoff\":\"1s\",\"backoffMultiplier\":2,\"retryableStatusCodes\":[\"OK\",\"NOPE\",\"INTERNAL\"]}},\n" +
		"{\"retryPolicy\":{\"retryableStatusCodes\":[\"OK\"]}}]}"
	_, err = serviceconfig.Parse([]byte(invalid), serviceconfig.IncludeLint())
	var pe *serviceconfig.ParseError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want a *ParseError", err)
	}
	checkLines(t, "warnings of an invalid config", warningLines(pe.Warnings), []string{
		"methodConfig[0].retryPolicy.retryableStatusCodes[0]: OK should never be retried automatically (AIP-194); it is a success, so listing it has no effect",
		"methodConfig[0].retryPolicy.retryableStatusCodes[2]: INTERNAL should generally not be retried automatically (AIP-194)",
		`methodConfig[1]: no "name" list, so this entry applies to no method`,
	})
	if w := pe.Warnings[0]; w.Line != 2 || w.Column != 65 {
		t.Errorf("OK's warning at %d:%d, want 2:65", w.Line, w.Column)
	}
	if len(pe.Errors) < 2 {
		t.Errorf("errors %v, want the backoff's and NOPE's at least", pe.Errors)
	}
	// Without the option, Parse gives no advice.
	_, err = serviceconfig.Parse([]byte(invalid))
	if !errors.As(err, &pe) || len(pe.Warnings) != 1 {
		t.Errorf("without IncludeLint: %v", pe.Warnings)
	}
}
