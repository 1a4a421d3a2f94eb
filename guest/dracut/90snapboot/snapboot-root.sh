#!/bin/sh
# snapboot (dracut pre-pivot hook): marks the root filesystem as mounted on the console (the
# boot timeline's `root-mounted` milestone): a cold boot, or a boot whose image was refused.
# Sourced by dracut's init.
echo "snapboot: @root-mounted" > /dev/console
