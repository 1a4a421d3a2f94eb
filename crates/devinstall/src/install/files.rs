//! The files snapboot puts into a system, each with the path the Debian package ships it at
//! and the path `snapboot install` writes on a system without the package (the paths left
//! to the administrator: /usr/local, /etc).
//!
//! ```text
//!   package (scripts: `snapboot board deb`)            `snapboot install`
//!   /usr/sbin/snapboot                                 /usr/local/sbin/snapboot
//!   /usr/share/initramfs-tools/hooks/snapboot          /etc/initramfs-tools/hooks/snapboot
//!   /usr/share/initramfs-tools/scripts/S/snapboot      /etc/initramfs-tools/scripts/S/snapboot
//!   /usr/lib/dracut/modules.d/90snapboot/*             the same (dracut reads no other place)
//!   /usr/lib/systemd/system/snapboot-*                 /etc/systemd/system/snapboot-*
//!   /etc/kernel/postinst.d/zz-snapboot                 the same
//!   /etc/initramfs/post-update.d/snapboot              the same
//!   /etc/grub.d/42_snapboot                            the same, where /etc/grub.d is
//!   /etc/snapboot/snapboot.conf                        the same (kept when it is there)
//! ```
//!
//! The initramfs-tools files go only where initramfs-tools makes the initramfs and the
//! dracut ones only where dracut does; the package ships both.

use std::borrow::Cow;

/// Where the package puts the binary (the units and the hooks name it).
pub const BINARY_PATH: &str = "usr/sbin/snapboot";
/// Where `snapboot install` puts the binary.
pub const ADMIN_BINARY_PATH: &str = "usr/local/sbin/snapboot";

/// What makes the system's initramfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generator {
    /// Debian's initramfs-tools (`update-initramfs`).
    InitramfsTools,
    /// dracut (`dracut -f`).
    Dracut,
}

impl Generator {
    /// The command that rebuilds the running kernel's initramfs.
    pub fn rebuild_command(self) -> &'static [&'static str] {
        match self {
            Generator::InitramfsTools => &["update-initramfs", "-u"],
            Generator::Dracut => &["dracut", "-f"],
        }
    }

    /// The command that rebuilds the initramfs of the kernel `release`.
    pub fn rebuild_release_command(self, release: &str) -> Vec<String> {
        let words: &[&str] = match self {
            Generator::InitramfsTools => &["update-initramfs", "-u", "-k", release],
            Generator::Dracut => &["dracut", "-f", "--kver", release],
        };
        words.iter().map(|w| w.to_string()).collect()
    }
}

/// Which part of the system a file belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Read by one initramfs generator only.
    Initramfs(Generator),
    /// A systemd unit (names the binary by its path).
    Unit,
    /// A kernel or initramfs update hook.
    UpdateHook,
    /// The configuration: never replaced once it is there.
    Config,
    /// GRUB's capture entry: read by grub-mkconfig (`update-grub`), so `snapboot install`
    /// writes it only where GRUB is (/etc/grub.d). GRUB carries no other setting: the store
    /// and the policies are in the config file, which the initramfs has.
    Grub,
}

/// One file snapboot ships.
#[derive(Debug, Clone, Copy)]
pub struct Shipped {
    /// Its path in the package, relative to `/`.
    pub package: &'static str,
    /// Its path when `snapboot install` writes it, relative to `/`.
    pub admin: &'static str,
    /// Its text as the package ships it.
    pub text: &'static str,
    /// Its permission bits.
    pub mode: u32,
    /// What it belongs to.
    pub part: Part,
}

impl Shipped {
    /// The text `snapboot install` writes: units name the binary where it puts it.
    pub fn admin_text(&self) -> Cow<'static, str> {
        if self.part == Part::Unit {
            let from = format!("/{BINARY_PATH}");
            let to = format!("/{ADMIN_BINARY_PATH}");
            Cow::Owned(self.text.replace(&from, &to))
        } else {
            Cow::Borrowed(self.text)
        }
    }

    /// Whether the package marks it as a configuration file (dpkg keeps a local change).
    pub fn conffile(&self) -> bool {
        self.package.starts_with("etc/")
    }
}

/// Name of the capture unit.
pub const CAPTURE_UNIT_NAME: &str = "snapboot-capture.service";
/// Name of the target started after a restore.
pub const RESTORED_TARGET_NAME: &str = "snapboot-restored.target";
/// Name of the unit that confirms a restore once `boot-complete.target` is reached again.
pub const CONFIRM_UNIT_NAME: &str = "snapboot-confirm.service";
/// Name of the target started at the ready point of every boot that was not restored.
pub const COLD_TARGET_NAME: &str = "snapboot-cold.target";
/// Name of the target started at the ready point of a boot whose restore was refused.
pub const FALLBACK_TARGET_NAME: &str = "snapboot-fallback.target";

/// The capture unit, as shipped.
pub const CAPTURE_UNIT: &str = include_str!("../../../../guest/systemd/snapboot-capture.service");
/// The target started after every restore.
pub const RESTORED_TARGET: &str =
    include_str!("../../../../guest/systemd/snapboot-restored.target");
/// The unit that confirms a restore at `boot-complete.target`.
pub const CONFIRM_UNIT: &str = include_str!("../../../../guest/systemd/snapboot-confirm.service");
/// The target started on every boot that was not restored.
pub const COLD_TARGET: &str = include_str!("../../../../guest/systemd/snapboot-cold.target");
/// The target started on a boot whose restore was refused.
pub const FALLBACK_TARGET: &str =
    include_str!("../../../../guest/systemd/snapboot-fallback.target");
/// The kernel package's post-install hook: marks the images stale.
pub const KERNEL_POSTINST: &str = include_str!("../../../../guest/update-hooks/kernel-postinst");
/// update-initramfs's post-update hook: marks the images stale.
pub const INITRAMFS_POST_UPDATE: &str =
    include_str!("../../../../guest/update-hooks/initramfs-post-update");
/// The initramfs-tools hook.
pub const HOOK: &str = include_str!("../../../../guest/initramfs-tools/hooks/snapboot");
/// The initramfs-tools boot script that resumes after udev, when the early one could not.
pub const BOOT_SCRIPT: &str =
    include_str!("../../../../guest/initramfs-tools/scripts/local-premount/snapboot");
/// The initramfs-tools script that prints the `init` marker and resumes before udev.
pub const INIT_MARKER: &str =
    include_str!("../../../../guest/initramfs-tools/scripts/init-top/snapboot");
/// The initramfs-tools script that prints the `root-mounted` marker.
pub const ROOT_MARKER: &str =
    include_str!("../../../../guest/initramfs-tools/scripts/local-bottom/snapboot");
/// The dracut module's setup (what the initramfs-tools hook does).
pub const DRACUT_SETUP: &str = include_str!("../../../../guest/dracut/90snapboot/module-setup.sh");
/// The dracut pre-udev hook (the init-top script's work).
pub const DRACUT_INIT: &str = include_str!("../../../../guest/dracut/90snapboot/snapboot-init.sh");
/// The dracut pre-mount hook (the local-premount script's work).
pub const DRACUT_RESUME: &str =
    include_str!("../../../../guest/dracut/90snapboot/snapboot-resume.sh");
/// The dracut pre-pivot hook (the local-bottom script's work).
pub const DRACUT_ROOT: &str = include_str!("../../../../guest/dracut/90snapboot/snapboot-root.sh");
/// GRUB's capture entry (`snapboot-capture`), for grub-mkconfig.
pub const GRUB_SNIPPET: &str = include_str!("../../../../guest/grub/42_snapboot");
/// The default configuration (every setting commented out).
pub const DEFAULT_CONFIG: &str = include_str!("../../../../guest/snapboot.conf");

/// Where the configuration is.
pub const CONFIG_PATH: &str = "etc/snapboot/snapboot.conf";

const ITOOLS: Part = Part::Initramfs(Generator::InitramfsTools);
const DRACUT: Part = Part::Initramfs(Generator::Dracut);

/// Every file but the binary, in the order they are written.
pub const SHIPPED: &[Shipped] = &[
    Shipped {
        package: "usr/share/initramfs-tools/hooks/snapboot",
        admin: "etc/initramfs-tools/hooks/snapboot",
        text: HOOK,
        mode: 0o755,
        part: ITOOLS,
    },
    Shipped {
        package: "usr/share/initramfs-tools/scripts/init-top/snapboot",
        admin: "etc/initramfs-tools/scripts/init-top/snapboot",
        text: INIT_MARKER,
        mode: 0o755,
        part: ITOOLS,
    },
    Shipped {
        package: "usr/share/initramfs-tools/scripts/local-premount/snapboot",
        admin: "etc/initramfs-tools/scripts/local-premount/snapboot",
        text: BOOT_SCRIPT,
        mode: 0o755,
        part: ITOOLS,
    },
    Shipped {
        package: "usr/share/initramfs-tools/scripts/local-bottom/snapboot",
        admin: "etc/initramfs-tools/scripts/local-bottom/snapboot",
        text: ROOT_MARKER,
        mode: 0o755,
        part: ITOOLS,
    },
    Shipped {
        package: "usr/lib/dracut/modules.d/90snapboot/module-setup.sh",
        admin: "usr/lib/dracut/modules.d/90snapboot/module-setup.sh",
        text: DRACUT_SETUP,
        mode: 0o755,
        part: DRACUT,
    },
    Shipped {
        package: "usr/lib/dracut/modules.d/90snapboot/snapboot-init.sh",
        admin: "usr/lib/dracut/modules.d/90snapboot/snapboot-init.sh",
        text: DRACUT_INIT,
        mode: 0o755,
        part: DRACUT,
    },
    Shipped {
        package: "usr/lib/dracut/modules.d/90snapboot/snapboot-resume.sh",
        admin: "usr/lib/dracut/modules.d/90snapboot/snapboot-resume.sh",
        text: DRACUT_RESUME,
        mode: 0o755,
        part: DRACUT,
    },
    Shipped {
        package: "usr/lib/dracut/modules.d/90snapboot/snapboot-root.sh",
        admin: "usr/lib/dracut/modules.d/90snapboot/snapboot-root.sh",
        text: DRACUT_ROOT,
        mode: 0o755,
        part: DRACUT,
    },
    Shipped {
        package: "usr/lib/systemd/system/snapboot-capture.service",
        admin: "etc/systemd/system/snapboot-capture.service",
        text: CAPTURE_UNIT,
        mode: 0o644,
        part: Part::Unit,
    },
    Shipped {
        package: "usr/lib/systemd/system/snapboot-restored.target",
        admin: "etc/systemd/system/snapboot-restored.target",
        text: RESTORED_TARGET,
        mode: 0o644,
        part: Part::Unit,
    },
    Shipped {
        package: "usr/lib/systemd/system/snapboot-confirm.service",
        admin: "etc/systemd/system/snapboot-confirm.service",
        text: CONFIRM_UNIT,
        mode: 0o644,
        part: Part::Unit,
    },
    Shipped {
        package: "usr/lib/systemd/system/snapboot-cold.target",
        admin: "etc/systemd/system/snapboot-cold.target",
        text: COLD_TARGET,
        mode: 0o644,
        part: Part::Unit,
    },
    Shipped {
        package: "usr/lib/systemd/system/snapboot-fallback.target",
        admin: "etc/systemd/system/snapboot-fallback.target",
        text: FALLBACK_TARGET,
        mode: 0o644,
        part: Part::Unit,
    },
    Shipped {
        package: "etc/kernel/postinst.d/zz-snapboot",
        admin: "etc/kernel/postinst.d/zz-snapboot",
        text: KERNEL_POSTINST,
        mode: 0o755,
        part: Part::UpdateHook,
    },
    Shipped {
        package: "etc/initramfs/post-update.d/snapboot",
        admin: "etc/initramfs/post-update.d/snapboot",
        text: INITRAMFS_POST_UPDATE,
        mode: 0o755,
        part: Part::UpdateHook,
    },
    Shipped {
        package: "etc/grub.d/42_snapboot",
        admin: "etc/grub.d/42_snapboot",
        text: GRUB_SNIPPET,
        mode: 0o755,
        part: Part::Grub,
    },
    Shipped {
        package: CONFIG_PATH,
        admin: CONFIG_PATH,
        text: DEFAULT_CONFIG,
        mode: 0o644,
        part: Part::Config,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_paths_are_the_administrators_and_units_name_the_admin_binary() {
        for f in SHIPPED {
            let ok = f.admin.starts_with("etc/")
                || f.admin.starts_with("usr/local/")
                || f.part == DRACUT;
            assert!(ok, "{} is not an administrator's path", f.admin);
            if f.part == Part::Unit {
                assert!(
                    !f.admin_text().contains("/usr/sbin/snapboot"),
                    "{}",
                    f.admin
                );
            }
        }
        let capture = SHIPPED.iter().find(|f| f.text == CAPTURE_UNIT).unwrap();
        assert!(capture
            .admin_text()
            .contains("ExecStart=/usr/local/sbin/snapboot ready"));
    }

    #[test]
    fn dracut_hooks_print_the_markers_initramfs_tools_prints() {
        let init = boottrace::Marker::Init.line(None);
        let root = boottrace::Marker::RootMounted.line(None);
        assert!(INIT_MARKER.contains(&init) && DRACUT_INIT.contains(&init));
        assert!(ROOT_MARKER.contains(&root) && DRACUT_ROOT.contains(&root));
        assert!(DRACUT_INIT.contains("/bin/snapboot resume --from-cmdline --before-udev"));
        assert!(DRACUT_RESUME.contains("/bin/snapboot resume --from-cmdline"));
        for hook in ["snapboot-init.sh", "snapboot-resume.sh", "snapboot-root.sh"] {
            assert!(
                DRACUT_SETUP.contains(hook),
                "module-setup.sh installs {hook}"
            );
        }
    }
}
