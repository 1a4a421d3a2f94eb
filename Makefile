# snapboot: the two commands a newcomer needs are `make demo` and `make test`.
SNAPBOOT := target/x86_64-unknown-linux-gnu/release/snapboot
export SNAPBOOT_HOME ?= $(CURDIR)/.snapboot

APT_PACKAGES := qemu-system-x86 busybox-static cpio squashfs-tools python3 xz-utils

.PHONY: setup deps build kernel demo test bench clean

## Install what the board needs (Debian packages), fetch the guest kernel, build snapboot.
setup: deps build kernel

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=$$( [ $$(id -u) -eq 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

build:
	cargo build --release -p snapboot

kernel: build
	$(SNAPBOOT) board fetch-kernel

## Cold-boot the `app` workload on the board and print its power-on timeline.
demo: setup
	$(SNAPBOOT) board build --workload app
	$(SNAPBOOT) board run app --probe

## Unit tests and end-to-end tests that boot the real board.
test: setup
	cargo test --release --workspace

bench: setup
	$(SNAPBOOT) bench cold --workload shell --runs 5
	$(SNAPBOOT) bench cold --workload app --runs 3

clean:
	rm -rf $(SNAPBOOT_HOME) target
