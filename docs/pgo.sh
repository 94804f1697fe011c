#!/bin/sh
# Regenerates cmd/softnic/default.pgo, the CPU profile the go command
# applies (profile-guided optimisation, -pgo=auto) whenever it builds
# softnic: `go build ./cmd/softnic`, `go run ./cmd/softnic ...`, the
# daemon. The profile is of the model's hot paths as softnic perf, trace and
# serve run them: the end-to-end benchmarks (one 64 B WRITE at a time,
# streams of 64 B and 4 KiB WRITEs, 1 MiB WRITEs) and PostSend, merged.
# docs/performance.sh builds this tree's benchmarks with it, and without it
# beside. Regenerate it after a change moves the hot paths; a stale profile
# costs speed, never correctness. Takes about a minute. Run from anywhere
# in the module.
set -e
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -run '^$' -bench '^(BenchmarkE2EWrite64|BenchmarkE2EStream|BenchmarkE2EWrite1M)$' -benchtime 2s \
	-o "$tmp/test.test" -cpuprofile "$tmp/e2e.prof" ./test
go test -run '^$' -bench '^BenchmarkPostSend$' -benchtime 1s \
	-o "$tmp/provider.test" -cpuprofile "$tmp/post.prof" ./provider
go tool pprof -proto "$tmp/e2e.prof" "$tmp/post.prof" >cmd/softnic/default.pgo
echo "wrote cmd/softnic/default.pgo ($(wc -c <cmd/softnic/default.pgo) bytes)"
