package grpcretry

// Resolved returns how many targets c keeps a resolver's config for.
func Resolved(c *Client) int {
	n := 0
	c.resolved.Range(func(any, any) bool { n++; return true })
	return n
}
