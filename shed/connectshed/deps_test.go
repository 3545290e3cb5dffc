package connectshed_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestEachMajorAlone: a server of one connect-go major that puts a
// Shedder in front of it builds nothing of the other major, and package
// shed builds neither (its own front doors are grpc-go's and net/http's).
func TestEachMajorAlone(t *testing.T) {
	const (
		v1 = "connectrpc.com/connect"
		v2 = "connectrpc.com/connect/v2"
	)
	for _, tc := range []struct {
		pkg       string
		want, not []string
	}{
		{"github.com/rebound-go/rebound/shed", nil, []string{v1, v2}},
		{"github.com/rebound-go/rebound/shed/connectshed", []string{v1}, []string{v2}},
		{"github.com/rebound-go/rebound/shed/connectshed/v2", []string{v2}, []string{v1, "github.com/rebound-go/rebound/shed/connectshed"}},
	} {
		out, err := exec.Command("go", "list", "-deps", tc.pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", tc.pkg, err)
		}
		deps := strings.Fields(string(out))
		for _, p := range tc.want {
			if !slices.Contains(deps, p) {
				t.Errorf("%s does not build %s; the check is broken", tc.pkg, p)
			}
		}
		for _, p := range tc.not {
			if slices.Contains(deps, p) {
				t.Errorf("a program that imports %s builds %s", tc.pkg, p)
			}
		}
	}
}
