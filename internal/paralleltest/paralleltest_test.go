package paralleltest

import (
	"flag"
	"runtime"
	"strconv"
	"testing"
)

// Set raises -test.parallel to PerCPU per CPU, unless the command line
// gave it, and then leaves it alone.
func TestSet(t *testing.T) {
	f := flag.Lookup("test.parallel")
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	before := f.Value.String()
	Set()
	want := strconv.Itoa(PerCPU * runtime.GOMAXPROCS(0))
	if given {
		want = before
	}
	if got := f.Value.String(); got != want {
		t.Errorf("-test.parallel %s after Set (given on the command line: %v, was %s), want %s", got, given, before, want)
	}
}
