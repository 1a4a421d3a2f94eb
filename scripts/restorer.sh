#!/bin/sh
# Builds the restorer (crates/restorer, a workspace member), freestanding, static, with no C
# library, with the workspace's `restorer` profile (panic=abort), in a target directory and
# with RUSTFLAGS of its own, so the other crates' builds never share (or rebuild) its
# artifacts. Prints the binary's path. `make build` and the e2e tests call this.
#
# The two x86_64 programs share one cargo target directory (target/restorer-build): their
# RUSTFLAGS are the same and only the program itself is linked by another script (given
# to its link alone, `cargo rustc -- …`), so the crates under it compile once for both.
# Each program is copied out of it to where it has always been (target/restorer/…,
# target/restorer-efi/…) right after its build; run one at a time (make does).
#
#   scripts/restorer.sh        the PVH program: an x86_64 ELF with a PVH note, linked at
#                              1 MiB by crates/restorer/link.ld
#   scripts/restorer.sh efi    the EFI application: the same program with the `efi` feature,
#                              linked at its fixed address by crates/restorer/link-efi.ld,
#                              then made a PE32+ EFI application by objcopy (restorer.efi)
#   scripts/restorer.sh efi-arm64
#                              the arm64 EFI application U-Boot's bootefi starts: built by
#                              Debian's rustc for aarch64 (rustup has no arm64 library
#                              here), a static PIE linked by crates/restorer/link-efi-arm64.ld
#                              that relocates itself, made a PE32+ file by objcopy
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
kind=${1:-pvh}
cd "$top"
case "$kind" in
pvh)
  out=$top/target/restorer
  script=$top/crates/restorer/link.ld
  features=program
  ;;
efi)
  out=$top/target/restorer-efi
  script=$top/crates/restorer/link-efi.ld
  features=program,efi
  ;;
efi-arm64)
  out=$top/target/restorer-efi-arm64
  script=$top/crates/restorer/link-efi-arm64.ld
  RUSTFLAGS="-C linker=aarch64-linux-gnu-gcc -C relocation-model=pie -C panic=abort -C link-arg=-nostdlib -C link-arg=-nostartfiles -C link-arg=-static-pie -C link-arg=-Wl,-T,$script -C link-arg=-Wl,--build-id=none -C link-arg=-Wl,-z,notext" \
    RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc CARGO_TARGET_DIR="$out" /usr/bin/cargo build --profile restorer --quiet -p restorer --features program,efi --bin restorer --target aarch64-unknown-linux-gnu >&2
  elf=$out/aarch64-unknown-linux-gnu/restorer/restorer
  aarch64-linux-gnu-objcopy -O pei-aarch64-little --subsystem efi-app \
    -j .text -j .rodata -j .data -j .bss "$elf" "$elf.efi"
  echo "$elf.efi"
  exit 0
  ;;
*)
  echo "restorer.sh: unknown kind $kind (pvh, efi or efi-arm64)" >&2
  exit 2
  ;;
esac
build=$top/target/restorer-build
RUSTFLAGS="-C linker-features=-lld -C relocation-model=static -C panic=abort -C link-arg=-nostdlib -C link-arg=-nostartfiles -C link-arg=-static -C link-arg=-no-pie -C link-arg=-Wl,--build-id=none" \
  CARGO_TARGET_DIR="$build" cargo rustc --profile restorer --quiet -p restorer --features "$features" --bin restorer --target x86_64-unknown-linux-gnu \
  -- -C "link-arg=-Wl,-T,$script" >&2
elf=$out/x86_64-unknown-linux-gnu/restorer/restorer
mkdir -p "$(dirname "$elf")"
cp "$build/x86_64-unknown-linux-gnu/restorer/restorer" "$elf.new"
mv "$elf.new" "$elf"
if [ "$kind" = pvh ]; then
  echo "$elf"
  exit 0
fi
# The PE file: its image base is the link address (the program is not relocatable: it
# checks at its entry that the firmware loaded it there), subsystem EFI application.
base=$(nm "$elf" | sed -n 's/^\([0-9a-f]*\) [A-Za-z] __image_start$/\1/p')
objcopy -O pei-x86-64 --subsystem efi-app --image-base "0x$base" \
  -j .text -j .rodata -j .data -j .bss -j .reloc "$elf" "$elf.efi"
echo "$elf.efi"
