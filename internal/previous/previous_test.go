package previous

import "testing"

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		v    []string
		want int
	}{
		{nil, 0}, {[]string{"0"}, 0}, {[]string{"3"}, 3}, {[]string{"+3"}, 3}, {[]string{"-1"}, 0},
		{[]string{"x"}, 0}, {[]string{""}, 0}, {[]string{" 1"}, 0}, {[]string{"1", "2"}, 0},
		{[]string{"99999999999999999999"}, 0},
	} {
		if got := Parse(tc.v); got != tc.want {
			t.Errorf("Parse(%q) = %d, want %d", tc.v, got, tc.want)
		}
	}
}
