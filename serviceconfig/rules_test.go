package serviceconfig_test

import (
	"math"
	"testing"
	"time"

	"github.com/rebound-go/rebound/serviceconfig"
)

// Tests for each validation rule of A6, one field at a time: every case
// names the exact path and message, or the parsed value.

const (
	durType = `must be a duration string like "1.5s", got `
)

func retryConfig(raw obj) string { return methodConfigs(validMethod.with("retryPolicy", raw.String())) }
func hedgeConfig(raw obj) string {
	return methodConfigs(validMethod.with("hedgingPolicy", raw.String()))
}

func retryPolicy(c *serviceconfig.Config) *serviceconfig.RetryPolicy {
	return c.MethodConfigs[0].RetryPolicy
}

func hedgingPolicy(c *serviceconfig.Config) *serviceconfig.HedgingPolicy {
	return c.MethodConfigs[0].HedgingPolicy
}

// maxAttemptsCases hold for retryPolicy and hedgingPolicy alike (A6 rule 1 of
// both): a JSON integer greater than 1, with values above the client limit
// kept as written.
var maxAttemptsCases = []fieldCase{
	{raw: "2", want: 2},
	{raw: "5", want: 5},
	{raw: "6", want: 6},
	{raw: "1000", want: 1000},
	{raw: "100000000000000000000", want: math.MaxInt},
	{raw: "1", wantErr: "must be greater than 1, got 1"},
	{raw: "0", wantErr: "must be greater than 1, got 0"},
	{raw: "-0", wantErr: "must be greater than 1, got -0"},
	{raw: "-1", wantErr: "must be greater than 1, got -1"},
	{raw: "-100000000000000000000", wantErr: "must be greater than 1, got -100000000000000000000"},
	{raw: "2.0", wantErr: "must be a JSON integer, got 2.0"},
	{raw: "2e0", wantErr: "must be a JSON integer, got 2e0"},
	{raw: "20E-1", wantErr: "must be a JSON integer, got 20E-1"},
	{raw: "2.5", wantErr: "must be a JSON integer, got 2.5"},
	{raw: `"2"`, wantErr: "must be a JSON integer, got string"},
	{raw: "true", wantErr: "must be a JSON integer, got boolean"},
	{raw: "[2]", wantErr: "must be a JSON integer, got array"},
	{raw: `{"value":2}`, wantErr: "must be a JSON integer, got object"},
	{raw: "null", wantErr: "must be specified"},
	{raw: "", wantErr: "must be specified"},
}

func TestRetryPolicyMaxAttempts(t *testing.T) {
	runFieldCases(t, "methodConfig[0].retryPolicy.maxAttempts",
		func(raw string) string { return retryConfig(validRetry.with("maxAttempts", raw)) },
		func(c *serviceconfig.Config) any { return retryPolicy(c).MaxAttempts },
		maxAttemptsCases)
}

func TestHedgingPolicyMaxAttempts(t *testing.T) {
	runFieldCases(t, "methodConfig[0].hedgingPolicy.maxAttempts",
		func(raw string) string { return hedgeConfig(validHedge.with("maxAttempts", raw)) },
		func(c *serviceconfig.Config) any { return hedgingPolicy(c).MaxAttempts },
		maxAttemptsCases)
}

// A6 retryPolicy rule 2: initialBackoff and maxBackoff are required proto3
// JSON durations greater than 0.
func TestRetryPolicyBackoffs(t *testing.T) {
	cases := []fieldCase{
		{raw: `"0.1s"`, want: 100 * time.Millisecond},
		{raw: `"0.000000001s"`, want: time.Duration(1)},
		{raw: `"1.000000001s"`, want: time.Second + 1},
		{raw: `"30s"`, want: 30 * time.Second},
		{raw: `"9223372036.854775807s"`, want: time.Duration(math.MaxInt64)},
		{raw: `"0s"`, wantErr: "must be greater than 0"},
		{raw: `"-0s"`, wantErr: "must be greater than 0"},
		{raw: `"0.000s"`, wantErr: "must be greater than 0"},
		{raw: `"-1s"`, wantErr: "must be greater than 0"},
		{raw: `"-0.000000001s"`, wantErr: "must be greater than 0"},
		{raw: `"1"`, wantErr: `invalid duration "1": missing "s" suffix`},
		// Spellings grpc-go reads are accepted with a warning (see
		// TestParseGRPCGoSpellings).
		{raw: `"1.s"`, want: time.Second},
		{raw: `".1s"`, want: 100 * time.Millisecond},
		{raw: `"01s"`, want: time.Second},
		{raw: `"1..s"`, wantErr: `invalid duration "1..s": unexpected character '.'; want decimal seconds ending in "s", like "1.5s"`},
		{raw: `".s"`, wantErr: `invalid duration ".s": missing integer part before the seconds`},
		{raw: `"1e3s"`, wantErr: `invalid duration "1e3s": unexpected character 'e'; want decimal seconds ending in "s", like "1.5s"`},
		{raw: `"1.0000000001s"`, wantErr: `invalid duration "1.0000000001s": more than 9 fractional digits (nanosecond precision)`},
		{raw: `"315576000000s"`, want: time.Duration(math.MaxInt64)}, // saturated, as in grpc-go
		{raw: `"315576000001s"`, wantErr: `invalid duration "315576000001s": out of range: a proto Duration is at most ±315576000000s`},
		{raw: `""`, wantErr: `invalid duration "": empty string; want decimal seconds ending in "s", like "1.5s"`},
		{raw: "1", wantErr: durType + "number"},
		{raw: "0.1", wantErr: durType + "number"},
		{raw: `{"seconds":1}`, wantErr: durType + "object"},
		{raw: "null", wantErr: "must be specified"},
		{raw: "", wantErr: "must be specified"},
	}
	t.Run("initialBackoff", func(t *testing.T) {
		runFieldCases(t, "methodConfig[0].retryPolicy.initialBackoff",
			// A maxBackoff below initialBackoff only draws a warning.
			func(raw string) string { return retryConfig(validRetry.with("initialBackoff", raw)) },
			func(c *serviceconfig.Config) any { return retryPolicy(c).InitialBackoff },
			cases)
	})
	t.Run("maxBackoff", func(t *testing.T) {
		runFieldCases(t, "methodConfig[0].retryPolicy.maxBackoff",
			func(raw string) string { return retryConfig(validRetry.with("maxBackoff", raw)) },
			func(c *serviceconfig.Config) any { return retryPolicy(c).MaxBackoff },
			cases)
	})
}

// A6 retryPolicy rule 3: backoffMultiplier is a required JSON number greater
// than 0.
func TestRetryPolicyBackoffMultiplier(t *testing.T) {
	runFieldCases(t, "methodConfig[0].retryPolicy.backoffMultiplier",
		func(raw string) string { return retryConfig(validRetry.with("backoffMultiplier", raw)) },
		func(c *serviceconfig.Config) any { return retryPolicy(c).BackoffMultiplier },
		[]fieldCase{
			{raw: "2", want: 2.0},
			{raw: "1", want: 1.0},
			{raw: "0.5", want: 0.5},
			{raw: "1.5e1", want: 15.0},
			{raw: "2.0", want: 2.0},
			{raw: "1e-300", want: 1e-300},
			{raw: "5e-324", want: 5e-324},
			{raw: "1.7976931348623157e308", want: math.MaxFloat64},
			{raw: "0", wantErr: "must be greater than 0, got 0"},
			{raw: "-0", wantErr: "must be greater than 0, got -0"},
			{raw: "0.0", wantErr: "must be greater than 0, got 0.0"},
			{raw: "0e10", wantErr: "must be greater than 0, got 0e10"},
			{raw: "-2", wantErr: "must be greater than 0, got -2"},
			{raw: "-1e-300", wantErr: "must be greater than 0, got -1e-300"},
			{raw: "1e400", wantErr: "1e400 is too large for a float64"},
			{raw: "1.8e308", wantErr: "1.8e308 is too large for a float64"},
			{raw: "1e-400", wantErr: "1e-400 is too small for a float64 and would round to 0"},
			{raw: `"2"`, wantErr: "must be a JSON number, got string"},
			{raw: "true", wantErr: "must be a JSON number, got boolean"},
			{raw: "null", wantErr: "must be specified"},
			{raw: "", wantErr: "must be specified"},
		})
}

// A6 retryPolicy rule 4: retryableStatusCodes is a required, non-empty array
// of codes in integer or case-insensitive string form.
func TestRetryPolicyRetryableStatusCodes(t *testing.T) {
	const arrayType = "must be a JSON array of status codes, got "
	runFieldCases(t, "methodConfig[0].retryPolicy.retryableStatusCodes",
		func(raw string) string { return retryConfig(validRetry.with("retryableStatusCodes", raw)) },
		func(c *serviceconfig.Config) any { return retryPolicy(c).RetryableStatusCodes },
		[]fieldCase{
			{raw: "[14]", want: serviceconfig.NewCodeSet(serviceconfig.Unavailable)},
			{raw: `["UNAVAILABLE"]`, want: serviceconfig.NewCodeSet(serviceconfig.Unavailable)},
			{raw: `["unavailable"]`, want: serviceconfig.NewCodeSet(serviceconfig.Unavailable)},
			{raw: `["Unavailable"]`, want: serviceconfig.NewCodeSet(serviceconfig.Unavailable)},
			{raw: `[14, "unavailable", "UNAVAILABLE"]`, want: serviceconfig.NewCodeSet(serviceconfig.Unavailable)},
			{raw: `[0]`, want: serviceconfig.NewCodeSet(serviceconfig.OK)},
			{raw: `["ok"]`, want: serviceconfig.NewCodeSet(serviceconfig.OK)},
			{raw: `[-0]`, want: serviceconfig.NewCodeSet(serviceconfig.OK)},
			{raw: `[16, "aborted", 13]`, want: serviceconfig.NewCodeSet(serviceconfig.Unauthenticated, serviceconfig.Aborted, serviceconfig.Internal)},
			{raw: `[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]`, want: serviceconfig.CodeSet(1<<17 - 1)},
			{raw: "[]", wantErr: "must be non-empty unless perAttemptRecvTimeout is set"},
			{raw: "{}", wantErr: arrayType + "object"},
			{raw: `"UNAVAILABLE"`, wantErr: arrayType + "string"},
			{raw: "14", wantErr: arrayType + "number"},
			{raw: "null", wantErr: "must be specified unless perAttemptRecvTimeout is set"},
			{raw: "", wantErr: "must be specified unless perAttemptRecvTimeout is set"},
		})
}

// perAttemptRecvTimeout (gRPC core's and grpc-java's field): a proto3 JSON
// duration greater than 0, read strictly since grpc-go does not know it.
func TestRetryPolicyPerAttemptRecvTimeout(t *testing.T) {
	const at = "methodConfig[0].retryPolicy.perAttemptRecvTimeout"
	runFieldCases(t, at,
		func(raw string) string { return retryConfig(validRetry.with("perAttemptRecvTimeout", raw)) },
		func(c *serviceconfig.Config) any { return retryPolicy(c).PerAttemptRecvTimeout },
		[]fieldCase{
			{raw: "", want: time.Duration(0)},
			{raw: "null", want: time.Duration(0)},
			{raw: `"0.5s"`, want: 500 * time.Millisecond},
			{raw: `"0.000000001s"`, want: time.Duration(1)},
			{raw: `"30s"`, want: 30 * time.Second},
			{raw: `"0s"`, wantErr: "must be greater than 0"},
			{raw: `"-0s"`, wantErr: "must be greater than 0"},
			{raw: `"-1s"`, wantErr: "must be greater than 0"},
			{raw: `".5s"`, wantErr: `invalid duration ".5s": missing integer part before the seconds`},
			{raw: `"1"`, wantErr: `invalid duration "1": missing "s" suffix`},
			{raw: `"1m"`, wantErr: `invalid duration "1m": missing "s" suffix`},
			{raw: `"315576000000s"`, wantErr: `invalid duration "315576000000s": out of range: exceeds the time.Duration limit of ±9223372036.854775807s (about 292 years)`},
			{raw: "1", wantErr: durType + "number"},
			{raw: "{}", wantErr: durType + "object"},
		})

	// With a per-attempt timeout, retryableStatusCodes may be empty or
	// absent (gRPC core's rule): the policy retries timed-out attempts.
	for _, codes := range []string{"[]", "null", ""} {
		c, errs := parse(t, retryConfig(validRetry.with("perAttemptRecvTimeout", `"1s"`, "retryableStatusCodes", codes)))
		if errs != nil {
			t.Errorf("retryableStatusCodes %q with perAttemptRecvTimeout: %q", codes, errs)
			continue
		}
		if rp := retryPolicy(c); rp.RetryableStatusCodes != 0 || rp.PerAttemptRecvTimeout != time.Second {
			t.Errorf("retryableStatusCodes %q: policy %+v", codes, *rp)
		}
	}
	// An invalid timeout is reported on its own, not also as a missing
	// code list.
	_, errs := parse(t, retryConfig(validRetry.with("perAttemptRecvTimeout", `"0s"`, "retryableStatusCodes", "")))
	checkLines(t, "errors", errs, []string{"serviceconfig: " + at + ": must be greater than 0"})

	// In a hedging policy the field is an error that points to
	// hedgingDelay.
	_, errs = parse(t, hedgeConfig(validHedge.with("perAttemptRecvTimeout", `"1s"`)))
	checkLines(t, "errors", errs, []string{
		"serviceconfig: methodConfig[0].hedgingPolicy.perAttemptRecvTimeout: applies to retryPolicy only; a hedging policy starts the next attempt after hedgingDelay instead",
	})
}

// codeElementCases are invalid elements of a status code array, checked at
// index 0 of both retryableStatusCodes and nonFatalStatusCodes.
var codeElementCases = []fieldCase{
	{raw: "17", wantErr: "invalid status code 17; valid codes are 0 to 16"},
	{raw: "-1", wantErr: "invalid status code -1; valid codes are 0 to 16"},
	{raw: "4294967310", wantErr: "invalid status code 4294967310; valid codes are 0 to 16"}, // 14 + 2^32
	{raw: "100000000000000000000", wantErr: "invalid status code 100000000000000000000; valid codes are 0 to 16"},
	{raw: "1.5", wantErr: "status code must be an integer or a name, got 1.5"},
	{raw: "14.0", wantErr: "status code must be an integer or a name, got 14.0"},
	{raw: "1.4e1", wantErr: "status code must be an integer or a name, got 1.4e1"},
	{raw: `"FOO"`, wantErr: `unknown status code name "FOO"`},
	{raw: `"14"`, wantErr: `unknown status code name "14"`},
	{raw: `""`, wantErr: `unknown status code name ""`},
	{raw: `"CANCELED"`, wantErr: `unknown status code name "CANCELED"`},
	{raw: `" UNAVAILABLE"`, wantErr: `unknown status code name " UNAVAILABLE"`},
	{raw: "true", wantErr: "status code must be a name or an integer, got boolean"},
	{raw: "[14]", wantErr: "status code must be a name or an integer, got array"},
	{raw: "{}", wantErr: "status code must be a name or an integer, got object"},
}

func TestStatusCodeElements(t *testing.T) {
	t.Run("retryableStatusCodes", func(t *testing.T) {
		runFieldCases(t, "methodConfig[0].retryPolicy.retryableStatusCodes[0]",
			func(raw string) string { return retryConfig(validRetry.with("retryableStatusCodes", "["+raw+"]")) },
			nil, codeElementCases)
	})
	t.Run("nonFatalStatusCodes", func(t *testing.T) {
		runFieldCases(t, "methodConfig[0].hedgingPolicy.nonFatalStatusCodes[0]",
			func(raw string) string { return hedgeConfig(validHedge.with("nonFatalStatusCodes", "["+raw+"]")) },
			nil, codeElementCases)
	})
}

func TestStatusCodeElementsAllReported(t *testing.T) {
	_, errs := parse(t, retryConfig(validRetry.with("retryableStatusCodes", `[17, "UNAVAILABLE", "FOO", 2.5, 14]`)))
	want := []string{
		"serviceconfig: methodConfig[0].retryPolicy.retryableStatusCodes[0]: invalid status code 17; valid codes are 0 to 16",
		`serviceconfig: methodConfig[0].retryPolicy.retryableStatusCodes[2]: unknown status code name "FOO"`,
		"serviceconfig: methodConfig[0].retryPolicy.retryableStatusCodes[3]: status code must be an integer or a name, got 2.5",
	}
	checkLines(t, "errors", errs, want)

	// A list whose every element is invalid is reported element by
	// element, not also as empty.
	_, errs = parse(t, retryConfig(validRetry.with("retryableStatusCodes", `["FOO"]`)))
	checkLines(t, "errors", errs, []string{`serviceconfig: methodConfig[0].retryPolicy.retryableStatusCodes[0]: unknown status code name "FOO"`})
}

// A6 hedgingPolicy rule 2: hedgingDelay is an optional proto3 JSON duration;
// a negative delay is rejected.
func TestHedgingPolicyHedgingDelay(t *testing.T) {
	runFieldCases(t, "methodConfig[0].hedgingPolicy.hedgingDelay",
		func(raw string) string { return hedgeConfig(validHedge.with("hedgingDelay", raw)) },
		func(c *serviceconfig.Config) any { return hedgingPolicy(c).HedgingDelay },
		[]fieldCase{
			{raw: "", want: time.Duration(0)},
			{raw: "null", want: time.Duration(0)},
			{raw: `"0s"`, want: time.Duration(0)},
			{raw: `"-0s"`, want: time.Duration(0)},
			{raw: `"0.5s"`, want: 500 * time.Millisecond},
			{raw: `"0.000000001s"`, want: time.Duration(1)},
			{raw: `"-1s"`, wantErr: "must not be negative"},
			{raw: `"-0.000000001s"`, wantErr: "must not be negative"},
			{raw: `"1"`, wantErr: `invalid duration "1": missing "s" suffix`},
			{raw: `"9223372037s"`, want: time.Duration(math.MaxInt64)}, // saturated, as in grpc-go
			{raw: `"315576000001s"`, wantErr: `invalid duration "315576000001s": out of range: a proto Duration is at most ±315576000000s`},
			{raw: "1", wantErr: durType + "number"},
			{raw: "true", wantErr: durType + "boolean"},
		})
}

// A6 hedgingPolicy rule 3: nonFatalStatusCodes is an optional array of
// codes, which may be empty.
func TestHedgingPolicyNonFatalStatusCodes(t *testing.T) {
	runFieldCases(t, "methodConfig[0].hedgingPolicy.nonFatalStatusCodes",
		func(raw string) string { return hedgeConfig(validHedge.with("nonFatalStatusCodes", raw)) },
		func(c *serviceconfig.Config) any { return hedgingPolicy(c).NonFatalStatusCodes },
		[]fieldCase{
			{raw: "", want: serviceconfig.CodeSet(0)},
			{raw: "null", want: serviceconfig.CodeSet(0)},
			{raw: "[]", want: serviceconfig.CodeSet(0)},
			{raw: `["UNAVAILABLE", "internal", 10]`, want: serviceconfig.NewCodeSet(serviceconfig.Unavailable, serviceconfig.Internal, serviceconfig.Aborted)},
			{raw: "{}", wantErr: "must be a JSON array of status codes, got object"},
			{raw: `"UNAVAILABLE"`, wantErr: "must be a JSON array of status codes, got string"},
		})
}

func TestBothPolicies(t *testing.T) {
	_, errs := parse(t, methodConfigs(validMethod.with("retryPolicy", validRetry.String(), "hedgingPolicy", validHedge.String())))
	checkLines(t, "errors", errs, []string{
		"serviceconfig: methodConfig[0]: retryPolicy and hedgingPolicy are mutually exclusive; set at most one",
	})

	// Both invalid: each is still checked, then the conflict is reported.
	_, errs = parse(t, methodConfigs(validMethod, validMethod.with(
		"name", `[{"service":"t.T"}]`,
		"retryPolicy", validRetry.with("maxAttempts", "1").String(),
		"hedgingPolicy", "{}")))
	checkLines(t, "errors", errs, []string{
		"serviceconfig: methodConfig[1].retryPolicy.maxAttempts: must be greater than 1, got 1",
		"serviceconfig: methodConfig[1].hedgingPolicy.maxAttempts: must be specified",
		"serviceconfig: methodConfig[1]: retryPolicy and hedgingPolicy are mutually exclusive; set at most one",
	})

	// null means absent, so this is not a conflict.
	c, errs := parse(t, methodConfigs(validMethod.with("retryPolicy", validRetry.String(), "hedgingPolicy", "null")))
	if errs != nil || c.MethodConfigs[0].HedgingPolicy != nil || c.MethodConfigs[0].RetryPolicy == nil {
		t.Errorf("hedgingPolicy null: errors %q, config %+v", errs, c)
	}
}

func TestPolicyType(t *testing.T) {
	for _, field := range []string{"retryPolicy", "hedgingPolicy"} {
		runFieldCases(t, "methodConfig[0]."+field,
			func(raw string) string { return methodConfigs(validMethod.with(field, raw)) },
			func(c *serviceconfig.Config) any {
				return c.MethodConfigs[0].RetryPolicy == nil && c.MethodConfigs[0].HedgingPolicy == nil
			},
			[]fieldCase{
				{raw: "null", want: true},
				{raw: "[]", wantErr: "must be a JSON object, got array"},
				{raw: `"x"`, wantErr: "must be a JSON object, got string"},
				{raw: "true", wantErr: "must be a JSON object, got boolean"},
			})
	}
}

// A6 retryThrottling rule 1: maxTokens is a required JSON integer in
// (0, 1000]. The config has no methodConfig: throttling is checked on its
// own.
func TestRetryThrottlingMaxTokens(t *testing.T) {
	const rangeErr = "must be in the range (0, 1000], got "
	runFieldCases(t, "retryThrottling.maxTokens",
		func(raw string) string {
			return `{"retryThrottling":` + validThrottle.with("maxTokens", raw).String() + `}`
		},
		func(c *serviceconfig.Config) any { return c.RetryThrottling.MaxTokens },
		[]fieldCase{
			{raw: "1", want: 1},
			{raw: "10", want: 10},
			{raw: "999", want: 999},
			{raw: "1000", want: 1000},
			{raw: "1001", wantErr: rangeErr + "1001"},
			{raw: "0", wantErr: rangeErr + "0"},
			{raw: "-0", wantErr: rangeErr + "-0"},
			{raw: "-1", wantErr: rangeErr + "-1"},
			{raw: "100000000000000000000", wantErr: rangeErr + "100000000000000000000"},
			{raw: "-100000000000000000000", wantErr: rangeErr + "-100000000000000000000"},
			{raw: "10.5", wantErr: "must be a JSON integer, got 10.5"},
			// Whole numbers in other forms, which grpc-go reads (with a
			// warning); A6 makes maxTokens an integer, so fractions are not.
			{raw: "10.0", want: 10},
			{raw: "1e3", want: 1000},
			{raw: "0.5e1", want: 5},
			{raw: "1.5e3", wantErr: rangeErr + "1.5e3"},
			{raw: "0.0", wantErr: rangeErr + "0.0"},
			{raw: "10.25", wantErr: "must be a JSON integer, got 10.25"},
			{raw: "1e-1", wantErr: "must be a JSON integer, got 1e-1"},
			{raw: `"10"`, wantErr: "must be a JSON integer, got string"},
			{raw: "null", wantErr: "must be specified"},
			{raw: "", wantErr: "must be specified"},
		})
}

// A6 retryThrottling rule 2: tokenRatio is a required JSON number greater
// than 0, with decimal places beyond the third ignored: TokenRatio is the
// exact decimal truncation.
func TestRetryThrottlingTokenRatio(t *testing.T) {
	runFieldCases(t, "retryThrottling.tokenRatio",
		func(raw string) string {
			return `{"retryThrottling":` + validThrottle.with("tokenRatio", raw).String() + `}`
		},
		func(c *serviceconfig.Config) any { return c.RetryThrottling.TokenRatio },
		[]fieldCase{
			{raw: "0.1", want: 0.1},
			{raw: "0.5466", want: 0.546},
			{raw: "0.5469999", want: 0.546},
			{raw: "1e-1", want: 0.1},
			{raw: "1E-1", want: 0.1},
			{raw: "5466e-4", want: 0.546},
			{raw: "0.05466e1", want: 0.546},
			{raw: "0.29", want: 0.29}, // 0.29*1000 is 289.99999999999997 in float64
			{raw: "0.57", want: 0.57}, // 0.57*1000 is 569.9999999999999 in float64
			{raw: "0.001", want: 0.001},
			{raw: "1", want: 1.0},
			{raw: "1.0", want: 1.0},
			{raw: "2.5", want: 2.5},
			{raw: "1e2", want: 100.0},
			{raw: "0.0009", want: 0.0},                   // valid, with a warning
			{raw: "0.99999999999999999999", want: 0.999}, // 1 as a float64
			{raw: "9223372036854775.807", want: float64(math.MaxInt64) / 1000},
			{raw: "9223372036854775.808", want: float64(math.MaxInt64) / 1000}, // saturates
			{raw: "1e300", want: float64(math.MaxInt64) / 1000},
			{raw: "0", wantErr: "must be greater than 0, got 0"},
			{raw: "0.000", wantErr: "must be greater than 0, got 0.000"},
			{raw: "-0.1", wantErr: "must be greater than 0, got -0.1"},
			{raw: "1e400", wantErr: "1e400 is too large for a float64"},
			{raw: "1e-400", wantErr: "1e-400 is too small for a float64 and would round to 0"},
			{raw: `"0.1"`, wantErr: "must be a JSON number, got string"},
			{raw: "null", wantErr: "must be specified"},
			{raw: "", wantErr: "must be specified"},
		})
}

func TestRetryThrottlingShape(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{`{"retryThrottling":[]}`, []string{"serviceconfig: retryThrottling: must be a JSON object, got array"}},
		{`{"retryThrottling":{}}`, []string{
			"serviceconfig: retryThrottling.maxTokens: must be specified",
			"serviceconfig: retryThrottling.tokenRatio: must be specified",
		}},
		{`{"retryThrottling":{"maxTokens":0,"tokenRatio":0}}`, []string{
			"serviceconfig: retryThrottling.maxTokens: must be in the range (0, 1000], got 0",
			"serviceconfig: retryThrottling.tokenRatio: must be greater than 0, got 0",
		}},
		// Checked alongside a valid methodConfig too.
		{`{"methodConfig":[{"name":[{}]}],"retryThrottling":{"maxTokens":1001,"tokenRatio":0.1}}`, []string{
			"serviceconfig: retryThrottling.maxTokens: must be in the range (0, 1000], got 1001",
		}},
		{`{"retryThrottling":null}`, nil},
	}
	for _, tc := range tests {
		c, errs := parse(t, tc.in)
		checkLines(t, tc.in, errs, tc.want)
		if tc.want == nil && c.RetryThrottling != nil {
			t.Errorf("%s: RetryThrottling = %+v, want nil", tc.in, c.RetryThrottling)
		}
	}
}

func TestMethodConfigTimeout(t *testing.T) {
	runFieldCases(t, "methodConfig[0].timeout",
		func(raw string) string { return methodConfigs(validMethod.with("timeout", raw)) },
		func(c *serviceconfig.Config) any { return c.MethodConfigs[0].Timeout },
		[]fieldCase{
			{raw: "", want: time.Duration(0)},
			{raw: "null", want: time.Duration(0)},
			{raw: `"1s"`, want: time.Second},
			{raw: `"0.25s"`, want: 250 * time.Millisecond},
			{raw: `"0s"`, want: time.Duration(0)}, // with a warning
			{raw: `"-0s"`, want: time.Duration(0)},
			{raw: `"-1s"`, wantErr: "must not be negative"},
			{raw: `"1m"`, wantErr: `invalid duration "1m": missing "s" suffix`},
			{raw: "1", wantErr: durType + "number"},
		})
}

func TestMethodConfigWaitForReady(t *testing.T) {
	runFieldCases(t, "methodConfig[0].waitForReady",
		func(raw string) string { return methodConfigs(validMethod.with("waitForReady", raw)) },
		func(c *serviceconfig.Config) any { return c.MethodConfigs[0].WaitForReady },
		[]fieldCase{
			{raw: "", want: (*bool)(nil)},
			{raw: "null", want: (*bool)(nil)},
			{raw: "true", want: ptr(true)},
			{raw: "false", want: ptr(false)},
			{raw: `"true"`, wantErr: "must be a boolean, got string"},
			{raw: "1", wantErr: "must be a boolean, got number"},
			{raw: "[]", wantErr: "must be a boolean, got array"},
		})
}

func TestMethodConfigMessageBytes(t *testing.T) {
	const notInt = "must be an integer number of bytes, got "
	cases := []fieldCase{
		{raw: "", want: (*int64)(nil)},
		{raw: "null", want: (*int64)(nil)},
		{raw: "0", want: ptr(int64(0))},
		{raw: "-0", want: ptr(int64(0))},
		{raw: "1024", want: ptr(int64(1024))},
		{raw: "9223372036854775807", want: ptr(int64(math.MaxInt64))},
		{raw: `"0"`, want: ptr(int64(0))},
		{raw: `"1024"`, want: ptr(int64(1024))},
		{raw: `"9223372036854775807"`, want: ptr(int64(math.MaxInt64))},
		{raw: "-1", wantErr: "must not be negative, got -1"},
		{raw: `"-1"`, wantErr: `must not be negative, got "-1"`},
		{raw: "-9223372036854775809", wantErr: "must not be negative, got -9223372036854775809"},
		{raw: "9223372036854775808", wantErr: "9223372036854775808 is out of range; the limit is 9223372036854775807"},
		{raw: `"9223372036854775808"`, wantErr: `"9223372036854775808" is out of range; the limit is 9223372036854775807`},
		{raw: "1.5", wantErr: notInt + "1.5"},
		{raw: "1024.0", wantErr: notInt + "1024.0"},
		{raw: "1e3", wantErr: notInt + "1e3"},
		{raw: `"1.5"`, wantErr: notInt + `"1.5"`},
		{raw: `"1e3"`, wantErr: notInt + `"1e3"`},
		{raw: `"01"`, wantErr: notInt + `"01"`},
		{raw: `"+1"`, wantErr: notInt + `"+1"`},
		{raw: `" 1"`, wantErr: notInt + `" 1"`},
		{raw: `"-"`, wantErr: notInt + `"-"`},
		{raw: `""`, wantErr: notInt + `""`},
		{raw: `"abc"`, wantErr: notInt + `"abc"`},
		{raw: "true", wantErr: "must be a JSON integer, got boolean"},
		{raw: "[1]", wantErr: "must be a JSON integer, got array"},
	}
	for _, field := range []string{"maxRequestMessageBytes", "maxResponseMessageBytes"} {
		t.Run(field, func(t *testing.T) {
			runFieldCases(t, "methodConfig[0]."+field,
				func(raw string) string { return methodConfigs(validMethod.with(field, raw)) },
				func(c *serviceconfig.Config) any {
					if field == "maxRequestMessageBytes" {
						return c.MethodConfigs[0].MaxRequestMessageBytes
					}
					return c.MethodConfigs[0].MaxResponseMessageBytes
				},
				cases)
		})
	}
}
