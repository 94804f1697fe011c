#!/bin/bash
# build.sh [OUTDIR] — build the Soft-RoCE (rdma_rxe) guest for the softnic
# interop test from Debian packages only (shared/reference/rxe-peer.md).
#
# Output, cached in OUTDIR (default $XDG_CACHE_HOME/softnic-guest, else
# /tmp/softnic-guest), never in the repository:
#   OUTDIR/vmlinux      uncompressed kernel for qemu's fast PVH boot
#   OUTDIR/initrd.cpio  uncompressed initramfs: busybox, iproute2 (ip, rdma),
#                       ibverbs-utils, perftest (ib_*_lat, ib_*_bw), librxe,
#                       verbs_peer, the rxe modules
#   OUTDIR/guest.env    KERNEL_VERSION, VMLINUX, INITRD for the test
# A piece is rebuilt only when it is missing or its inputs changed (the
# kernel version, or the hash of this script, init and verbs_peer.c).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-}
if [ -z "$out" ]; then
	if [ -n "${XDG_CACHE_HOME:-}" ]; then out=$XDG_CACHE_HOME/softnic-guest; else out=/tmp/softnic-guest; fi
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

log() { echo "build.sh: $*" >&2; }

# One build at a time per OUTDIR.
exec 9>"$out/.lock"
flock 9

# --- host tools --------------------------------------------------------------
# command-or-file : Debian package that provides it
need=(
	"qemu-system-x86_64:qemu-system-x86"
	"/bin/busybox:busybox-static"
	"cpio:cpio"
	"xz:xz-utils"
	"zstd:zstd"
	"modprobe:kmod"
	"depmod:kmod"
	"gcc:gcc"
	"/usr/include/infiniband/verbs.h:libibverbs-dev"
	"/usr/include/zlib.h:zlib1g-dev"
	"ibv_rc_pingpong:ibverbs-utils"
	"ib_write_lat:perftest"
	"/etc/libibverbs.d/rxe.driver:ibverbs-providers"
	"rdma:iproute2"
	"ip:iproute2"
	"ldd:libc-bin"
	"flock:util-linux"
)
missing=()
for n in "${need[@]}"; do
	what=${n%%:*} pkg=${n#*:}
	if [[ $what == /* ]]; then [ -e "$what" ] && continue; else command -v "$what" >/dev/null && continue; fi
	[[ " ${missing[*]-} " == *" $pkg "* ]] || missing+=("$pkg")
done
apt_updated=
apt_update() {
	[ -n "$apt_updated" ] && return
	log "apt-get update"
	apt-get update -qq >&2
	apt_updated=1
}
if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]}"
	apt_update
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# --- kernel --------------------------------------------------------------------
# The version behind linux-image-amd64 (not -cloud-amd64: it has no rdma_rxe),
# resolved once and remembered so that a cached guest needs no apt at all.
if [ -s "$out/kernel.version" ] && [ -d "$out/kroot/lib/modules/$(cat "$out/kernel.version")" ] &&
	[ -s "$out/vmlinux" ]; then
	kver=$(cat "$out/kernel.version")
else
	rm -rf "$out/kroot" "$out/debs" "$out/vmlinux" "$out/kernel.version"
	kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-6\.1\.[^ ]*-amd64\)$/\1/p' | head -n1)
	if [ -z "$kpkg" ]; then
		apt_update
		kpkg=$(apt-cache depends linux-image-amd64 | sed -n 's/^ *Depends: \(linux-image-6\.1\.[^ ]*-amd64\)$/\1/p' | head -n1)
	fi
	[ -n "$kpkg" ] || { log "cannot resolve linux-image-amd64 to a linux-image-6.1.*-amd64 package"; exit 1; }
	kver=${kpkg#linux-image-}
	log "kernel $kpkg"
	mkdir -p "$out/debs"
	(cd "$out/debs" && apt-get download -qq "$kpkg" 2>&1 | grep -v 'unsandboxed' >&2 || true)
	deb=$(ls "$out/debs/${kpkg}"_*.deb 2>/dev/null | head -n1)
	[ -n "$deb" ] || { log "apt-get download $kpkg produced no .deb"; exit 1; }
	mkdir -p "$out/kroot"
	dpkg-deb -x "$deb" "$out/kroot"
	# The .deb ships no modules.dep.
	depmod -b "$out/kroot" "$kver"
	"$here/extract-vmlinux.sh" "$out/kroot/boot/vmlinuz-$kver" >"$out/vmlinux.tmp"
	mv "$out/vmlinux.tmp" "$out/vmlinux"
	rm -rf "$out/debs"
	echo "$kver" >"$out/kernel.version"
fi

# --- initramfs -----------------------------------------------------------------
stamp=$( (echo "$kver"; cat "$here/build.sh" "$here/init" "$here/verbs_peer.c" "$here/extract-vmlinux.sh") | sha256sum | cut -c1-16)
if [ -s "$out/initrd.cpio" ] && [ "$(cat "$out/initrd.stamp" 2>/dev/null)" = "$stamp" ]; then
	log "cached guest in $out (kernel $kver)"
else
	log "packing the initramfs"
	root=$out/root.tmp
	rm -rf "$root"
	mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,run,root,etc/libibverbs.d,lib/modules/softnic}

	# Kernel modules in dependency order (modprobe prints "insmod PATH" lines).
	mods=(crc32_generic virtio_pci virtio_net rdma_rxe ib_uverbs rdma_ucm)
	: >"$root/lib/modules/softnic/order"
	for m in "${mods[@]}"; do
		modprobe -d "$out/kroot" -S "$kver" --show-depends "$m" | awk '$1 == "insmod" {print $2}'
	done | awk '!seen[$0]++' | while read -r ko; do
		name=$(basename "$ko")
		case "$name" in
		*.ko.xz) xz -dc "$ko" >"$root/lib/modules/softnic/${name%.xz}"; name=${name%.xz} ;;
		*.ko.zst) zstd -qdc "$ko" >"$root/lib/modules/softnic/${name%.zst}"; name=${name%.zst} ;;
		*.ko.gz) gzip -dc "$ko" >"$root/lib/modules/softnic/${name%.gz}"; name=${name%.gz} ;;
		*) cp "$ko" "$root/lib/modules/softnic/$name" ;;
		esac
		echo "$name" >>"$root/lib/modules/softnic/order"
	done
	grep -q '^rdma_rxe\.ko$' "$root/lib/modules/softnic/order" || { log "rdma_rxe.ko not found in $kver"; exit 1; }

	# busybox applets, except ip: iproute2's must be the one found.
	cp /bin/busybox "$root/bin/busybox"
	for a in $(/bin/busybox --list); do
		case "$a" in ip | busybox) continue ;; esac
		[ -e "$root/bin/$a" ] || ln -s busybox "$root/bin/$a"
	done

	# copy_with_libs SRC [DEST]: a program or library and what ldd says it loads.
	copy_with_libs() {
		local src=$1 dst=${2:-$1}
		mkdir -p "$root$(dirname "$dst")"
		cp -L "$src" "$root$dst"
		ldd "$src" 2>/dev/null | awk '/=> \// {print $3} /^\t\/[^ ]+ \(/ {print $1}' | while read -r lib; do
			[ -e "$root$lib" ] && continue
			mkdir -p "$root$(dirname "$lib")"
			cp -L "$lib" "$root$lib"
		done
	}
	# The C verbs peer, built on the host against Debian's libibverbs.
	gcc -O2 -Wall -Wextra -Werror -o "$out/verbs_peer" "$here/verbs_peer.c" -libverbs -lz
	copy_with_libs "$out/verbs_peer" /usr/bin/verbs_peer
	for p in ip rdma ibv_rc_pingpong ibv_devinfo ibv_devices; do
		copy_with_libs "$(command -v "$p")" "/usr/bin/$p"
	done
	# Stock perftest (Debian's package), for test/interop/perftest_test.go.
	for p in ib_write_lat ib_write_bw ib_send_lat ib_send_bw ib_read_lat ib_read_bw ib_atomic_lat ib_atomic_bw; do
		copy_with_libs "$(command -v "$p")" "/usr/bin/$p"
	done
	# librxe and its driver file: libibverbs dlopens the provider.
	rxe=$(ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so | head -n1)
	copy_with_libs "$rxe"
	cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
	echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
	echo 'root:x:0:' >"$root/etc/group"

	install -m 0755 "$here/init" "$root/init"
	(cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) >"$out/initrd.cpio.tmp"
	mv "$out/initrd.cpio.tmp" "$out/initrd.cpio"
	rm -rf "$root"
	echo "$stamp" >"$out/initrd.stamp"
	log "guest ready in $out (kernel $kver, initramfs $(du -h "$out/initrd.cpio" | cut -f1))"
fi

cat >"$out/guest.env" <<EOF
KERNEL_VERSION=$kver
VMLINUX=$out/vmlinux
INITRD=$out/initrd.cpio
EOF
cat "$out/guest.env"
