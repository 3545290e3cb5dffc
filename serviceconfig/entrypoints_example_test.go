package serviceconfig_test

import (
	"fmt"
	"time"

	"github.com/rebound-go/rebound/serviceconfig"
)

// Status code names, as a service config spells them, in any case.
func ExampleParseCode() {
	for _, s := range []string{"UNAVAILABLE", "resource_exhausted", "14"} {
		c, err := serviceconfig.ParseCode(s)
		fmt.Println(uint32(c), c, err)
	}
	// Output:
	// 14 UNAVAILABLE <nil>
	// 8 RESOURCE_EXHAUSTED <nil>
	// 0 OK serviceconfig: unknown status code name "14"
}

// Durations in the proto3 JSON form of a service config, both ways.
func ExampleParseDuration() {
	d, err := serviceconfig.ParseDuration("0.1s")
	fmt.Println(d, err)
	_, err = serviceconfig.ParseDuration("100ms")
	fmt.Println(err != nil)
	fmt.Println(serviceconfig.FormatDuration(1500 * time.Millisecond))
	// Output:
	// 100ms <nil>
	// true
	// 1.500s
}

// A set of status codes, such as a policy's retryableStatusCodes.
func ExampleNewCodeSet() {
	set := serviceconfig.NewCodeSet(serviceconfig.Unavailable, serviceconfig.Aborted)
	fmt.Println(set, set.Has(serviceconfig.Unavailable), set.Has(serviceconfig.Internal))
	// Output: [ABORTED UNAVAILABLE] true false
}

// Parse refuses a config larger than its limit, 4 MiB unless MaxBytes
// says otherwise, before reading it.
func ExampleMaxBytes() {
	_, err := serviceconfig.Parse([]byte(`{"methodConfig": []}`), serviceconfig.MaxBytes(8))
	fmt.Println(err)
	// Output: serviceconfig: the config is 20 bytes, more than the limit of 8 bytes (set with serviceconfig.MaxBytes)
}
