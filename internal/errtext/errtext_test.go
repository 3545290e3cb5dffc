package errtext

import (
	"errors"
	"testing"
)

func TestGaveUp(t *testing.T) {
	busy := errors.New("busy")
	for _, tc := range []struct {
		attempts     int
		reason, last error
		want         string
	}{
		{3, errors.New("rebound: attempts exhausted"), busy, "x: gave up after 3 attempts (attempts exhausted): busy"},
		{1, errors.New("httpretry: request body cannot be replayed"), busy, "x: gave up after 1 attempt (request body cannot be replayed): busy"},
		{0, errors.New("context canceled"), nil, "x: gave up after 0 attempts (context canceled)"},
		{2, nil, busy, "x: gave up after 2 attempts: busy"},
	} {
		if got := GaveUp("x", tc.attempts, tc.reason, tc.last); got != tc.want {
			t.Errorf("GaveUp = %q, want %q", got, tc.want)
		}
	}
}
