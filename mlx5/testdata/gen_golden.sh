#!/bin/sh
# gen_golden.sh: compile gen_golden.c against rdma-core's <infiniband/mlx5dv.h>
# (Debian/Ubuntu: libibverbs-dev) and write the golden vectors that
# mlx5/golden_test.go checks. Header-only: nothing from rdma-core is linked.
#
# usage: gen_golden.sh [output]   (default: rdma_core_golden.txt beside this script)
# env:   CC (default gcc), CFLAGS (extra flags, e.g. -I for a source-tree rdma-core)
set -eu

dir=$(cd "$(dirname "$0")" && pwd)
out=${1:-"$dir/rdma_core_golden.txt"}
cc=${CC:-gcc}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# shellcheck disable=SC2086 # CFLAGS is a list of flags.
"$cc" -std=gnu11 -O0 -Wall -Wextra -Werror ${CFLAGS:-} -o "$tmp/gen_golden" "$dir/gen_golden.c"

{
	# Comment lines are informational; the Go test ignores them.
	if command -v dpkg-query >/dev/null 2>&1 &&
		v=$(dpkg-query -W -f '${Version}' libibverbs-dev 2>/dev/null); then
		echo "# rdma-core (libibverbs-dev) $v"
	fi
	"$tmp/gen_golden"
} >"$tmp/out.txt"
mv "$tmp/out.txt" "$out"
