#!/bin/sh
# snapboot (dracut pre-mount hook): restores a snapshot image before the root filesystem is
# mounted, when the pre-udev hook could not do it before udev (see there). It returns only
# when no image is restored; the boot then goes on cold, untouched. Markers as in the
# pre-udev hook. Sourced by dracut's init (or dracut-pre-mount).
if [ -x /bin/snapboot ] && [ ! -e /run/snapboot/resume-done ]; then
	SNAPBOOT_MARKERS=console /bin/snapboot resume --from-cmdline
fi
