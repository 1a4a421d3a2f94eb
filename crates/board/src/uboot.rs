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
//! The flash image (QEMU `virt`'s pflash bank 1, U-Boot `qemu_arm64`'s `CONFIG_ENV_ADDR`):
//!
//! ```text
//! +-----------+------------------------------------------------+------------------+
//! | crc32 LE  | name=value\0 name=value\0 ... \0 (sorted)  0.. | erased (zero)    |
//! | 4 bytes   | ENV_SIZE - 4 bytes                             | to 64 MiB        |
//! +-----------+------------------------------------------------+------------------+
//! ```

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Debian's U-Boot for QEMU's arm64 `virt` machine (package `u-boot-qemu`).
pub const U_BOOT_BIN: &str = "/usr/lib/u-boot/qemu_arm64/u-boot.bin";
/// Bytes of the environment (U-Boot `qemu_arm64`'s `CONFIG_ENV_SIZE`).
pub const ENV_SIZE: usize = 0x40000;
/// Bytes of a `virt` flash bank: QEMU wants the file exactly this size.
pub const FLASH_BYTES: u64 = 64 << 20;
/// The environment variable `extlinux.conf`'s `append` line expands.
pub const CMDLINE_VAR: &str = "snapboot_cmdline";

/// Why U-Boot's environment could not be had or written.
#[derive(Debug, thiserror::Error)]
pub enum UbootError {
    /// Debian's U-Boot is not installed.
    #[error(
        "U-Boot for the arm64 board not found at {U_BOOT_BIN} (package u-boot-qemu; `make deps`)"
    )]
    NoUboot,
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
    /// The environment does not fit U-Boot's.
    #[error("U-Boot environment of {bytes} bytes does not fit its {ENV_SIZE}-byte area")]
    TooLarge {
        /// Bytes needed.
        bytes: usize,
    },
    /// An environment flash image is not one.
    #[error("not a U-Boot environment: {0}")]
    Corrupt(String),
    /// A variable name or value U-Boot cannot hold.
    #[error("U-Boot variable {name:?}: {reason}")]
    BadVariable {
        /// The name.
        name: String,
        /// Why.
        reason: &'static str,
    },
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

/// A U-Boot environment: variables by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Env(BTreeMap<String, String>);

/// Variables U-Boot sets at run time from its devices; an environment that stored them
/// would override what the console and the board are.
const RUNTIME_VARS: &[&str] = &["stdin", "stdout", "stderr", "fdtcontroladdr", "ver"];

impl Env {
    /// The variables of `printenv` output (`name=value` lines; the prompt, echoes and the
    /// closing "Environment size" line are not variables).
    pub fn from_printenv(text: &str) -> Self {
        let vars = text
            .lines()
            .map(|l| l.trim_end_matches('\r'))
            .filter_map(|l| l.split_once('='))
            .filter(|(k, _)| valid_name(k) && !RUNTIME_VARS.contains(k))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Env(vars)
    }

    /// A variable's value.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// Sets a variable.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), UbootError> {
        if !valid_name(name) {
            return Err(UbootError::BadVariable {
                name: name.into(),
                reason: "names are letters, digits, '_', '.', '#' and '-'",
            });
        }
        if value.contains('\0') {
            return Err(UbootError::BadVariable {
                name: name.into(),
                reason: "a value cannot hold a NUL byte",
            });
        }
        self.0.insert(name.into(), value.into());
        Ok(())
    }

    /// Number of variables.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The environment area as U-Boot reads it from flash: CRC, then the variables.
    pub fn to_area(&self) -> Result<Vec<u8>, UbootError> {
        let mut body = Vec::with_capacity(ENV_SIZE);
        for (k, v) in &self.0 {
            body.extend_from_slice(k.as_bytes());
            body.push(b'=');
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        if body.len() > ENV_SIZE - 4 {
            return Err(UbootError::TooLarge {
                bytes: body.len() + 4,
            });
        }
        body.resize(ENV_SIZE - 4, 0);
        let mut area = crc32fast::hash(&body).to_le_bytes().to_vec();
        area.extend_from_slice(&body);
        Ok(area)
    }

    /// Reads an environment area back (what `fw_printenv` shows), checking its CRC.
    pub fn from_area(area: &[u8]) -> Result<Self, UbootError> {
        if area.len() < ENV_SIZE {
            return Err(UbootError::Corrupt(format!(
                "{} bytes, the area is {ENV_SIZE}",
                area.len()
            )));
        }
        let body = &area[4..ENV_SIZE];
        let stored = u32::from_le_bytes([area[0], area[1], area[2], area[3]]);
        let crc = crc32fast::hash(body);
        if stored != crc {
            return Err(UbootError::Corrupt(format!(
                "CRC {stored:#010x} stored, {crc:#010x} computed"
            )));
        }
        let end = body.windows(2).position(|w| w == [0, 0]).unwrap_or(0);
        let mut env = Env::default();
        for var in body[..end + 1].split(|&b| b == 0).filter(|v| !v.is_empty()) {
            let text = String::from_utf8_lossy(var);
            let (k, v) = text
                .split_once('=')
                .ok_or_else(|| UbootError::Corrupt(format!("entry {text:?} has no '='")))?;
            env.0.insert(k.into(), v.into());
        }
        Ok(env)
    }

    /// Writes the flash bank file QEMU attaches (`-drive if=pflash,unit=1`).
    pub fn write_flash(&self, path: &Path) -> Result<(), UbootError> {
        let area = self.to_area()?;
        let mut f = std::fs::File::create(path).map_err(io_err(path))?;
        f.write_all(&area).map_err(io_err(path))?;
        f.set_len(FLASH_BYTES).map_err(io_err(path))
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '#' | '-'))
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
        let env = Env::from_printenv(&text);
        if env.get("bootcmd").is_some() {
            return Ok(env);
        }
    }
    let text = ask_printenv()?;
    let env = Env::from_printenv(&text);
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
    let result = (|| {
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
        let env = Env::from_printenv(PRINTENV);
        assert_eq!(env.get("bootcmd"), Some("run distro_bootcmd"));
        assert_eq!(env.get("boot_targets"), Some("qfw usb0 virtio0 "));
        assert_eq!(env.get("stdout"), None);
        assert_eq!(env.get("fdtcontroladdr"), None);
        assert_eq!(env.len(), 4, "{env:?}");
    }

    #[test]
    fn area_round_trips_and_a_flipped_byte_is_refused() {
        let env = board_env(
            &Env::from_printenv(PRINTENV),
            BootLabel::Restore,
            "console=ttyAMA0 snapboot.store=/dev/vdb",
        )
        .unwrap();
        let mut area = env.to_area().unwrap();
        assert_eq!(area.len(), ENV_SIZE);
        assert_eq!(Env::from_area(&area).unwrap(), env);
        assert_eq!(env.get("bootdelay"), Some("0"));
        assert_eq!(env.get("pxe_label_override"), Some("restore"));
        assert_eq!(
            env.get(CMDLINE_VAR),
            Some("console=ttyAMA0 snapboot.store=/dev/vdb")
        );
        area[10] ^= 1;
        assert!(matches!(Env::from_area(&area), Err(UbootError::Corrupt(m)) if m.contains("CRC")));
    }

    #[test]
    fn variables_sorted_and_nul_terminated_with_a_crc_over_the_whole_area() {
        let mut env = Env::default();
        env.set("b", "2").unwrap();
        env.set("a", "1").unwrap();
        let area = env.to_area().unwrap();
        assert_eq!(&area[4..13], b"a=1\0b=2\0\0");
        assert_eq!(
            u32::from_le_bytes(area[..4].try_into().unwrap()),
            crc32fast::hash(&area[4..])
        );
    }

    #[test]
    fn too_large_and_bad_names_are_refused() {
        let mut env = Env::default();
        env.set("big", &"x".repeat(ENV_SIZE)).unwrap();
        assert!(matches!(env.to_area(), Err(UbootError::TooLarge { .. })));
        assert!(env.set("a b", "1").is_err());
        assert!(env.set("", "1").is_err());
        assert!(env.set("ok", "a\0b").is_err());
    }

    #[test]
    fn flash_file_is_a_whole_bank() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("env.img");
        Env::from_printenv(PRINTENV).write_flash(&p).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), FLASH_BYTES);
        let area = std::fs::read(&p).unwrap();
        assert!(Env::from_area(&area[..ENV_SIZE]).is_ok());
    }
}
