// Package soak holds the chaos soak tests. TestChaosSoak, part of every
// test run, drives concurrent gRPC clients with retry and hedging policies
// against a fault-injecting server that also goes down and comes back.
// TestLongSoak, run only when REBOUND_LONG_SOAK names a duration, drives
// grpcretry, connectretry and httpretry clients for that long under chaos
// and checks that goroutines, heap and open file descriptors stay bounded
// and return to their baseline; BENCHMARKS.md shows its chart. The package
// has no code of its own; see its tests.
package soak
