# snapboot's U-Boot boot script, /boot.scr on the boot partition:
#   mkimage -A arm64 -O linux -T script -C none -d boot.cmd boot.scr
# U-Boot's distro boot runs it (there is no /extlinux/extlinux.conf for it to find first).
#
# Normal boots take the extlinux.conf default (or the label U-Boot's environment names in
# pxe_label_override): the store words, which restore when there is an image. A capture is
# asked for from Linux (`snapboot capture --next-boot`) by writing snapboot_once=capture in
# U-Boot's environment format (CRC32, NUL-separated variables) to the boot disk's partition
# 4 ("ubootenv"). This script clears that request (writes the area back as an environment
# with no variables) BEFORE it boots the capture entry: a capture that crashes is not
# retried on every boot. With no request the area is such an empty environment (the board
# writes one when it builds the disk), which imports in silence; a damaged area makes
# U-Boot say "bad CRC, import failed" and the boot goes on normally.
setenv snapboot_once
if part start ${devtype} ${devnum} 4 snapboot_envblk; then
  if ${devtype} read ${kernel_addr_r} ${snapboot_envblk} 0x200; then
    env import -c ${kernel_addr_r} 0x40000 snapboot_once
  fi
fi
if test "${snapboot_once}" = "capture"; then
  echo "snapboot: a capture was asked for: clearing the request, booting the capture entry once"
  setenv snapboot_once
  setenv snapboot_cleared
  if env export -c -s 0x40000 ${kernel_addr_r} snapboot_once; then
    if ${devtype} write ${kernel_addr_r} ${snapboot_envblk} 0x200; then
      setenv snapboot_cleared yes
    fi
  fi
  if test "${snapboot_cleared}" = "yes"; then
    setenv pxe_label_override capture
  else
    echo "snapboot: cannot clear the capture request: booting normally"
  fi
fi
# The restorer, when the environment asks for it (snapboot_restorer=yes): an EFI application
# that restores the store's image before any kernel, with the kernel's command line as its
# load options (bootefi passes bootargs). It returns only when it refused the image (the
# reason is on the console and in the store's boot log): the boot goes on as below.
if test "${snapboot_restorer}" = "yes"; then
  if load ${devtype} ${devnum}:${distro_bootpart} ${kernel_addr_r} /snapboot/restorer.efi; then
    setenv bootargs "${snapboot_cmdline}"
    bootefi ${kernel_addr_r} ${fdtcontroladdr}
    setenv bootargs
    echo "snapboot: the restorer did not restore: booting the stock kernel"
  fi
fi
sysboot ${devtype} ${devnum}:${distro_bootpart} any ${pxefile_addr_r} /snapboot/extlinux.conf
