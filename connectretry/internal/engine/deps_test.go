package engine

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// A program that uses one connect major must not compile the other (issue
// 33): the engine imports neither, each front door only its own. go list
// -deps gives what a program that imports the package compiles.
func TestEachMajorAlone(t *testing.T) {
	const (
		v1 = "connectrpc.com/connect"
		v2 = "connectrpc.com/connect/v2"
	)
	for _, tc := range []struct {
		pkg       string
		want, not []string
	}{
		{"github.com/rebound-go/rebound/connectretry/internal/engine", nil, []string{v1, v2}},
		{"github.com/rebound-go/rebound/connectretry", []string{v1}, []string{v2}},
		{"github.com/rebound-go/rebound/connectretry/v2", []string{v2}, []string{v1, "github.com/rebound-go/rebound/connectretry"}},
	} {
		out, err := exec.Command("go", "list", "-deps", tc.pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", tc.pkg, err)
		}
		deps := strings.Fields(string(out))
		for _, p := range tc.want {
			if !slices.Contains(deps, p) {
				t.Errorf("%s does not compile %s; the check is broken", tc.pkg, p)
			}
		}
		for _, p := range tc.not {
			if slices.Contains(deps, p) {
				t.Errorf("a program that imports %s compiles %s", tc.pkg, p)
			}
		}
	}
}
