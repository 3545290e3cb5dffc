// Package bench holds rebound's end-to-end benchmarks, in a module of
// their own so that the libraries they compare rebound with stay out of
// rebound's go.mod. The benchmarks run against in-process servers on
// 127.0.0.1; see BENCHMARKS.md at the repository root for the figures and
// how to reproduce them.
package bench
