//go:build !unix

package grpcretry_test

import "time"

// cpuTime is not measured here: benchmarks report wall time alone.
func cpuTime() time.Duration { return 0 }
