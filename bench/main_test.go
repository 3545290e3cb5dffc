package bench

import (
	"testing"

	"github.com/rebound-go/rebound/internal/testmain"
)

// TestMain fails the run if a server, client or retry library leaves a
// goroutine behind.
func TestMain(m *testing.M) { testmain.Run(m) }
