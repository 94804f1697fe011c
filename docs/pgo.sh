#!/bin/sh
# Regenerates cmd/softnic/default.pgo, the CPU profile the go command
# applies (profile-guided optimisation, -pgo=auto) whenever it builds
# softnic: `go build ./cmd/softnic`, `go run ./cmd/softnic ...`, the
# daemon. The profile is of the model's hot paths as softnic runs them:
#   - the end-to-end benchmarks (one 64 B WRITE at a time, streams of 64 B
#     and 4 KiB WRITEs, 1 MiB WRITEs) and PostSend;
#   - softnic itself ($SOFTNIC_CPUPROFILE) on perftest's tests at their
#     default sizes and on stat workloads;
# merged. docs/performance.sh builds this tree's benchmarks with it, and
# without it beside. Regenerate it after a change moves the hot paths; a
# stale profile costs speed, never correctness. Takes about a minute. Run
# from anywhere in the module.
set -e
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -run '^$' -bench '^(BenchmarkE2EWrite64|BenchmarkE2EStream|BenchmarkE2EWrite1M)$' -benchtime 2s \
	-o "$tmp/test.test" -cpuprofile "$tmp/e2e.prof" ./test >/dev/null
go test -run '^$' -bench '^BenchmarkPostSend$' -benchtime 1s \
	-o "$tmp/provider.test" -cpuprofile "$tmp/post.prof" ./provider >/dev/null
go build -pgo=off -o "$tmp/softnic" ./cmd/softnic
i=0
while read -r cmd; do
	i=$((i + 1))
	# shellcheck disable=SC2086 # the words of each line are its arguments
	SOFTNIC_CPUPROFILE="$tmp/cli$i.prof" "$tmp/softnic" $cmd >/dev/null
done <<'LIST'
perf write_bw -D 1
perf read_bw -D 1
perf send_bw -D 1
perf write_bw -s 64 -n 2000000
perf send_bw -s 4096 -q 4 -D 1
perf write_lat -n 300000
perf send_lat -n 300000
perf read_lat -n 300000
perf atomic_lat -n 200000
perf write_lat -s 4096 -n 200000
stat --op write --size 4096 -n 200000
stat --op send --size 64 -n 200000
LIST
go tool pprof -proto "$tmp"/*.prof >cmd/softnic/default.pgo 2>/dev/null
echo "wrote cmd/softnic/default.pgo ($(wc -c <cmd/softnic/default.pgo) bytes)"
