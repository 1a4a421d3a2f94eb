//! The Debian package's life in a Debian root, no boot (issue 45): installed with apt into
//! the board's cached bookworm root (initramfs-tools), with the fetched kernel put where its
//! package puts it; then the updates a device goes through, unconfigured, with a store
//! named but absent, after `apt remove` and after `apt purge`. Needs root (chroot), as
//! the Debian workload's build does. 28-64 s on 2 cores shared with other builds (the base
//! tarball cached; 25 s of steps, the rest unpacking and removing the root, which a busy
//! disk slows), each step's time on stderr.

use crate::common::{device_binary_built, home, kernel_fetched, run, snapboot};
use guestarch::Arch;
use std::path::Path;
use std::process::Command;

/// A line a user would take for a failure: the shell's `not found`, apt's `E:`/`W:`, an
/// error or a failure.
fn error_lines(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| {
            let lower = l.to_lowercase();
            lower.contains("not found")
                || lower.contains("error")
                || lower.contains("failed")
                || l.starts_with("E:")
                || l.starts_with("W:")
        })
        .collect()
}

/// `words` run in `root` as root's shell runs them, stdout and stderr together; asserts
/// it succeeded and returns the output.
fn chroot(root: &Path, words: &str) -> String {
    let mut c = Command::new("chroot");
    c.arg(root)
        .args(["/bin/sh", "-c", &format!("exec 2>&1; {words}")])
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("DEBIAN_FRONTEND", "noninteractive");
    let started = std::time::Instant::now();
    let (out, so, se) = run(c);
    eprintln!("{:5.1} s  {words}", started.elapsed().as_secs_f64());
    assert!(
        out.status.success(),
        "chroot {words}: {:?}\n{so}{se}",
        out.status
    );
    so
}

/// A kernel update as the kernel package runs it: its postinst.d hooks (initramfs-tools'
/// runs update-initramfs, whose post-update hooks run too), for `release`.
fn kernel_update(root: &Path, release: &str) -> String {
    chroot(
        root,
        &format!(
            "DEB_MAINT_PARAMS=configure run-parts --arg={release} \
             --arg=/boot/vmlinuz-{release} /etc/kernel/postinst.d"
        ),
    )
}

/// The kernel as its package puts it into the root: /boot's files and the module index,
/// no module files (the initramfs takes only the listed modules, and the list is empty),
/// and its first initramfs, made before snapboot is there.
fn install_kernel(root: &Path, k: &hostkernel::KernelInfo) {
    let boot = root.join("boot");
    let copy = |from: &Path, to: &Path| {
        std::fs::copy(from, to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    };
    copy(&k.bzimage, &boot.join(format!("vmlinuz-{}", k.release)));
    let config = k
        .config
        .as_ref()
        .expect("the kernel's config (mkinitramfs reads it)");
    copy(config, &boot.join(format!("config-{}", k.release)));
    let modules = root.join("lib/modules").join(&k.release);
    std::fs::create_dir_all(&modules).unwrap();
    for f in [
        "modules.order",
        "modules.builtin",
        "modules.builtin.modinfo",
    ] {
        copy(&k.modules_dir.join(f), &modules.join(f));
    }
    std::fs::write(
        root.join("etc/initramfs-tools/conf.d/package-test.conf"),
        "MODULES=list\n",
    )
    .unwrap();
    chroot(root, &format!("depmod -a {}", k.release));
    chroot(root, &format!("update-initramfs -c -k {}", k.release));
}

/// apt: install, remove and purge say nothing wrong; an unconfigured package says its next
/// step once and nothing at updates; a named but absent store is one line per kernel
/// update (marked once); after `apt remove` the hooks that stay (conffiles) and the GRUB
/// script do nothing; `apt purge` takes them and /etc/snapboot away.
#[test]
fn package_installs_updates_removes_and_purges_without_an_error_line() {
    let started = std::time::Instant::now();
    device_binary_built();
    kernel_fetched("x86_64", "kernel.json");
    eprintln!(
        "{:5.1} s  the device binary built, the kernel fetched",
        started.elapsed().as_secs_f64()
    );
    let k = bundle::home::fetched_kernel(Arch::X86_64).unwrap();
    // The UEFI PC's root (the `debian` bundle's, which other tests build too): one
    // mmdebstrap run fewer than a root of its own.
    let tar = bundle::debian::base_tarball(
        &bundle::home::debian_cache(),
        &bundle::debian::root_packages(
            devinstall::install::Generator::InitramfsTools,
            Arch::X86_64,
        ),
        Arch::X86_64,
    )
    .unwrap();
    eprintln!(
        "{:5.1} s  the base root found",
        started.elapsed().as_secs_f64()
    );
    let dir = tempfile::tempdir_in(home()).unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let mut c = Command::new("tar");
    c.args(["--numeric-owner", "-xpf"])
        .arg(&tar)
        .arg("-C")
        .arg(&root);
    let started = std::time::Instant::now();
    let (out, so, se) = run(c);
    eprintln!("{:5.1} s  tar -x", started.elapsed().as_secs_f64());
    assert!(out.status.success(), "tar: {so}{se}");
    install_kernel(&root, &k);

    let started = std::time::Instant::now();
    let mut c = snapboot();
    c.args(["board", "deb", "--out"]).arg(root.join("tmp"));
    let (out, so, se) = run(c);
    assert!(out.status.success(), "board deb: {so}{se}");
    eprintln!("{:5.1} s  board deb", started.elapsed().as_secs_f64());
    let deb = bundle::debpkg::file_name(Arch::X86_64);
    // Use-Pty=0: dpkg's progress pseudo-terminal needs a /dev/pts the chroot has not.
    let apt = "apt-get -y -q -o Dpkg::Use-Pty=0";

    let installed = chroot(&root, &format!("{apt} install /tmp/{deb}"));
    assert_eq!(error_lines(&installed), Vec::<&str>::new(), "{installed}");
    let next = "/usr/share/doc/snapboot/README.Debian";
    assert_eq!(installed.matches(next).count(), 1, "{installed}");
    assert!(
        installed.contains("Processing triggers for initramfs-tools"),
        "{installed}"
    );

    // Unconfigured: no store named, so the updates say nothing of snapboot.
    let updates = chroot(&root, "update-initramfs -u -k all") + &kernel_update(&root, &k.release);
    assert!(!updates.contains("snapboot"), "{updates}");
    assert_eq!(error_lines(&updates), Vec::<&str>::new(), "{updates}");

    // A store named but absent: the kernel update's one marking (the post-update hook of
    // the update-initramfs it runs) fails, in one line; the kernel hook leaves it to that.
    let conf = root.join("etc/snapboot/snapboot.conf");
    let shipped = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(&conf, format!("{shipped}store = PARTLABEL=absent-store\n")).unwrap();
    let named = kernel_update(&root, &k.release);
    let lines: Vec<&str> = named.lines().filter(|l| l.contains("snapboot")).collect();
    assert_eq!(lines.len(), 1, "{named}");
    // The reason: the store is not found (this chroot has no /sys: an image build).
    assert!(
        lines[0].starts_with("snapboot: images not marked stale: ")
            && lines[0].contains("PARTLABEL=absent-store"),
        "{named}"
    );
    assert!(!lines[0].contains("see above"), "{named}");
    std::fs::write(&conf, &shipped).unwrap();

    // Removed, not purged: the conffiles stay and do nothing, whatever the config says.
    std::fs::write(&conf, format!("{shipped}store = PARTLABEL=absent-store\n")).unwrap();
    let removed = chroot(&root, &format!("{apt} remove snapboot"));
    assert_eq!(error_lines(&removed), Vec::<&str>::new(), "{removed}");
    for hook in [
        "etc/kernel/postinst.d/zz-snapboot",
        "etc/initramfs/post-update.d/snapboot",
        "etc/grub.d/42_snapboot",
    ] {
        assert!(root.join(hook).is_file(), "{hook} is a conffile: kept");
    }
    assert!(!root.join("usr/sbin/snapboot").exists());
    let after = chroot(&root, "update-initramfs -u -k all") + &kernel_update(&root, &k.release);
    assert!(!after.contains("snapboot"), "{after}");
    assert_eq!(error_lines(&after), Vec::<&str>::new(), "{after}");
    let grub = chroot(&root, "/etc/grub.d/42_snapboot");
    assert_eq!(grub, "", "no capture entry without snapboot");

    let purged = chroot(&root, &format!("{apt} purge snapboot"));
    assert_eq!(error_lines(&purged), Vec::<&str>::new(), "{purged}");
    assert!(!root.join("etc/snapboot").exists(), "{purged}");
    assert!(!root.join("etc/kernel/postinst.d/zz-snapboot").exists());
    assert!(!root.join("etc/grub.d/42_snapboot").exists());
    let started = std::time::Instant::now();
    drop(dir);
    eprintln!(
        "{:5.1} s  the root removed",
        started.elapsed().as_secs_f64()
    );
}
