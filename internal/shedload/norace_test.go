//go:build !race

package shedload

// raceEnabled says the tests run under the race detector.
const raceEnabled = false
