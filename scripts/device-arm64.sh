#!/bin/sh
# Builds the static aarch64 snapboot-device binary for the arm64 board with Debian's own
# Rust (rustc-web/cargo-web, which install /usr/bin/rustc and /usr/bin/cargo) and its arm64
# standard library (libstd-rust-web-dev:arm64): rustup here has only the x86_64 library.
# Its own target directory: two compilers sharing one would rebuild each other's build
# scripts every time. Prints the binary's path. `make build` and the e2e tests call this.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
out=${SNAPBOOT_ARM64_TARGET_DIR:-$top/target/arm64}
for f in /usr/bin/cargo /usr/bin/rustc /usr/bin/aarch64-linux-gnu-gcc; do
  [ -x "$f" ] || { echo "device-arm64: $f missing (make deps installs it)" >&2; exit 1; }
done
cd "$top"
RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc CARGO_TARGET_DIR="$out" \
  /usr/bin/cargo build --release --quiet -p snapboot-device --target aarch64-unknown-linux-gnu >&2
echo "$out/aarch64-unknown-linux-gnu/release/snapboot-device"
