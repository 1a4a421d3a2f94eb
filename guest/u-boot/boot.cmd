# snapboot's U-Boot boot script, /boot.scr on the boot partition:
#   mkimage -A arm64 -O linux -T script -C none -d boot.cmd boot.scr
# U-Boot's distro boot runs it (there is no /extlinux/extlinux.conf for it to find first).
#
# Normal boots take the extlinux.conf default (or the label U-Boot's environment names in
# pxe_label_override): the store words, which restore when there is an image. A capture is
# asked for from Linux (`snapboot capture --next-boot`) by writing snapboot_once=capture in
# U-Boot's environment format (CRC32, NUL-separated variables) to the boot disk's partition
# 4 ("ubootenv"). This script clears that request (zeroes its first block, so its CRC no
# longer matches) BEFORE it boots the capture entry: a capture that crashes is not retried
# on every boot.
setenv snapboot_once
if part start ${devtype} ${devnum} 4 snapboot_envblk; then
  if ${devtype} read ${kernel_addr_r} ${snapboot_envblk} 0x200; then
    env import -c ${kernel_addr_r} 0x40000 snapboot_once
  fi
fi
if test "${snapboot_once}" = "capture"; then
  echo "snapboot: a capture was asked for: clearing the request, booting the capture entry once"
  mw.b ${kernel_addr_r} 0 0x200
  if ${devtype} write ${kernel_addr_r} ${snapboot_envblk} 1; then
    setenv snapboot_once
    setenv pxe_label_override capture
  else
    echo "snapboot: cannot clear the capture request: booting normally"
  fi
fi
sysboot ${devtype} ${devnum}:${distro_bootpart} any ${pxefile_addr_r} /snapboot/extlinux.conf
