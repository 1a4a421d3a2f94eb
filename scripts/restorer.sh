#!/bin/sh
# Builds the restorer (crates/restorer, a workspace member): a freestanding x86_64 ELF with a
# PVH entry, linked at 1 MiB by crates/restorer/link.ld with no C library, static, with the
# workspace's `restorer` profile (panic=abort). A target directory and RUSTFLAGS of its
# own, so the other crates' builds never share (or rebuild) its artifacts. Prints the
# binary's path. `make build` and the e2e tests call this.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
out=${SNAPBOOT_RESTORER_TARGET_DIR:-$top/target/restorer}
cd "$top"
RUSTFLAGS="-C linker-features=-lld -C relocation-model=static -C panic=abort -C link-arg=-nostdlib -C link-arg=-nostartfiles -C link-arg=-static -C link-arg=-no-pie -C link-arg=-Wl,-T,$top/crates/restorer/link.ld -C link-arg=-Wl,--build-id=none" \
  CARGO_TARGET_DIR="$out" cargo build --profile restorer --quiet -p restorer --features pvh --bin restorer --target x86_64-unknown-linux-gnu >&2
echo "$out/x86_64-unknown-linux-gnu/restorer/restorer"
