// Package soak holds the chaos soak test: concurrent gRPC clients with retry
// and hedging policies against a fault-injecting server that also goes
// down and comes back. It has no code of its own; see soak_test.go.
package soak
