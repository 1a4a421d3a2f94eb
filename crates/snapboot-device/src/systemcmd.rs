//! The device's system commands: `snapboot memory` (deferred memory), `snapboot profile`
//! (a lazy image's working set) and `snapboot install` (snapboot into a Debian-style system).

use anyhow::{Context, Result};
use boottrace::Marker;
use clap::Subcommand;
use std::process::ExitCode;

/// `snapboot install`.
#[derive(clap::Args, Debug)]
pub struct InstallArgs {
    /// The system's root: `/` on the device, or a root tree being built.
    #[arg(long, default_value = "/")]
    pub root: std::path::PathBuf,
    /// The application's unit: the capture waits until it is ready (After= and Requires=;
    /// with Type=notify that is its READY=1). Repeatable.
    #[arg(long, value_name = "UNIT")]
    pub after: Vec<String>,
    /// The store (`PARTUUID=…`, `PARTLABEL=…`, `LABEL=…` or `/dev/mmcblk0p3`; default, on
    /// the running system without --store-module: the configured one): its device's
    /// drivers' modules, read from /sys, are loaded by the initramfs before udev, so the
    /// image is restored before udev starts.
    #[arg(long, value_name = "STORE")]
    pub store: Option<bootparams::StoreAddress>,
    /// A module the store's device needs (repeatable; for a root built elsewhere, where
    /// --store cannot look at the device).
    #[arg(long, value_name = "MODULE")]
    pub store_module: Vec<String>,
    /// Print exactly the paths the install would write (and remove), and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Remove what an earlier `snapboot install` wrote (/etc/snapboot/installed.manifest
    /// lists it); files changed since are kept, with a warning.
    #[arg(long, conflicts_with_all = ["after", "store", "store_module"])]
    pub uninstall: bool,
    /// Do not rebuild the initramfs afterwards (`update-initramfs -u` or `dracut -f`; never
    /// run with --root, which is not the running system).
    #[arg(long)]
    pub no_initramfs: bool,
}

/// `snapboot memory`.
#[derive(Subcommand, Debug)]
pub enum MemoryCmd {
    /// Add the deferred memory: load its driver, online each block as it arrives, and at
    /// the deadline fix and report whatever is missing (`ready` and `restored` start this
    /// in the background).
    Add,
    /// Memory blocks online and offline, and whether the deferred memory's driver is in.
    Status,
}

/// `snapboot profile`.
#[derive(Subcommand, Debug)]
pub enum ProfileCmd {
    /// Record the pages touched since the restore (after waiting SECS), for the next
    /// capture; without it the next capture takes what was touched until it runs.
    Record {
        /// Seconds to wait first: the window in which the application serves its first
        /// requests.
        #[arg(long, default_value_t = 0.0)]
        wait: f64,
    },
    /// How much of the image's profile, and of the rest of its swapped-out memory, is in
    /// memory now.
    Status,
    /// Read the image's profile back in (what a prefetch-mode image does after restore).
    Prefetch,
    /// After SECS, print the major page faults each process took since the restore: the
    /// memory the eager image lacked (`snapboot.profilecheck` starts it at every restore).
    Faults {
        /// Seconds to wait first.
        #[arg(long, default_value_t = 0)]
        wait: u32,
    },
}

/// `snapboot memory`.
pub fn memory(c: MemoryCmd) -> Result<ExitCode> {
    use ondevice::memory;
    match c {
        MemoryCmd::Add => match memory::add_from_cmdline()? {
            None => println!("no deferred memory on this boot (no snapboot.defermem)"),
            Some(r) if !r.complete() => return Ok(crate::Exit::Damaged.into()),
            Some(_) => {}
        },
        MemoryCmd::Status => {
            let b = memory::blocks(std::path::Path::new(memory::MEMORY_SYS))?;
            println!(
                "{} MiB online in {} blocks of {} MiB, {} blocks offline; {} {}",
                b.online_bytes() >> 20,
                b.online,
                b.block_bytes >> 20,
                b.offline.len(),
                memory::DRIVER,
                if memory::driver_loaded() {
                    "loaded"
                } else {
                    "not loaded"
                }
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `snapboot profile`.
pub fn profile(c: ProfileCmd) -> Result<ExitCode> {
    use ondevice::profile;
    let mib = |pages: u64| pages as f64 * 4096.0 / 1048576.0;
    match c {
        ProfileCmd::Record { wait } => {
            anyhow::ensure!(
                wait.is_finite() && wait >= 0.0,
                "--wait {wait}: expected seconds"
            );
            std::thread::sleep(std::time::Duration::from_secs_f64(wait));
            let p = profile::touched_since_restore()?;
            p.save(std::path::Path::new(profile::PROFILE_PATH))?;
            println!(
                "profile: {} pages ({:.1} MiB) touched since the restore, {} processes, {} ranges -> {} (the next capture uses it)",
                p.pages(),
                mib(p.pages()),
                p.processes(),
                p.ranges(),
                profile::PROFILE_PATH
            );
        }
        ProfileCmd::Status => match profile::residency()? {
            None => println!("this image was captured without a profile"),
            Some(r) => println!("{}", profile::residency_text(&r)),
        },
        ProfileCmd::Prefetch => {
            let b = profile::prefetch()?;
            println!("prefetch: {} of {} pages in memory", b.present, b.pages);
        }
        ProfileCmd::Faults { wait } => {
            std::thread::sleep(std::time::Duration::from_secs(wait.into()));
            let text = profile::faults_since_restore()?;
            ondevice::guest::print_marker(Marker::Faults, Some(&text));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `snapboot install`.
pub fn install(a: InstallArgs) -> Result<ExitCode> {
    use devinstall::install::{self, Content};
    let running = a.root == std::path::Path::new("/");
    if !a.uninstall && install::system::package_installed(&a.root, install::system::PACKAGE) {
        // Said before anything else is looked at.
        return Err(install::InstallError::PackageInstalled.into());
    }
    if a.uninstall {
        let generator = install::system::generator(&a.root);
        if a.dry_run {
            anyhow::bail!("--uninstall --dry-run: read /etc/snapboot/installed.manifest instead");
        }
        let done = install::uninstall(&a.root)?;
        for p in &done.removed {
            println!("removed {}", p.display());
        }
        for (p, why) in &done.kept {
            eprintln!("snapboot: kept {} ({why})", p.display());
        }
        if let Some(g) = generator.filter(|_| running && !a.no_initramfs) {
            rebuild_initramfs(g)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let binary = std::env::current_exe().context("cannot find the running snapboot binary")?;
    let mut store_modules = a.store_module.clone();
    // The configured store stands for --store on the running system (a root built
    // elsewhere has other devices); one that is not here is said, and nothing recorded.
    let store = match a.store.clone() {
        Some(given) => Some(ondevice::command_store::from_system(Some(given))?),
        None if running && a.store_module.is_empty() => {
            match ondevice::command_store::from_system(None) {
                Ok(configured) => Some(configured),
                Err(e) if e.is_unconfigured() => None,
                Err(e) => {
                    eprintln!(
                        "snapboot: {}: no store drivers recorded (--store or --store-module \
                         names them)",
                        boottrace::error_chain(&e)
                    );
                    None
                }
            }
        }
        None => None,
    };
    let located = match store.map(|s| s.locate()) {
        None => None,
        Some(Ok(at)) => Some(at),
        Some(Err(e)) if a.store.is_some() => return Err(e.into()),
        Some(Err(e)) => {
            eprintln!(
                "snapboot: {}: no store drivers recorded (--store or --store-module names them)",
                boottrace::error_chain(&e)
            );
            None
        }
    };
    if let Some(at) = located {
        let found = install::store_driver_modules(std::path::Path::new("/sys"), &at.path)?;
        println!(
            "{at}: drivers {}",
            if found.is_empty() {
                "built in (no module to load)".to_string()
            } else {
                found.join(", ")
            }
        );
        for m in found {
            if !store_modules.contains(&m) {
                store_modules.push(m);
            }
        }
    }
    let plan = install::plan(&install::InstallOptions {
        root: a.root.clone(),
        binary,
        after: a.after.clone(),
        store_modules,
    })?;
    if a.dry_run {
        for w in &plan.writes {
            match &w.content {
                Content::File { data, mode } => {
                    println!(
                        "would write {} ({} bytes, mode {mode:o})",
                        w.path.display(),
                        data.len()
                    )
                }
                Content::Link(t) => println!("would link {} -> {}", w.path.display(), t.display()),
            }
        }
        for r in &plan.removes {
            println!("would remove {}", r.path().display());
        }
        for p in &plan.kept {
            println!("would keep {} (there already)", p.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (written, changed) = install::apply(&plan)?;
    for p in &written {
        println!("installed {}", p.display());
    }
    for p in &plan.kept {
        println!("kept {} (there already)", p.display());
    }
    for p in &changed {
        eprintln!(
            "snapboot: kept {} (changed since the last install)",
            p.display()
        );
    }
    if a.after.is_empty() {
        println!(
            "note: no --after UNIT: the capture waits only for multi-user.target, not for \
             your application's readiness"
        );
    }
    if running && !a.no_initramfs {
        rebuild_initramfs(plan.generator)?;
    } else {
        let chroot = if running {
            String::new()
        } else {
            format!("chroot {} ", a.root.display())
        };
        println!(
            "next: {chroot}{} (the initramfs resumes only once it carries snapboot)",
            plan.generator.rebuild_command().join(" ")
        );
    }
    println!(
        "next: boot once with `snapboot.capture snapboot.store=PARTUUID=…` (or PARTLABEL=, \
         LABEL=, a device path) on the kernel command line and at every power-on with \
         `snapboot.store=` alone (docs/real-boards.md)"
    );
    Ok(ExitCode::SUCCESS)
}

/// Rebuilds the running kernel's initramfs with the system's generator, and has systemd
/// read the units again.
fn rebuild_initramfs(g: devinstall::install::Generator) -> Result<()> {
    if std::path::Path::new("/run/systemd/system").is_dir() {
        let _ = std::process::Command::new("systemctl")
            .arg("daemon-reload")
            .status();
    }
    let cmd = g.rebuild_command();
    println!("running {}", cmd.join(" "));
    let status = std::process::Command::new(cmd[0])
        .args(&cmd[1..])
        .status()
        .with_context(|| format!("cannot run {}", cmd[0]))?;
    anyhow::ensure!(status.success(), "`{}` failed: {status}", cmd.join(" "));
    Ok(())
}
