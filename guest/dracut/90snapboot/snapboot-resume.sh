#!/bin/sh
# snapboot (dracut pre-mount hook): restores a snapshot image before the root filesystem is
# mounted, when the pre-udev hook could not do it before udev (see there). It returns only
# when no image is restored; the boot then goes on cold, untouched. Sourced by dracut's init.
if [ -x /bin/snapboot ] && [ ! -e /run/snapboot/resume-done ]; then
	/bin/snapboot resume --from-cmdline
fi
