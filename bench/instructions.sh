#!/bin/bash
# instructions.sh prints the instructions one op of a benchmark executes,
# counted by valgrind's callgrind: the difference between a run of 3N ops
# and one of N, over 2N (N is $N, 100000 unless set; take N=2000 for a
# call over the loopback). Unlike nanoseconds, the count does
# not depend on what else the machine runs. Set GOGC=off to leave the
# garbage collector's share out (allocations then cost only their malloc).
#
#	cd bench && go test -c -o bench.test . && ./instructions.sh ./bench.test '^BenchmarkDo$/case=success$/lib=rebound$'
set -euo pipefail
if [ $# -ne 2 ]; then
	echo "usage: $0 TESTBINARY BENCHREGEXP" >&2
	exit 2
fi
command -v valgrind >/dev/null || { echo "$0: valgrind is not installed" >&2; exit 1; }
count() {
	# Async preemption signals confuse callgrind; one P keeps the count to one thread's work.
	GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
		"$1" -test.run='^$' -test.bench="$2" -test.benchtime="${3}x" -test.cpu=1 2>&1 |
		awk '/Collected/ { print $4 }'
}
n=${N:-100000}
a=$(count "$1" "$2" "$n")
b=$(count "$1" "$2" $((3 * n)))
if [ -z "$a" ] || [ -z "$b" ]; then
	echo "$0: callgrind printed no count (does $2 match a benchmark?)" >&2
	exit 1
fi
if [ "$a" -ge "$b" ]; then
	echo "$0: no op ran: does $2 match a benchmark?" >&2
	exit 1
fi
echo "$2 $(((b - a) / (2 * n))) instructions/op"
