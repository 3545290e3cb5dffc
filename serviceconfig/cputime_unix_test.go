//go:build unix

package serviceconfig_test

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time this process has used, user and system, so
// that a benchmark can report throughput per CPU second, which other work
// on a shared machine does not skew the way it skews wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
