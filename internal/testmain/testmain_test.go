package testmain_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/internal/testmain"
)

// child names what TestChild does when this binary runs it as a child of
// TestExit: pass, fail, or leak a goroutine.
const child = "TESTMAIN_CHILD"

func TestMain(m *testing.M) { testmain.Run(m) }

func TestChild(t *testing.T) {
	switch os.Getenv(child) {
	case "":
		t.Skip("run by TestExit")
	case "fail":
		t.Error("failing as asked")
	case "leak":
		block := make(chan struct{})
		go func() { <-block }()
	}
}

// TestExit runs this binary again, as a child that passes, fails or leaks a
// goroutine, and checks the exit code and what the child printed: under the
// race detector a passing child exits by testmain's own path.
func TestExit(t *testing.T) {
	for _, tc := range []struct {
		do, output string
		code       int
	}{
		{"pass", "PASS", 0},
		{"fail", "failing as asked", 1},
		{"leak", "goleak: Errors on successful test run", 1},
	} {
		t.Run(tc.do, func(t *testing.T) {
			t.Parallel() // goleak retries for a second before it reports the leak
			cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.v")
			cmd.Env = append(os.Environ(), child+"="+tc.do)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			code := 0
			var exitErr *exec.ExitError
			if errors.As(err, &exitErr) {
				code = exitErr.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code || !strings.Contains(out.String(), tc.output) {
				t.Errorf("child %s exited %d, want %d, with output containing %q:\n%s", tc.do, code, tc.code, tc.output, out.String())
			}
		})
	}
}
