//go:build !unix

package serviceconfig_test

import "time"

// cpuTime is unknown here; benchmarks then leave out per-CPU figures.
func cpuTime() time.Duration { return 0 }
