#!/bin/sh
# gen_golden.sh: compile gen_golden.c against the Linux uapi headers
# (Debian/Ubuntu: linux-libc-dev) and write the golden commands that
# uverbs/golden_test.go checks. Headers only: nothing is linked but libc.
#
# usage: gen_golden.sh [output]   (default: uapi_golden.txt beside this script)
# env:   CC (default gcc), CFLAGS (extra flags, e.g. -I for other headers)
set -eu

dir=$(cd "$(dirname "$0")" && pwd)
out=${1:-"$dir/uapi_golden.txt"}
cc=${CC:-gcc}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# shellcheck disable=SC2086 # CFLAGS is a list of flags.
"$cc" -std=gnu11 -O0 -Wall -Wextra -Werror ${CFLAGS:-} -o "$tmp/gen_golden" "$dir/gen_golden.c"

{
	# Comment lines are informational; the Go test ignores them.
	if command -v dpkg-query >/dev/null 2>&1 &&
		v=$(dpkg-query -W -f '${Version}' linux-libc-dev 2>/dev/null); then
		echo "# linux-libc-dev $v"
	fi
	"$tmp/gen_golden"
} >"$tmp/out.txt"
mv "$tmp/out.txt" "$out"
