//! The board's TPM: a software TPM 2.0 (Debian's `swtpm`) that QEMU attaches as the
//! machine's TPM, so that a key sealed to it in one boot unseals in the next. Its state (the
//! TPM's persistent memory: seeds, NV indices, persistent objects) lives in a directory the
//! run names (`--tpm DIR`); another directory is another TPM.
//!
//! ```text
//! swtpm socket --tpm2 --tpmstate dir=DIR --ctrl type=unixio,path=RUN/swtpm.sock
//!   ^ one per run, started before QEMU, stopped after it (the Swtpm guard)
//! qemu -chardev socket,id=chrtpm,path=RUN/swtpm.sock -tpmdev emulator,id=tpm0,chardev=chrtpm
//!      -device tpm-tis,tpmdev=tpm0          (x86_64 q35: ISA TIS at 0xfed40000, ACPI MSFT0101)
//!      -device tpm-tis-device,tpmdev=tpm0   (arm64 virt: on the platform bus, in the device tree)
//! ```
//!
//! The device is part of the machine: the firmware's memory map and tables depend on it, so a
//! board that has one has it on every boot (capture and restore, either kernel), as an image
//! only restores onto the memory map it was captured on. On the PC the board then boots
//! bzImages, not the vmlinux through PVH: `crate::qemu::kernel_file` says why.

use guestarch::Arch;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The TPM emulator (package `swtpm`).
pub const SWTPM: &str = "swtpm";

/// How long swtpm has to open its control socket.
const SOCKET_WAIT: Duration = Duration::from_secs(10);

/// Why the board's TPM could not be started.
#[derive(Debug, thiserror::Error)]
pub enum TpmError {
    /// swtpm could not be run.
    #[error("cannot run {SWTPM} (package swtpm): {0}")]
    Spawn(std::io::Error),
    /// The state directory could not be made, or is not one swtpm and QEMU can name.
    #[error("TPM state directory {}: {reason}", path.display())]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The run's directory for the socket could not be made.
    #[error("cannot make the TPM's run directory: {0}")]
    RunDir(std::io::Error),
    /// The PC boots a bzImage when it has a TPM (`crate::qemu::kernel_file`), and there is none.
    #[error(
        "the board's TPM needs a bzImage, and {} is missing (a restore kernel built before \
         the TPM: build it again with `snapboot board restore-kernel`)",
        .0.display()
    )]
    NoBzImage(PathBuf),
    /// swtpm exited, or did not open its socket in time.
    #[error("swtpm did not open its socket within {secs} s ({status}); it said: {said:?}")]
    NoSocket {
        /// Seconds waited.
        secs: u64,
        /// Its exit status, or that it was still running.
        status: String,
        /// The end of what it wrote.
        said: String,
    },
}

/// The arguments of `swtpm` serving the TPM whose state is in `state` on the control
/// socket `socket`. `startup-clear` has swtpm send `TPM2_Startup(CLEAR)` when it starts;
/// QEMU re-initialises the TPM at every machine reset, after which the firmware (SeaBIOS on
/// the PC) or the kernel (`tpm2_auto_startup`) starts it again. Measured on the PC: after
/// SeaBIOS, all hierarchies are enabled (`TPMA_STARTUP_CLEAR` 0xf), so the storage
/// hierarchy a key is sealed under is usable.
pub fn swtpm_args(state: &Path, socket: &Path) -> Vec<OsString> {
    let mut dir = OsString::from("dir=");
    dir.push(state);
    let mut ctrl = OsString::from("type=unixio,path=");
    ctrl.push(socket);
    ["socket", "--tpm2", "--tpmstate"]
        .map(OsString::from)
        .into_iter()
        .chain([dir, "--ctrl".into(), ctrl])
        .chain(["--flags", "startup-clear"].map(OsString::from))
        .collect()
}

/// The QEMU arguments that give the `arch` board a TPM 2.0 behind the swtpm control socket
/// `socket`: TIS on the PC's ISA bus (ACPI `MSFT0101`), or the `virt` machine's sysbus TIS
/// (a `tcg,tpm-tis-mmio` device-tree node).
pub fn qemu_args(arch: Arch, socket: &Path) -> Vec<String> {
    let device = match arch {
        Arch::X86_64 => "tpm-tis",
        Arch::Arm64 => "tpm-tis-device",
    };
    vec![
        "-chardev".into(),
        format!("socket,id=chrtpm,path={}", qemu_path(socket)),
        "-tpmdev".into(),
        "emulator,id=tpm0,chardev=chrtpm".into(),
        "-device".into(),
        format!("{device},tpmdev=tpm0"),
    ]
}

/// A path as a QEMU option value: commas doubled.
fn qemu_path(p: &Path) -> String {
    p.to_string_lossy().replace(',', ",,")
}

/// A running swtpm, stopped when dropped (after QEMU: a session drops its QEMU first).
#[derive(Debug)]
pub struct Swtpm {
    child: Child,
    socket: PathBuf,
    /// The socket and swtpm's log, removed with the guard.
    _dir: tempfile::TempDir,
}

impl Swtpm {
    /// Starts swtpm on the TPM state in `state` (created if missing) and waits for its
    /// control socket.
    pub fn start(state: &Path) -> Result<Self, TpmError> {
        let bad = |reason: String| TpmError::StateDir {
            path: state.to_path_buf(),
            reason,
        };
        std::fs::create_dir_all(state).map_err(|e| bad(e.to_string()))?;
        let state = state.canonicalize().map_err(|e| bad(e.to_string()))?;
        if state.to_string_lossy().contains(',') {
            // swtpm's `--tpmstate dir=` value cannot hold one.
            return Err(bad("a path with a comma, which swtpm cannot take".into()));
        }
        let dir = tempfile::Builder::new()
            .prefix("snapboot-tpm-")
            .tempdir()
            .map_err(TpmError::RunDir)?;
        let socket = dir.path().join("swtpm.sock");
        let log_path = dir.path().join("swtpm.log");
        let log = std::fs::File::create(&log_path).map_err(TpmError::RunDir)?;
        let child = Command::new(SWTPM)
            .args(swtpm_args(&state, &socket))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(TpmError::RunDir)?)
            .stderr(log)
            .spawn()
            .map_err(TpmError::Spawn)?;
        let mut tpm = Swtpm {
            child,
            socket,
            _dir: dir,
        };
        let end = Instant::now() + SOCKET_WAIT;
        loop {
            if tpm.socket.exists() {
                return Ok(tpm);
            }
            let exited = tpm.child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() >= end {
                let said = std::fs::read_to_string(&log_path).unwrap_or_default();
                let tail: String = said
                    .trim()
                    .lines()
                    .rev()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" / ");
                return Err(TpmError::NoSocket {
                    secs: SOCKET_WAIT.as_secs(),
                    status: exited.map_or("still running".into(), |s| s.to_string()),
                    said: tail,
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The control socket QEMU connects to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for Swtpm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[OsString]) -> Vec<String> {
        v.iter().map(|a| a.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn swtpm_serves_a_tpm2_from_the_state_directory_on_the_control_socket() {
        let a = swtpm_args(Path::new("/tpm/a"), Path::new("/run/x/swtpm.sock"));
        assert_eq!(
            strings(&a).join(" "),
            "socket --tpm2 --tpmstate dir=/tpm/a --ctrl type=unixio,path=/run/x/swtpm.sock \
             --flags startup-clear"
        );
    }

    #[test]
    fn the_pc_gets_an_isa_tis_and_the_arm64_board_a_sysbus_tis() {
        let sock = Path::new("/run/x/swtpm.sock");
        assert_eq!(
            qemu_args(Arch::X86_64, sock),
            [
                "-chardev",
                "socket,id=chrtpm,path=/run/x/swtpm.sock",
                "-tpmdev",
                "emulator,id=tpm0,chardev=chrtpm",
                "-device",
                "tpm-tis,tpmdev=tpm0"
            ]
        );
        let arm = qemu_args(Arch::Arm64, sock);
        assert_eq!(arm[5], "tpm-tis-device,tpmdev=tpm0");
        assert_eq!(arm[..5], qemu_args(Arch::X86_64, sock)[..5]);
        assert_eq!(
            qemu_args(Arch::X86_64, Path::new("/a,b/s"))[1],
            "socket,id=chrtpm,path=/a,,b/s",
            "QEMU's option syntax doubles a comma"
        );
    }

    #[test]
    fn a_state_directory_swtpm_cannot_name_is_refused_before_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let err = Swtpm::start(&dir.path().join("a,b")).unwrap_err();
        assert!(matches!(err, TpmError::StateDir { .. }), "{err}");
        assert!(err.to_string().contains("comma"), "{err}");
    }
}
