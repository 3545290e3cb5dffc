package serviceconfig_test

import (
	"errors"
	"fmt"

	"github.com/rebound-go/rebound/serviceconfig"
)

func ExampleParse() {
	c, err := serviceconfig.Parse([]byte(`{
	  "methodConfig": [{
	    "name": [{"service": "echo.Echo"}],
	    "retryPolicy": {
	      "maxAttempts": 8,
	      "initialBackoff": "0.1s",
	      "maxBackoff": "1s",
	      "backoffMultiplier": 2,
	      "retryableStatusCodes": ["UNAVAILABLE", "aborted"]
	    },
	    "jitter": 0.2
	  }],
	  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.5466}
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	rp := c.MethodConfig("/echo.Echo/Ping").RetryPolicy
	fmt.Println("configured attempts:", rp.MaxAttempts)
	fmt.Println("attempts made:", rp.Attempts(0))
	for retry := 1; retry < rp.Attempts(0); retry++ {
		fmt.Printf("retry %d waits up to %v\n", retry, rp.BackoffCeiling(retry))
	}
	fmt.Println("retryable:", rp.RetryableStatusCodes)
	fmt.Println("token ratio:", c.RetryThrottling.TokenRatio)
	for _, w := range c.Warnings {
		fmt.Println("warning:", w)
	}
	// Output:
	// configured attempts: 8
	// attempts made: 5
	// retry 1 waits up to 100ms
	// retry 2 waits up to 200ms
	// retry 3 waits up to 400ms
	// retry 4 waits up to 800ms
	// retryable: [ABORTED UNAVAILABLE]
	// token ratio: 0.546
	// warning: methodConfig[0].retryPolicy.maxAttempts: 8 is above the default client limit of 5; clients make at most 5 attempts unless their limit is raised
	// warning: methodConfig[0].jitter: unknown field, ignored
}

func ExampleParse_errors() {
	_, err := serviceconfig.Parse([]byte(`{
	  "methodConfig": [
	    {"name": [{"service": "a.B", "method": "M"}], "timeout": "1s"},
	    {"name": [{"service": "a.B", "method": "M"}],
	     "retryPolicy": {"maxAttempts": 1, "initialBackoff": "0s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": [14]}}
	  ],
	  "retryThrottling": {"maxTokens": 1001, "tokenRatio": 0.1}
	}`))
	fmt.Println(err)

	// The lines are also available one by one.
	var list interface{ Unwrap() []error }
	if errors.As(err, &list) {
		var first *serviceconfig.Error
		errors.As(list.Unwrap()[0], &first)
		fmt.Printf("%d errors; the first is at %s\n", len(list.Unwrap()), first.Path)
	}
	// Output:
	// serviceconfig: methodConfig[1].name[0]: duplicate name {"service":"a.B","method":"M"} (also in methodConfig[0].name[0])
	// serviceconfig: methodConfig[1].retryPolicy.maxAttempts: must be greater than 1, got 1
	// serviceconfig: methodConfig[1].retryPolicy.initialBackoff: must be greater than 0
	// serviceconfig: retryThrottling.maxTokens: must be in the range (0, 1000], got 1001
	// 4 errors; the first is at methodConfig[1].name[0]
}

func ExampleConfig_MethodConfig() {
	c, err := serviceconfig.Parse([]byte(`{"methodConfig": [
	  {"name": [{"service": "shop.Cart", "method": "Checkout"}], "timeout": "10s"},
	  {"name": [{"service": "shop.Cart"}], "timeout": "2s"},
	  {"name": [{}], "timeout": "30s"}
	]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, method := range []string{"/shop.Cart/Checkout", "/shop.Cart/Get", "/shop.Search/Find"} {
		fmt.Println(method, c.MethodConfig(method).Timeout)
	}
	// Output:
	// /shop.Cart/Checkout 10s
	// /shop.Cart/Get 2s
	// /shop.Search/Find 30s
}

func ExampleLint() {
	c, err := serviceconfig.Parse([]byte(`{"methodConfig": [{
	  "name": [{"service": "shop.Cart"}],
	  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
	                  "retryableStatusCodes": ["UNAVAILABLE", "INVALID_ARGUMENT", "INTERNAL"]}
	}]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, w := range serviceconfig.Lint(c) {
		fmt.Println(w)
	}
	// Output:
	// methodConfig[0].retryPolicy.retryableStatusCodes[1]: INVALID_ARGUMENT should never be retried automatically (AIP-194)
	// methodConfig[0].retryPolicy.retryableStatusCodes[2]: INTERNAL should generally not be retried automatically (AIP-194)
}

// With IncludeLint, one call reports every problem of a config, valid or
// not: here a misspelled field, an invalid duration and a code AIP-194
// advises against retrying.
func ExampleIncludeLint() {
	_, err := serviceconfig.Parse([]byte(`{"methodConfig": [{
	  "name": [{"service": "shop.Cart"}],
	  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1", "maxBackoff": "1s", "backoffMultiplier": 2,
	                  "retryableStatusCodes": ["UNAVAILABLE", "INVALID_ARGUMENT"]}
	}], "retryThrotling": {"maxTokens": 10, "tokenRatio": 0.1}}`), serviceconfig.IncludeLint())
	var pe *serviceconfig.ParseError
	if errors.As(err, &pe) {
		for _, e := range pe.Errors {
			fmt.Println("error:", e)
		}
		for _, w := range pe.Warnings {
			fmt.Println("warning:", w)
		}
	}
	// Output:
	// error: serviceconfig: methodConfig[0].retryPolicy.initialBackoff: invalid duration "0.1": missing "s" suffix
	// warning: methodConfig[0].retryPolicy.retryableStatusCodes[1]: INVALID_ARGUMENT should never be retried automatically (AIP-194)
	// warning: retryThrotling: unknown field, ignored (did you mean "retryThrottling"?)
}

func ExampleAIP194() {
	mc := serviceconfig.AIP194(serviceconfig.Name{Service: "library.Library", Method: "GetBook"})
	c := &serviceconfig.Config{MethodConfigs: []serviceconfig.MethodConfig{mc}}

	rp := c.MethodConfig("/library.Library/GetBook").RetryPolicy
	fmt.Println(rp.Attempts(0), "attempts on", rp.RetryableStatusCodes)
	fmt.Println("backoff from", rp.InitialBackoff, "to at most", rp.MaxBackoff)
	fmt.Println("other methods:", c.MethodConfig("/library.Library/DeleteBook"))
	// Output:
	// 5 attempts on [UNAVAILABLE]
	// backoff from 100ms to at most 5s
	// other methods: <nil>
}
