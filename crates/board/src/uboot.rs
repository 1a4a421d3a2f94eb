//! U-Boot, the arm64 board's boot loader: its environment, kept in the board's second flash
//! bank as on a device (where `fw_setenv` edits it), and the environment the board boots with.
//!
//! U-Boot's default environment is its own (the distribution's build): the board asks U-Boot
//! for it once (`printenv` at its prompt), keeps it under the snapboot home, and writes the
//! environment of every run from it: no boot delay, the boot disk as the only boot target,
//! the `extlinux.conf` label to boot (`pxe_label_override`: the stock kernel or the restore
//! kernel) and the run's kernel command line (`snapboot_cmdline`, which `extlinux.conf`'s
//! `append ${snapboot_cmdline}` expands).
//!
//! The flash image (QEMU `virt`'s pflash bank 1, U-Boot `qemu_arm64`'s `CONFIG_ENV_ADDR`) is
//! one `ubootenv` area of [`ENV_SIZE`] bytes, then zeros to the bank's 64 MiB.
//!
//! U-Boot cannot write this bank back on this board (measured with Debian's 2023.01 and
//! QEMU 7.2: `saveenv` erases both sectors, then fails with "Flash buffer write timeout at
//! address 4020000", leaving the environment erased), and Debian's arm64 kernel has no
//! driver for it (`CONFIG_MTD_CFI` and `CONFIG_MTD_PHYSMAP` are off), so the bank is the
//! factory environment only: a next-boot request lives on the boot disk (`crate::bootdisk`).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Debian's U-Boot for QEMU's arm64 `virt` machine (package `u-boot-qemu`).
pub const U_BOOT_BIN: &str = "/usr/lib/u-boot/qemu_arm64/u-boot.bin";
/// Where `scripts/u-boot-mmc.sh` puts the same U-Boot source built with SD/MMC support,
/// under the snapboot home: Debian builds `qemu_arm64` without it.
pub const U_BOOT_MMC_BIN: &str = "u-boot/qemu_arm64-mmc/u-boot.bin";

/// The U-Boot the arm64 board starts: Debian's, or for a run with an SD card
/// (`--store-on sd`) Debian's source built with MMC ([`U_BOOT_MMC_BIN`]).
pub fn u_boot_bin(sd: bool) -> Result<PathBuf, UbootError> {
    if !sd {
        return Ok(PathBuf::from(U_BOOT_BIN));
    }
    let bin = bundle::home::home().join(U_BOOT_MMC_BIN);
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(UbootError::NoMmcUboot(bin))
    }
}

/// Bytes of the environment (U-Boot `qemu_arm64`'s `CONFIG_ENV_SIZE`).
pub const ENV_SIZE: usize = 0x40000;
/// Bytes of a `virt` flash bank: QEMU wants the file exactly this size.
pub const FLASH_BYTES: u64 = 64 << 20;
/// The environment variable `extlinux.conf`'s `append` line expands.
pub const CMDLINE_VAR: &str = "snapboot_cmdline";
/// The environment variable that has the boot script start the restorer first
/// (`snapboot_restorer=yes`; `crate::bootdisk`).
pub const RESTORER_VAR: &str = "snapboot_restorer";

/// Why U-Boot's environment could not be had or written.
#[derive(Debug, thiserror::Error)]
pub enum UbootError {
    /// Debian's U-Boot is not installed.
    #[error(
        "U-Boot for the arm64 board not found at {U_BOOT_BIN} (package u-boot-qemu; `make deps`)"
    )]
    NoUboot,
    /// The U-Boot that reads SD cards is not built.
    #[error(
        "no U-Boot with SD card support at {}: Debian's qemu_arm64 build has none; \
         scripts/u-boot-mmc.sh builds it from Debian's source (make u-boot)",
        .0.display()
    )]
    NoMmcUboot(PathBuf),
    /// QEMU could not be run.
    #[error("cannot run qemu-system-aarch64 (package qemu-system-arm): {0}")]
    Qemu(std::io::Error),
    /// U-Boot did not answer at its prompt in time.
    #[error("U-Boot did not {what} within {secs} s; its console said: {tail:?}")]
    NoAnswer {
        /// What was waited for.
        what: &'static str,
        /// Seconds waited.
        secs: u64,
        /// The console's last bytes.
        tail: String,
    },
    /// The environment area (too large, a bad variable, a bad CRC).
    #[error(transparent)]
    Env(#[from] ubootenv::EnvError),
    /// An environment flash image is not one.
    #[error("not a U-Boot environment: {0}")]
    Corrupt(String),
    /// Reading or writing a file.
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> UbootError + '_ {
    move |source| UbootError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub use ubootenv::Env;

/// Variables U-Boot sets at run time from its devices; an environment that stored them
/// would override what the console and the board are.
const RUNTIME_VARS: &[&str] = &["stdin", "stdout", "stderr", "fdtcontroladdr", "ver"];

/// The variables of `printenv` output (`name=value` lines; the prompt, echoes and the
/// closing "Environment size" line are not variables).
pub fn env_from_printenv(text: &str) -> Env {
    text.lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| ubootenv::valid_name(k) && !RUNTIME_VARS.contains(k))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Writes the flash bank file QEMU attaches (`-drive if=pflash,unit=1`): the environment
/// area, then erased (zero) to the bank's size.
pub fn write_flash(env: &Env, path: &Path) -> Result<(), UbootError> {
    let area = env.to_area(ENV_SIZE)?;
    let mut f = std::fs::File::create(path).map_err(io_err(path))?;
    f.write_all(&area).map_err(io_err(path))?;
    f.set_len(FLASH_BYTES).map_err(io_err(path))
}

/// The environment in a flash bank file (what `fw_printenv` would show), its CRC checked.
pub fn read_flash(path: &Path) -> Result<Env, UbootError> {
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    Ok(Env::from_area(&bytes, ENV_SIZE)?)
}

/// Which kernel U-Boot boots: an `extlinux.conf` label of the board's boot disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootLabel {
    /// The distribution's kernel (`/Image`).
    Stock,
    /// The restore kernel (`/restore/Image`).
    Restore,
}

impl BootLabel {
    /// The label's name in `extlinux.conf`.
    pub fn name(self) -> &'static str {
        match self {
            BootLabel::Stock => "stock",
            BootLabel::Restore => "restore",
        }
    }
}

/// The environment of one run of the board: U-Boot's own defaults, booting at once from the
/// first virtio disk only, the given label, with the given kernel command line.
pub fn board_env(defaults: &Env, label: BootLabel, cmdline: &str) -> Result<Env, UbootError> {
    let mut env = defaults.clone();
    env.set("bootdelay", "0")?;
    env.set("boot_targets", "virtio0")?;
    env.set("pxe_label_override", label.name())?;
    env.set(CMDLINE_VAR, cmdline)?;
    Ok(env)
}

/// U-Boot's default environment, asked of U-Boot once and kept in `cache` (keyed by the
/// U-Boot binary, so a new `u-boot-qemu` asks again).
pub fn default_env(cache: &Path) -> Result<Env, UbootError> {
    let bin = std::fs::read(U_BOOT_BIN).map_err(|_| UbootError::NoUboot)?;
    let key = blake3::hash(&bin).to_hex();
    let file = cache.join(format!("u-boot-env-{}.txt", &key[..16]));
    if let Ok(text) = std::fs::read_to_string(&file) {
        let env = env_from_printenv(&text);
        if env.get("bootcmd").is_some() {
            return Ok(env);
        }
    }
    let text = ask_printenv()?;
    let env = env_from_printenv(&text);
    if env.get("bootcmd").is_none() {
        return Err(UbootError::Corrupt(format!(
            "`printenv` gave no bootcmd ({} variables)",
            env.len()
        )));
    }
    std::fs::create_dir_all(cache).map_err(io_err(cache))?;
    std::fs::write(&file, text).map_err(io_err(&file))?;
    Ok(env)
}

/// Boots U-Boot alone, stops its autoboot and returns what `printenv` printed.
fn ask_printenv() -> Result<String, UbootError> {
    let mut child = Command::new("qemu-system-aarch64")
        .args([
            "-M",
            "virt",
            "-cpu",
            "cortex-a72",
            "-m",
            "512",
            "-nographic",
        ])
        .args([
            "-nodefaults",
            "-no-user-config",
            "-serial",
            "stdio",
            "-monitor",
            "none",
        ])
        .args(["-bios", U_BOOT_BIN, "-no-reboot"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(UbootError::Qemu)?;
    let mut stdin = child.stdin.take().ok_or(UbootError::NoUboot)?;
    let mut stdout = child.stdout.take().ok_or(UbootError::NoUboot)?;
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut wait = |needle: &[u8], what: &'static str, from: usize| -> Result<usize, UbootError> {
        let secs = 60;
        let end = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(at) = seen[from..].windows(needle.len()).position(|w| w == needle) {
                return Ok(from + at + needle.len());
            }
            let left = end.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(chunk) => seen.extend_from_slice(&chunk),
                Err(_) => {
                    let tail = String::from_utf8_lossy(&seen[seen.len().saturating_sub(300)..]);
                    return Err(UbootError::NoAnswer {
                        what,
                        secs,
                        tail: tail.into_owned(),
                    });
                }
            }
        }
    };
    let result = (|| -> Result<(usize, usize), UbootError> {
        let at = wait(b"Hit any key to stop autoboot", "offer to stop autoboot", 0)?;
        let _ = stdin.write_all(b" ");
        let _ = stdin.flush();
        let at = wait(b"=> ", "show its prompt", at)?;
        let _ = stdin.write_all(b"printenv\n");
        let _ = stdin.flush();
        let end = wait(b"Environment size", "print its environment", at)?;
        Ok((at, end))
    })();
    let _ = child.kill();
    let _ = child.wait();
    let (at, end) = result?;
    Ok(String::from_utf8_lossy(&seen[at..end]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRINTENV: &str = "printenv\r\narch=arm\r\nbootcmd=run distro_bootcmd\r\nbootdelay=2\r\n\
        stdout=pl011@9000000\r\nfdtcontroladdr=5edb6db0\r\nboot_targets=qfw usb0 virtio0 \r\n\r\n\
        Environment size: 5321/262140 bytes\r\n=> ";

    #[test]
    fn printenv_gives_the_variables_but_not_the_runtime_ones() {
        let env = env_from_printenv(PRINTENV);
        assert_eq!(env.get("bootcmd"), Some("run distro_bootcmd"));
        assert_eq!(env.get("boot_targets"), Some("qfw usb0 virtio0 "));
        assert_eq!(env.get("stdout"), None);
        assert_eq!(env.get("fdtcontroladdr"), None);
        assert_eq!(env.len(), 4, "{env:?}");
    }

    #[test]
    fn board_env_boots_the_label_with_the_command_line() {
        let env = board_env(
            &env_from_printenv(PRINTENV),
            BootLabel::Restore,
            "console=ttyAMA0 snapboot.store=/dev/vdb",
        )
        .unwrap();
        assert_eq!(env.get("bootdelay"), Some("0"));
        assert_eq!(env.get("pxe_label_override"), Some("restore"));
        assert_eq!(
            env.get(CMDLINE_VAR),
            Some("console=ttyAMA0 snapboot.store=/dev/vdb")
        );
    }

    #[test]
    fn flash_file_is_a_whole_bank_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("env.img");
        let env = env_from_printenv(PRINTENV);
        write_flash(&env, &p).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), FLASH_BYTES);
        assert_eq!(read_flash(&p).unwrap(), env);
    }
}
