// Package paralleltest sets, for a package's tests, how many parallel
// tests run at once, for the packages whose parallel tests wait on the
// real clock (per-attempt timeouts, a server's quota window, a rate
// limit's recovery) and hardly compute.
package paralleltest

import (
	"flag"
	"runtime"
	"strconv"
)

// PerCPU is how many parallel tests run at once per CPU. testing's default,
// GOMAXPROCS, suits tests that compute: on a 2-CPU CI runner it runs two
// tests that each wait seconds at a time. Not all of them at once either:
// they start together, and their servers' first calls (TLS handshakes,
// HTTP/2 settings under -race) would then crowd the CPUs just as the first
// attempts must answer within their timeouts.
const PerCPU = 4

// Set makes -test.parallel PerCPU times GOMAXPROCS unless the command line
// set it. A TestMain calls it before m.Run; it parses the flags.
func Set() {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(PerCPU*runtime.GOMAXPROCS(0)))
	}
}
