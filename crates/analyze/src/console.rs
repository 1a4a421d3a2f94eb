//! The kernel command line and what the console costs. The command line is read from the
//! `Command line:` (or `Kernel command line:`) line of a boot log; from it come the serial
//! console and its baud rate (`console=ttyS0,115200n8`), `quiet`, `lpj=`, `ip=` and the other
//! parameters the advisor asks about. [`ConsoleCost`] estimates how long the printed bytes
//! keep a real UART busy: every byte takes 10 bit times (8N1) at the detected baud rate.

use serde::Serialize;

/// Baud rate the 8250 driver uses when `console=ttyS0` gives none.
pub const DEFAULT_BAUD: u32 = 9600;

/// Bits on the wire per byte at 8N1: start bit, 8 data bits, stop bit.
const BITS_PER_BYTE: f64 = 10.0;

/// The kernel command line, split into parameters.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Cmdline {
    /// The command line as printed.
    pub raw: String,
    /// Parameters before a `--` separator (those after it go to init), as `key` or `key=value`.
    pub params: Vec<String>,
}

impl Cmdline {
    /// Splits a command line into parameters; quoted values (`x="a b"`) stay in one piece.
    pub fn parse(raw: &str) -> Self {
        let mut params = Vec::new();
        let mut cur = String::new();
        let mut quoted = false;
        for c in raw.chars() {
            match c {
                '"' => quoted = !quoted,
                c if c.is_whitespace() && !quoted => {
                    if !cur.is_empty() {
                        params.push(std::mem::take(&mut cur));
                    }
                }
                c => cur.push(c),
            }
        }
        if !cur.is_empty() {
            params.push(cur);
        }
        if let Some(end) = params.iter().position(|p| p == "--") {
            params.truncate(end);
        }
        Self {
            raw: raw.trim().to_string(),
            params,
        }
    }

    /// Finds the command line in a boot log's messages (`Command line:` or
    /// `Kernel command line:`, printk prefix removed).
    pub fn find<'a>(messages: impl IntoIterator<Item = &'a str>) -> Option<Self> {
        messages.into_iter().find_map(|m| {
            // `Command line:` (x86) or `Kernel command line:`.
            let (_, rest) = m.split_once("ommand line: ")?;
            Some(Self::parse(rest))
        })
    }

    /// Whether the bare flag `name` (e.g. `quiet`) is present.
    pub fn has_flag(&self, name: &str) -> bool {
        self.params.iter().any(|p| p == name)
    }

    /// The value of the last `name=value` parameter.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .rev()
            .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
    }

    /// Whether `name` appears, bare or with a value.
    pub fn has(&self, name: &str) -> bool {
        self.has_flag(name) || self.value(name).is_some()
    }

    /// The serial console: the last `console=` naming a serial port (`ttyS*`, `ttyAMA*`,
    /// `ttymxc*`, ...; not the virtual terminals `tty0`..`tty63` or `hvc*`).
    pub fn serial_console(&self) -> Option<SerialConsole> {
        self.params.iter().rev().find_map(|p| {
            let spec = p.strip_prefix("console=")?;
            let (device, options) = spec.split_once(',').unwrap_or((spec, ""));
            let rest = device.strip_prefix("tty")?;
            if rest.is_empty() || rest.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let digits: String = options.chars().take_while(char::is_ascii_digit).collect();
            let (baud, baud_given) = match digits.parse::<u32>() {
                Ok(b) if b > 0 => (b, true),
                _ => (DEFAULT_BAUD, false),
            };
            Some(SerialConsole {
                device: device.to_string(),
                baud,
                baud_given,
            })
        })
    }
}

/// A serial console named on the command line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SerialConsole {
    /// Device name, e.g. `ttyS0`.
    pub device: String,
    /// Baud rate (the driver default, [`DEFAULT_BAUD`], when none is given).
    pub baud: u32,
    /// Whether the command line gave the baud rate.
    pub baud_given: bool,
}

impl SerialConsole {
    /// Seconds a UART at this baud rate needs for `bytes` bytes.
    pub fn seconds_for(&self, bytes: u64) -> f64 {
        bytes as f64 * BITS_PER_BYTE / f64::from(self.baud)
    }

    /// Bytes per second the UART can carry.
    pub fn bytes_per_second(&self) -> f64 {
        f64::from(self.baud) / BITS_PER_BYTE
    }
}

/// Where time went on the console: bytes printed and what they cost at the detected baud.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConsoleCost {
    /// The console the cost is computed for.
    pub console: SerialConsole,
    /// Whether `quiet` is on the command line (the kernel then prints only warnings and worse
    /// to the console, although `dmesg` still holds everything).
    pub quiet: bool,
    /// Console lines the kernel printed (lines with a printk timestamp, or before init).
    pub kernel_lines: usize,
    /// Bytes of those lines, with `\r\n`.
    pub kernel_bytes: u64,
    /// Seconds a real UART needs for [`kernel_bytes`](Self::kernel_bytes).
    pub kernel_seconds: f64,
    /// Lines user space printed.
    pub user_lines: usize,
    /// Bytes of those lines, with `\r\n`.
    pub user_bytes: u64,
    /// Seconds a real UART needs for [`user_bytes`](Self::user_bytes).
    pub user_seconds: f64,
    /// How far (seconds) the kernel's printk clock ran ahead of what a UART at this baud
    /// could have printed: with a synchronous console each message is stamped only after
    /// everything before it (the backlog replayed when the console registered included) went
    /// out. `None` when the log cannot tell (no printk time, `quiet`, no registration line).
    pub ahead_s: Option<f64>,
    /// Whether [`ahead_s`](Self::ahead_s) is clearly positive: the UART is emulated (QEMU,
    /// Firecracker) and printing cost little on this log.
    pub virtual_uart: bool,
}

impl ConsoleCost {
    /// Bytes one console line takes on the wire: its text (printk prefix included, as the
    /// kernel prints it with `printk.time`) plus `\r\n`.
    pub fn line_bytes(text: &str) -> u64 {
        text.len() as u64 + 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_console_and_flags() {
        let c = Cmdline::parse(
            r#"console=tty0 console=ttyS2,115200n8 root=/dev/mmcblk0p2 quiet x="a b" -- init args"#,
        );
        assert_eq!(c.params.len(), 5);
        assert!(c.has_flag("quiet"));
        assert_eq!(c.value("root"), Some("/dev/mmcblk0p2"));
        assert_eq!(c.value("x"), Some("a b"));
        assert!(!c.has("init"));
        let s = c.serial_console().expect("serial console");
        assert_eq!(
            (s.device.as_str(), s.baud, s.baud_given),
            ("ttyS2", 115200, true)
        );
        assert!((s.seconds_for(11520) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn console_without_baud_or_virtual_terminal() {
        let c = Cmdline::parse("console=ttyS0 quiet");
        let s = c.serial_console().expect("serial");
        assert_eq!((s.baud, s.baud_given), (DEFAULT_BAUD, false));
        assert_eq!(Cmdline::parse("console=tty1").serial_console(), None);
        assert_eq!(Cmdline::parse("console=hvc0").serial_console(), None);
        let found = Cmdline::find([
            "Linux version 6.1",
            "Kernel command line: console=ttyAMA0,9600",
        ]);
        assert_eq!(
            found.and_then(|c| c.serial_console()).map(|s| s.device),
            Some("ttyAMA0".to_string())
        );
    }
}
