package grpcretry

import "github.com/rebound-go/rebound/internal/msglog"

// BufferedBytes returns what c's streams keep for replay, counted against
// the total buffer limit: the test hook for memory bounds.
func BufferedBytes(c *Client) int64 { return c.buffers.Used() }

// Cost returns what keeping m costs against the buffer limits, or -1 if m
// cannot be kept.
func Cost(m any) int {
	e, ok := msglog.Encode(m, 1<<62)
	if !ok {
		return -1
	}
	return e.Cost()
}

// Targets returns how many ClientConns c keeps retry state for.
func Targets(c *Client) int {
	n := 0
	c.targets.Range(func(any, any) bool { n++; return true })
	return n
}
