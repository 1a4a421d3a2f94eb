#!/bin/sh
# Builds the restorer (crates/restorer, its own workspace): a freestanding x86_64 ELF with a
# PVH entry, linked at 1 MiB by crates/restorer/link.ld with no C library, static, and
# panic=abort. Its own target directory and RUSTFLAGS, so the main workspace's flags and
# profiles never touch it. Prints the binary's path. `make build` and the e2e tests call this.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
out=${SNAPBOOT_RESTORER_TARGET_DIR:-$top/target/restorer}
cd "$top/crates/restorer"
RUSTFLAGS="-C linker-features=-lld -C relocation-model=static -C panic=abort -C link-arg=-nostdlib -C link-arg=-nostartfiles -C link-arg=-static -C link-arg=-no-pie -C link-arg=-Wl,-T,$top/crates/restorer/link.ld -C link-arg=-Wl,--build-id=none" \
  CARGO_TARGET_DIR="$out" cargo build --release --quiet --bin restorer --target x86_64-unknown-linux-gnu >&2
echo "$out/x86_64-unknown-linux-gnu/release/restorer"
