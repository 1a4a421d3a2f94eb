#!/bin/bash
# snapboot's dracut module: what the initramfs-tools hook and scripts do, for systems whose
# initramfs dracut makes. It puts the static snapboot binary into the initramfs with the
# records the hook copies (image-signing key, image kernel, the store's module list), the
# store's drivers, and three hook scripts:
#   pre-udev   snapboot-init.sh     @init marker; resume before udev (initramfs-tools: init-top)
#   pre-mount  snapboot-resume.sh   resume after udev when the early try said so (local-premount)
#   pre-pivot  snapboot-root.sh     @root-mounted marker (local-bottom)
# The markers are the ones the initramfs-tools scripts print, so the boot timeline is the same.

snapboot_binary() {
	for b in /usr/local/sbin/snapboot /usr/sbin/snapboot; do
		if [ -x "$dracutsysrootdir$b" ]; then
			echo "$b"
			return 0
		fi
	done
	return 1
}

check() {
	# Included whenever the binary is there, as the initramfs-tools hook is.
	snapboot_binary >/dev/null || return 1
	return 0
}

depends() {
	return 0
}

installkernel() {
	if [ -e "$dracutsysrootdir/etc/snapboot/store-modules" ]; then
		# shellcheck disable=SC2046
		hostonly='' instmods $(grep -v '^#' "$dracutsysrootdir/etc/snapboot/store-modules")
	fi
}

install() {
	local bin f
	bin=$(snapboot_binary) || return 1
	inst_simple "$bin" /bin/snapboot
	# The config file (snapboot.conf(5)): resume reads the store and the policies from it
	# (a store named only there restores too). One that does not parse is copied all the
	# same (the boot then says why it restores nothing), and named now.
	if [ -e "$dracutsysrootdir/etc/snapboot/snapboot.conf" ] && [ -z "$dracutsysrootdir" ] &&
		! "$bin" config check --cmdline "" /etc/snapboot/snapboot.conf >/dev/null; then
		dwarn "snapboot: /etc/snapboot/snapboot.conf does not parse (above): the device will restore nothing until it does"
	fi
	# device.key: the secret of `encrypt = key` (dracut writes the initramfs readable by
	# root only).
	for f in /etc/snapboot/snapboot.conf /etc/snapboot/image.pub /etc/snapboot/image-kernel \
		/etc/snapboot/store-modules /etc/snapboot/device.key; do
		[ -e "$dracutsysrootdir$f" ] && inst_simple "$f"
	done
	inst_hook pre-udev 10 "$moddir/snapboot-init.sh"
	inst_hook pre-mount 10 "$moddir/snapboot-resume.sh"
	inst_hook pre-pivot 90 "$moddir/snapboot-root.sh"
}
