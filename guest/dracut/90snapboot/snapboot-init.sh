#!/bin/sh
# snapboot (dracut pre-udev hook): marks the start of the initramfs on the console (the boot
# timeline's `init` milestone), then restores a snapshot image before udev starts: it loads
# the store's drivers (/etc/snapboot/store-modules) and runs `snapboot resume --before-udev`,
# which returns only when no image is restored. Status 3 means the store is not there yet
# (its driver comes with udev) or the boot asks for the kernel's own resume: the pre-mount
# hook then runs the resume after udev. Any other status means it is done, and the boot goes
# on cold, untouched. The binary reads the settings itself (the kernel command line over
# /etc/snapboot/snapboot.conf), so a store named only in the file restores before udev too.
# The markers go to the console (SNAPBOOT_MARKERS=console) and the kernel log: with systemd
# in the initramfs this hook runs as dracut-pre-udev.service, whose output goes to the
# journal only. Sourced by dracut's init (or dracut-pre-udev).
echo "snapboot: @init" > /dev/console

if [ -x /bin/snapboot ]; then
	if [ -e /etc/snapboot/store-modules ]; then
		while read -r snapboot_m; do
			[ -n "$snapboot_m" ] && modprobe -q "$snapboot_m"
		done < /etc/snapboot/store-modules
	fi
	mkdir -p /run/snapboot
	SNAPBOOT_MARKERS=console /bin/snapboot resume --from-cmdline --before-udev
	[ $? -eq 3 ] || : > /run/snapboot/resume-done
	unset snapboot_m
fi
