#!/bin/bash
# extract-vmlinux.sh VMLINUZ > vmlinux
#
# A bzImage carries the real kernel as a compressed ELF after its setup code.
# Find each place where a known compressor's magic number occurs, decompress
# from there, and keep the first result that is an ELF file. (qemu boots the
# uncompressed ELF through its PVH entry point, which skips the slow xz
# decompression under TCG.)
set -euo pipefail
in=${1:?usage: extract-vmlinux.sh VMLINUZ}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

# name : magic as a grep -P pattern : decompressor reading stdin
formats=(
	'xz:\xFD7zXZ\x00:xz -dcq'
	'gzip:\x1F\x8B\x08:gzip -dcq'
	'zstd:\x28\xB5\x2F\xFD:zstd -dcq'
	'bzip2:BZh[1-9]\x31\x41\x59\x26\x53\x59:bzip2 -dcq'
	'lzma:\x5D\x00\x00\x00:xz -dcq --format=lzma'
)
for f in "${formats[@]}"; do
	name=${f%%:*} rest=${f#*:}
	magic=${rest%%:*} cmd=${rest#*:}
	for off in $(LC_ALL=C grep -obUaP "$magic" "$in" | cut -d: -f1); do
		# Trailing bytes after the stream make the decompressors complain;
		# the output is complete all the same, so judge it by its content.
		tail -c +$((off + 1)) "$in" | $cmd >"$tmp" 2>/dev/null || true
		if [ "$(head -c 4 "$tmp" | od -An -tx1 | tr -d ' \n')" = "7f454c46" ]; then
			echo "extract-vmlinux.sh: $name stream at offset $off" >&2
			cat "$tmp"
			exit 0
		fi
	done
done
echo "extract-vmlinux.sh: no compressed ELF kernel found in $in" >&2
exit 1
