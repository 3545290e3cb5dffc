package bench

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a server, client or retry library leaves a
// goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
