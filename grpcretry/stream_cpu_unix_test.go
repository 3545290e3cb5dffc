//go:build unix

package grpcretry_test

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time the process has used, user and system:
// a cost per message that other loads on the machine disturb less than
// wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
