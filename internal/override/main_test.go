package override_test

import (
	"testing"

	"github.com/rebound-go/rebound/internal/testmain"
)

func TestMain(m *testing.M) { testmain.Run(m) }
