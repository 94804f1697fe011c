#!/bin/sh
# Compares the outputs of two softnic builds byte for byte: every trace
# format, op and size, stat, perf, and traces and stats under the fault
# plans in docs/determinism/ (drop, duplicate, delay, corrupt, reorder,
# DMA). This is the comparison behind docs/performance.md's determinism
# claim.
#
#   sh docs/determinism.sh OLD_BINARY NEW_BINARY
#
# e.g. git worktree add /tmp/old <rev> && (cd /tmp/old && go build -o
# /tmp/softnic-old ./cmd/softnic); go build -o /tmp/softnic-new
# ./cmd/softnic; sh docs/determinism.sh /tmp/softnic-old /tmp/softnic-new
# Exits 0 and prints "identical: N outputs" when every output matches.
set -e
[ $# -eq 2 ] || { echo "usage: $0 OLD_BINARY NEW_BINARY" >&2; exit 2; }
plans=$(cd "$(dirname "$0")/determinism" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
run() { # run BIN DIR
	B=$(abs "$1")
	mkdir -p "$2"
	cd "$2"
	i=0
	r() { i=$((i + 1)); "$B" "$@" >out$i.txt 2>err$i.txt || true; }
	r trace
	r trace --json
	r trace -chrome-trace ch.json
	r trace -html pg.html
	r trace -pcap p1.pcap
	r trace -counters -explain -hexdump
	r trace -events
	r trace -size 1048576 -mtu 4096
	r trace -size 1048576 -mtu 4096 -pcap p2.pcap
	r trace -size 1048576 -mtu 1024
	r trace -size 1048576 -mtu 1024 -pcap p3.pcap
	r trace -size 1048576 -mtu 4096 --json
	for op in read send write send_imm write_imm uc_write uc_send ud_send; do
		for sz in 64 4096 100000; do
			r trace -op $op -size $sz -mtu 4096
			r trace -op $op -size $sz -counters
		done
	done
	r trace -op write -size 8192 -batch 4
	r trace -op send -size 256 -batch 8 -check
	r trace -check -size 65536
	r trace -inline -size 32
	r trace -no-bf -size 4096
	r trace -srq -op send -size 2048
	for op in write read send; do
		for sz in 64 4096 1048576; do
			r stat --op $op --size $sz -n 20 --all
			r stat --op $op --size $sz -n 5 --mtu 4096 --json
		done
	done
	for t in write_lat write_bw read_bw send_bw read_lat send_lat; do
		r perf $t -n 50 --no-progress
		r perf $t -s 1048576 -n 10 --no-progress
		r perf $t -a -n 5 --no-progress
	done
	r perf write_bw -q 8 -n 2000 --no-progress
	r perf send_bw -q 4 -n 500 -s 4096 --no-progress
	r perf write_bw -n 300 -t 2 -Q 1 -s 4096 --no-progress
	for f in "$plans"/*.json; do
		r trace -faults "$f" -size 1048576 -mtu 4096
		r trace -faults "$f" -size 262144 -mtu 1024 -pcap f$i.pcap
		r trace -faults "$f" -op read -size 65536
		r trace -faults "$f" -op send -size 20000 -json
		r stat --op write --size 1048576 -n 4 --mtu 4096 --faults "$f" --all
		r stat --op read --size 65536 -n 10 --faults "$f" --all
		r stat --op send --size 4096 -n 30 --faults "$f" --all
		r perf write_bw -q 4 -n 300 --faults "$f" --no-progress
	done
}
(run "$1" "$out/a")
(run "$2" "$out/b")
if diff -r "$out/a" "$out/b" >"$out/diff.txt"; then
	echo "identical: $(ls "$out/a" | wc -l) outputs"
else
	head -40 "$out/diff.txt"
	# Every output that differs, text or binary (pcap), or exists on one side only.
	if [ -n "$DETERMINISM_LIST" ]; then grep -E "^(diff -r|Binary files|Only in)" "$out/diff.txt"; fi
	echo "DIFFERENT" >&2
	exit 1
fi
