#!/bin/sh
# Builds the arm64 board's U-Boot with SD/MMC support: Debian's own U-Boot source, the
# version of the installed u-boot-qemu package, its qemu_arm64_defconfig plus the SD host
# controller on PCI (Debian builds qemu_arm64 without MMC: "MMC support not available!").
# The board uses it only for a run whose store is on an SD card (`--store-on sd`); every
# other run boots Debian's own binary. Cached: built once per Debian version, under
# $SNAPBOOT_HOME/u-boot/qemu_arm64-mmc (about a minute on 2 cores). Prints the binary's path.
#
# Needs: u-boot-qemu (the version), dpkg-dev (dpkg-source), gcc-aarch64-linux-gnu, make,
# bison, flex, bc, libssl-dev, curl or wget; the Debian archive (deb.debian.org or the
# mirror apt uses) for the source package.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
home=${SNAPBOOT_HOME:-$top/.snapboot}
version=$(dpkg-query -W -f '${Version}' u-boot-qemu 2>/dev/null) || {
  echo "u-boot-mmc.sh: u-boot-qemu is not installed (make deps)" >&2
  exit 1
}
out=$home/u-boot/qemu_arm64-mmc
bin=$out/u-boot.bin
if [ -f "$bin" ] && [ "$(cat "$out/version" 2>/dev/null)" = "$version" ]; then
  echo "$bin"
  exit 0
fi
work=$home/u-boot/src
rm -rf "$work" "$out"
mkdir -p "$work" "$out"
cd "$work"
# The mirror apt uses, then Debian's own archives (a point release's fix is in -security).
mirrors=$(sed -n 's/^URIs: *//p; s/^deb \(\[[^]]*\] \)\{0,1\}\(http[^ ]*\) .*/\2/p' \
  /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null |
  grep -i debian | sort -u)
mirrors="$mirrors http://deb.debian.org/debian http://deb.debian.org/debian-security"
dsc=u-boot_$(echo "$version" | sed 's/^[0-9]*://').dsc
fetch() { # URL FILE
  if command -v curl >/dev/null; then curl -fsS -o "$2" "$1"; else wget -q -O "$2" "$1"; fi
}
base=
for m in $mirrors; do
  if fetch "$m/pool/main/u/u-boot/$dsc" "$dsc" 2>/dev/null; then
    base=$m/pool/main/u/u-boot
    break
  fi
done
[ -n "$base" ] || {
  echo "u-boot-mmc.sh: $dsc is on none of: $mirrors" >&2
  exit 1
}
# The files the .dsc lists (orig and debian tarballs), checked against its SHA-256 lines.
sed -n '/^Checksums-Sha256:/,/^[^ ]/p' "$dsc" | sed -n 's/^ \([0-9a-f]\{64\}\) [0-9]* \(.*\)$/\1  \2/p' >sums
while read -r _ f; do fetch "$base/$f" "$f"; done <sums
sha256sum -c --quiet sums
dpkg-source --no-check -x "$dsc" tree >/dev/null
cd tree
make -s O="$work/build" CROSS_COMPILE=aarch64-linux-gnu- qemu_arm64_defconfig
scripts/config --file "$work/build/.config" -e MMC -e DM_MMC -e MMC_SDHCI -e MMC_PCI \
  -e MMC_SDHCI_SDMA -e CMD_MMC
make -s O="$work/build" CROSS_COMPILE=aarch64-linux-gnu- olddefconfig
make -s O="$work/build" CROSS_COMPILE=aarch64-linux-gnu- -j"$(nproc)" u-boot.bin >&2
grep -q '^CONFIG_MMC_PCI=y' "$work/build/.config" || {
  echo "u-boot-mmc.sh: the configuration lost CONFIG_MMC_PCI" >&2
  exit 1
}
cp "$work/build/u-boot.bin" "$bin"
echo "$version" >"$out/version"
rm -rf "$work"
echo "$bin"
