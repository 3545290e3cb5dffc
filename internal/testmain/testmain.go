// Package testmain runs a package's tests for its TestMain: goleak checks
// that no goroutine outlives them, and a passing run under the race
// detector exits without the race runtime's exit sleep.
//
// The race runtime sleeps atexit_sleep_ms (1000 by default) before a
// program exits, so that goroutines still running can report a race. A
// test binary here has none left by then (goleak has just checked), and
// testing has already failed any test, or the run, in which a race was
// reported. The sleep was a second of every package's time under
// `go test -race`: 37 seconds of the suite's sum. A failing run, or one
// whose GORACE names atexit_sleep_ms, exits as before.
package testmain

import (
	"os"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

// Run runs m's tests, checks with goleak (given opts) that they left no
// goroutine behind, and exits with the run's code.
func Run(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(m, append(opts, goleak.Cleanup(exit))...)
}

// exit ends the process with code. A passing run under the race detector
// skips the runtime's exit hooks, and with them the exit sleep, unless
// GORACE asks for a sleep of its own.
func exit(code int) {
	if code != 0 || !raceEnabled || strings.Contains(os.Getenv("GORACE"), "atexit_sleep_ms") {
		os.Exit(code)
	}
	syscall.Exit(0)
}
