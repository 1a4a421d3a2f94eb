//! The board's two machines: the x86_64 PC (q35, kernel entered directly through PVH) and the
//! arm64 board (QEMU `virt`, booted by U-Boot from a partitioned disk like an i.MX-class
//! device). Everything that differs between them by architecture is named here once.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A CPU architecture the board emulates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// The x86_64 PC.
    #[default]
    #[serde(rename = "x86_64")]
    X86_64,
    /// The arm64 board.
    Arm64,
}

/// An architecture name that is not one of the board's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown architecture {0:?} (the board has x86_64 and arm64)")]
pub struct UnknownArch(pub String);

impl Arch {
    /// Every architecture, the default first.
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Arm64];

    /// The name used on the command line and in directory names.
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Arm64 => "arm64",
        }
    }

    /// Debian's name of the architecture (`dpkg --print-architecture`).
    pub fn debian(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    /// The kernel's `uname -m`.
    pub fn uname_machine(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Arm64 => "aarch64",
        }
    }

    /// The Rust target the device binary is built for.
    pub fn rust_target(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-gnu",
            Arch::Arm64 => "aarch64-unknown-linux-gnu",
        }
    }

    /// Debian's meta package whose dependency is the current stock kernel.
    pub fn kernel_meta(self) -> &'static str {
        match self {
            Arch::X86_64 => "linux-image-amd64",
            Arch::Arm64 => "linux-image-arm64:arm64",
        }
    }

    /// The QEMU system emulator (and the Debian package that has it).
    pub fn qemu(self) -> (&'static str, &'static str) {
        match self {
            Arch::X86_64 => ("qemu-system-x86_64", "qemu-system-x86"),
            Arch::Arm64 => ("qemu-system-aarch64", "qemu-system-arm"),
        }
    }

    /// The `ARCH=` of the kernel's build system and the `CROSS_COMPILE=` prefix (empty when
    /// the host builds natively).
    pub fn kbuild(self) -> (&'static str, &'static str) {
        match self {
            Arch::X86_64 => ("x86", ""),
            Arch::Arm64 => ("arm64", "aarch64-linux-gnu-"),
        }
    }

    /// Debian's multiarch triplet: the directory name under `/lib` and `/usr/lib` where the
    /// architecture's shared libraries live, and which its dynamic loader searches.
    pub fn multiarch(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-linux-gnu",
            Arch::Arm64 => "aarch64-linux-gnu",
        }
    }

    /// The board's serial console device (`console=` on the kernel command line): the PC's
    /// 8250 UART, or `virt`'s PL011.
    pub fn serial_console(self) -> &'static str {
        match self {
            Arch::X86_64 => "ttyS0",
            Arch::Arm64 => "ttyAMA0",
        }
    }

    /// The architecture of the host this program runs on, if it is one of the board's.
    pub fn host() -> Option<Arch> {
        match std::env::consts::ARCH {
            "x86_64" => Some(Arch::X86_64),
            "aarch64" => Some(Arch::Arm64),
            _ => None,
        }
    }

    /// The architecture of an ELF file (`e_machine`), if it is one of the board's.
    pub fn of_elf(data: &[u8]) -> Option<Arch> {
        if data.len() < 20 || &data[..4] != b"\x7fELF" {
            return None;
        }
        match u16::from_le_bytes([data[18], data[19]]) {
            62 => Some(Arch::X86_64),
            183 => Some(Arch::Arm64),
            _ => None,
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Arch {
    type Err = UnknownArch;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "x86_64" | "amd64" | "x86-64" => Ok(Arch::X86_64),
            "arm64" | "aarch64" => Ok(Arch::Arm64),
            other => Err(UnknownArch(other.into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_aliases_are_accepted() {
        for a in Arch::ALL {
            assert_eq!(a.name().parse::<Arch>(), Ok(a));
            assert_eq!(a.debian().parse::<Arch>(), Ok(a));
            assert_eq!(a.uname_machine().parse::<Arch>(), Ok(a));
        }
        assert_eq!(
            "riscv64".parse::<Arch>(),
            Err(UnknownArch("riscv64".into()))
        );
    }

    #[test]
    fn serde_names_are_the_command_line_names() {
        for a in Arch::ALL {
            assert_eq!(serde_json::to_string(&a).unwrap(), format!("\"{a}\""));
        }
    }

    #[test]
    fn elf_machine_is_read() {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[18] = 183;
        assert_eq!(Arch::of_elf(&h), Some(Arch::Arm64));
        h[18] = 62;
        assert_eq!(Arch::of_elf(&h), Some(Arch::X86_64));
        h[18] = 40;
        assert_eq!(Arch::of_elf(&h), None);
        assert_eq!(Arch::of_elf(b"MZ"), None);
    }
}
