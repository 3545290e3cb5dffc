// Package suite holds the behaviour tests that connectretry's two front
// doors share: each runs against connectretry for connect v1 and
// connectretry/v2 for connect v2, table-driven over the major, with real
// connect-go handlers of that major on loopback in the Connect, gRPC and
// gRPC-Web protocols (and, for v2, in process). It has no code of its own
// outside its tests.
package suite
