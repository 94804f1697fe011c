#!/bin/sh
# Regenerates docs/performance.md: measures this tree against commit
# b152fe6 (a temporary git worktree; or pass -base DIR) and against the
# anchors (the C post_send of provider/testdata/bench_postsend.c where gcc
# and rdma-core's mlx5dv.h are present, a Go copy of 1 MiB, crc32), all in
# the same run. Takes a few minutes. Run from anywhere in the module.
set -e
cd "$(dirname "$0")/.."
exec go run ./internal/perfreport "$@"
