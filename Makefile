# snapboot: the two commands a newcomer needs are `make demo` and `make test`.
SNAPBOOT := target/x86_64-unknown-linux-gnu/release/snapboot
export SNAPBOOT_HOME ?= $(CURDIR)/.snapboot

APT_PACKAGES := qemu-system-x86 busybox-static cpio squashfs-tools python3 xz-utils util-linux chromium mmdebstrap swtpm ovmf grub-efi-amd64-bin mtools dosfstools rauc
# The arm64 board: its emulator and firmware (U-Boot), the tools that make its partitioned
# boot disk, the cross build of its device binary (Debian's Rust with the arm64 standard
# library: rustup here has x86_64 only), and qemu-user for the arm64 Debian root's own
# programs (mmdebstrap's maintainer scripts, apt, mkinitramfs; the build registers it with
# binfmt_misc itself, crates/bundle/src/emulation.rs).
ARM64_PACKAGES := qemu-system-arm u-boot-qemu u-boot-tools fdisk e2fsprogs \
  gcc-aarch64-linux-gnu libc6-dev-arm64-cross rustc-web cargo-web libstd-rust-web-dev:arm64 \
  rust-web-clippy qemu-user-static
# `make deb`'s check of the packages (dpkg-deb, which builds them, comes with dpkg).
DEB_PACKAGES := lintian
# Building the restore kernel from the distribution's kernel source (gcc-aarch64-linux-gnu:
# the arm64 one, `snapboot board restore-kernel --arch arm64`).
KERNEL_BUILD_PACKAGES := gcc make flex bison bc libelf-dev gcc-aarch64-linux-gnu
# Building the arm64 board's U-Boot with SD card support from Debian's U-Boot source
# (scripts/u-boot-mmc.sh: dpkg-source unpacks it; its host tools want OpenSSL, GnuTLS and
# libuuid).
UBOOT_BUILD_PACKAGES := dpkg-dev curl libssl-dev libgnutls28-dev uuid-dev

.PHONY: setup deps kernel-deps host build deb kernel restore-kernel u-boot demo test soak unit imports bench clean

## Install what the board needs (Debian packages), fetch the guest kernel, build snapboot.
setup: deps build kernel

deps:
	@SUDO=$$( [ $$(id -u) -eq 0 ] || echo sudo ); \
	dpkg --print-foreign-architectures | grep -qx arm64 || { $$SUDO dpkg --add-architecture arm64 && $$SUDO apt-get update -qq; }
	@missing=""; for p in $(APT_PACKAGES) $(ARM64_PACKAGES) $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=$$( [ $$(id -u) -eq 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

## The host tool and the x86_64 device binary. `make test` builds the whole workspace here
## instead, every target the way `cargo test --workspace` builds it (HOST_BUILD below): the
## test-only features of the dev-dependencies (`testing`, `testdisk`, `old-writers`) are then
## on for every crate in both, so the workspace is compiled once, not once for the tool and
## again for the tests.
## Cargo and gcc are all it needs, so under a parallel make it compiles while apt installs.
HOST_BUILD ?= cargo build --release -p snapboot -p snapboot-device
host:
	$(HOST_BUILD)

build: deps host
	scripts/device-arm64.sh
	scripts/restorer.sh
	scripts/restorer.sh efi
	scripts/restorer.sh efi-arm64

## The Debian packages snapboot_VERSION_amd64.deb and _arm64.deb (from the static device
## binaries) in DEB_OUT, checked by lintian (packaging/deb/lintian-overrides says why for
## what it still reports). Install one with `apt install ./snapboot_VERSION_amd64.deb`.
DEB_OUT ?= target/deb
deb: deps build
	$(SNAPBOOT) board deb --out $(DEB_OUT)
	$(SNAPBOOT) board deb --arch arm64 --out $(DEB_OUT)
	lintian --fail-on error,warning $(DEB_OUT)/snapboot_*.deb

kernel: deps host
	@apt-cache depends linux-image-amd64 2>/dev/null | grep -q 'Depends: linux-image-' || \
	  { SUDO=$$( [ $$(id -u) -eq 0 ] || echo sudo ); $$SUDO apt-get update -qq; }
	$(SNAPBOOT) board fetch-kernel
	$(SNAPBOOT) board fetch-kernel --arch arm64

## The restore kernels: the distribution's kernel source, the project's fragments
## (crates/hostkernel/kernel/restore.config, restore-arm64.config), each built once (minutes)
## and cached under .snapboot; then the arm64 board's U-Boot with SD card support (make u-boot).
restore-kernel: kernel
	@$(MAKE) --no-print-directory kernel-deps
	$(SNAPBOOT) board restore-kernel
	$(SNAPBOOT) board restore-kernel --arch arm64
	scripts/u-boot-mmc.sh

## What building the restore kernels and U-Boot needs (Debian packages). `restore-kernel`
## makes it after `kernel`, so no two apt runs meet under a parallel make.
kernel-deps: deps
	@missing=""; for p in $(KERNEL_BUILD_PACKAGES) $(UBOOT_BUILD_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=$$( [ $$(id -u) -eq 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

## The arm64 board's U-Boot with SD card support (`--store-on sd`), from Debian's source:
## about a minute, once per Debian version (`make restore-kernel` builds it too).
u-boot: kernel-deps
	scripts/u-boot-mmc.sh

## The `app` workload: cold boot, capture once, snapshot boot, then all methods compared.
demo: setup restore-kernel
	$(SNAPBOOT) board build --workload app
	@echo "== 1. cold boot =="
	$(SNAPBOOT) board run app --probe
	@echo "== 2. capture at the ready point =="
	$(SNAPBOOT) board capture app --store $(SNAPBOOT_HOME)/app.store
	@echo "== 3. snapshot boot from the same image (restore kernel) =="
	$(SNAPBOOT) board run app --store $(SNAPBOOT_HOME)/app.store --probe
	@echo "== 4. cold vs kernel-native hibernation resume vs snapboot =="
	$(SNAPBOOT) bench compare --workload app --runs 3

## Unit tests and end-to-end tests that boot the real board (with the restore kernel too).
## The set-up runs as a parallel make (as many jobs as cores): the restore kernels compile
## while the restorers and the arm64 device binary do, once the host tool is built.
## Everything is built in the `ci` profile (Cargo.toml: release without cross-crate LTO, the
## tool in target/x86_64-unknown-linux-gnu/ci/), which halves the build of the forty test
## binaries; `make setup`, `demo` and `bench` use the release build.
TEST_BUILD := cargo build --profile ci --workspace --all-targets
test:
	$(MAKE) -j$$(nproc) HOST_BUILD="$(TEST_BUILD)" SNAPBOOT=target/x86_64-unknown-linux-gnu/ci/snapboot setup restore-kernel
	cargo test --profile ci --workspace

## The long repetitions `make test` leaves out (about 30 minutes on 2 cores): the restorer
## restores one `app` image SOAK_RESTORER_ROUNDS times in a row, each restore checked (the
## end-to-end test does 3); the EFI restorer restores one `debian` image on the UEFI PC
## SOAK_EFI_RESTORER_ROUNDS times, each with an EFI variable written; the arm64 restorer
## restores one arm64 `app` image SOAK_ARM64_RESTORER_ROUNDS times; then `bench endurance`
## restores one image 100 times, re-capturing it every 10 (docs/measuring.md, "Soak").
SOAK_RESTORER_ROUNDS ?= 50
SOAK_EFI_RESTORER_ROUNDS ?= 20
SOAK_ARM64_RESTORER_ROUNDS ?= 20
soak: setup restore-kernel
	SNAPBOOT_RESTORER_ROUNDS=$(SOAK_RESTORER_ROUNDS) cargo test --release -p snapboot --test e2e -- \
	  --exact restorer::restorer_restores_the_app_repeatedly_with_state_clock_and_rng
	SNAPBOOT_EFI_RESTORER_ROUNDS=$(SOAK_EFI_RESTORER_ROUNDS) cargo test --release -p snapboot --test e2e -- \
	  --ignored --exact debian_uefi::efi_restorer_restores_debian_repeatedly_with_efi_variables
	SNAPBOOT_ARM64_RESTORER_ROUNDS=$(SOAK_ARM64_RESTORER_ROUNDS) cargo test --release -p snapboot --test e2e -- \
	  --exact arm64::arm64_restorer_restores_the_app_repeatedly_with_state_clock_and_rng
	$(SNAPBOOT) bench endurance --workload app --restores 100 --recapture-every 10 \
	  --json $(SNAPBOOT_HOME)/endurance.json

## The unit and property tests alone, no QEMU and no browser: every test target but the few
## scripts/unit-tests.py names (it prints them), in the release profile `make test` builds.
unit:
	python3 scripts/unit-tests.py

## No import circle between the modules of any crate (Python 3, no build needed).
imports:
	python3 scripts/import-cycles.py

# `bench endurance` (100 restores of one image, ~15-30 min) is not here: `make soak` runs it.
bench: setup restore-kernel
	$(SNAPBOOT) bench compare --workload shell --runs 5 --json $(SNAPBOOT_HOME)/compare-shell.json
	$(SNAPBOOT) bench compare --workload app --runs 3 --json $(SNAPBOOT_HOME)/compare-app.json
	$(SNAPBOOT) bench compare --arch arm64 --workload shell --runs 5 --json $(SNAPBOOT_HOME)/compare-arm64-shell.json
	$(SNAPBOOT) bench compare --arch arm64 --workload app --runs 3 --json $(SNAPBOOT_HOME)/compare-arm64-app.json

clean:
	rm -rf $(SNAPBOOT_HOME) target
