//! The guest side of the board: `snapboot start`, the second-stage init that runs as PID 1 in
//! the root filesystem and starts the application, and `snapboot ready`, the hook the
//! application calls when it is usable.
//!
//! Running the application under a small PID 1 of our own keeps the root filesystem free of
//! any init system: zombies are reaped, and when the application exits the board powers off
//! with a marker saying how it ended.

use boottrace::Marker;
use std::process::Command;

/// Errors of the guest-side commands.
#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    /// The start command is empty or has unbalanced quotes.
    #[error("cannot parse start command {0:?}")]
    BadCommand(String),
    /// The application could not be started.
    #[error("cannot start {cmd:?}")]
    Spawn { cmd: String, source: std::io::Error },
    /// An `--env` item is not `KEY=VALUE`.
    #[error("environment item {0:?} is not KEY=VALUE")]
    BadEnv(String),
}

/// Where the board's initramfs puts the snapboot binary inside the new root.
pub const RUN_BIN_DIR: &str = "/run/snapboot/bin";

pub use crate::markers::{print_marker, MARKERS_ENV};

/// Runs this binary with `args` in the background, detached from the caller's output: its
/// markers go straight to the console. For work after ready or restored that must not
/// delay the application (prefetch, deferred memory, the fault report).
pub fn spawn_detached(args: &[&str]) {
    let _ = Command::new("/proc/self/exe")
        .args(args)
        .env(MARKERS_ENV, "console")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
}

/// Starts the application and supervises it. As PID 1 this never returns: when the
/// application exits, the board powers off. Otherwise returns the application's exit code.
pub fn start(cmd: &str, env: &[String]) -> Result<i32, GuestError> {
    let argv = shlex::split(cmd)
        .filter(|a| !a.is_empty())
        .ok_or_else(|| GuestError::BadCommand(cmd.to_string()))?;
    let mut c = Command::new(&argv[0]);
    c.args(&argv[1..]);
    let path =
        format!("{RUN_BIN_DIR}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    c.env("PATH", path)
        .env("HOME", "/root")
        .env(MARKERS_ENV, "console");
    for kv in env {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| GuestError::BadEnv(kv.clone()))?;
        c.env(k, v);
    }
    let pid1 = std::process::id() == 1;
    if pid1 {
        mount_run_fs();
    }
    print_marker(Marker::AppStart, Some(&argv[0]));
    let mut child = c.spawn().map_err(|source| GuestError::Spawn {
        cmd: cmd.to_string(),
        source,
    })?;
    let code = if pid1 {
        reap_until(child.id())
    } else {
        child.wait().map(|s| s.code().unwrap_or(128)).unwrap_or(128)
    };
    if pid1 {
        print_marker(
            Marker::Poweroff,
            Some(&format!("application exited with {code}")),
        );
        rustix::fs::sync();
        // Only reachable as PID 1 on the board: power off rather than let the kernel panic
        // on init's exit.
        let _ = rustix::system::reboot(rustix::system::RebootCommand::PowerOff);
    }
    Ok(code)
}

/// Mounts the pseudo filesystems the initramfs could not move (e.g. a rootfs without them).
fn mount_run_fs() {
    use rustix::mount::{mount, MountFlags};
    for (src, dir, fs) in [("proc", "/proc", "proc"), ("sysfs", "/sys", "sysfs")] {
        let probe = format!("{dir}/self");
        if dir == "/proc" && std::path::Path::new(&probe).exists() {
            continue;
        }
        if dir == "/sys" && std::path::Path::new("/sys/kernel").exists() {
            continue;
        }
        let _ = mount(src, dir, fs, MountFlags::empty(), "");
    }
}

/// What the board's `/init` script mounts first, done without a shell: devtmpfs on
/// `/dev`, proc, sysfs, and a tmpfs on `/run` (the boot setup record goes there and moves
/// into the root later). A mount point the initramfs lacks is made first (initramfs-tools'
/// and dracut's archives have no `/proc` or `/sys`: their `/init` makes them). A mount that
/// fails is named; the boot goes on (resume then says what it is missing).
pub fn early_mounts() -> Vec<String> {
    use rustix::mount::{mount, MountFlags};
    use std::os::unix::fs::DirBuilderExt;
    let mut failed = Vec::new();
    for m in snapimg::listing::EARLY_MOUNTS {
        let dir = std::path::Path::new(m.dir);
        if !dir.is_dir() {
            if let Err(e) = std::fs::DirBuilder::new().mode(0o755).create(dir) {
                failed.push(format!(
                    "{} on {}: cannot make the directory: {e}",
                    m.fstype, m.dir
                ));
                continue;
            }
        }
        if let Err(e) = mount(m.source, m.dir, m.fstype, MountFlags::empty(), m.data) {
            failed.push(format!("{} on {}: {e}", m.fstype, m.dir));
        }
    }
    failed
}

/// Reaps every child until `main` exits; returns its exit code.
fn reap_until(main: u32) -> i32 {
    use rustix::process::{wait, WaitOptions};
    loop {
        match wait(WaitOptions::empty()) {
            Ok(Some((pid, status))) if pid.as_raw_nonzero().get() as u32 == main => {
                return status
                    .exit_status()
                    .map(|c| c as i32)
                    .or_else(|| status.terminating_signal().map(|s| 128 + s as i32))
                    .unwrap_or(128);
            }
            Ok(_) => continue,
            Err(_) => return 128,
        }
    }
}

/// `snapboot ready`: the application is usable. Prints the ready marker on the console.
pub fn ready() {
    print_marker(Marker::Ready, None);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_runs_the_command_with_env_and_returns_its_code() {
        let code = start("sh -c 'test \"$FOO\" = bar && exit 7'", &["FOO=bar".into()]).unwrap();
        assert_eq!(code, 7);
    }

    #[test]
    fn bad_commands_are_refused_with_reason() {
        assert!(matches!(start("", &[]), Err(GuestError::BadCommand(_))));
        assert!(matches!(
            start("sh 'unbalanced", &[]),
            Err(GuestError::BadCommand(_))
        ));
        assert!(matches!(
            start("true", &["NOEQUALS".into()]),
            Err(GuestError::BadEnv(_))
        ));
        let err = start("/nonexistent/app", &[]).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/app"), "{err}");
    }
}
