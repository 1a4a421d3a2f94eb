#!/bin/sh
# snapboot (dracut pre-udev hook): marks the start of the initramfs on the console (the boot
# timeline's `init` milestone), then restores a snapshot image before udev starts: it loads
# the store's drivers (/etc/snapboot/store-modules) and runs `snapboot resume --before-udev`,
# which returns only when no image is restored. Status 3 means the store is not there yet
# (its driver comes with udev) or the boot asks for the kernel's own resume: the pre-mount
# hook then runs the resume after udev. Any other status means it is done, and the boot goes
# on cold, untouched. Sourced by dracut's init.
echo "snapboot: @init" > /dev/console

if [ -x /bin/snapboot ]; then
	read -r snapboot_cmdline < /proc/cmdline
	case " $snapboot_cmdline " in
	*" snapboot.store="* | *" snapboot.kresume="*)
		if [ -e /etc/snapboot/store-modules ]; then
			while read -r snapboot_m; do
				[ -n "$snapboot_m" ] && modprobe -q "$snapboot_m"
			done < /etc/snapboot/store-modules
		fi
		mkdir -p /run/snapboot
		/bin/snapboot resume --from-cmdline --before-udev
		[ $? -eq 3 ] || : > /run/snapboot/resume-done
		;;
	esac
	unset snapboot_cmdline snapboot_m
fi
