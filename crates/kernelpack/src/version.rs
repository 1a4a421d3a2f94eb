//! Which kernel a bzImage is, from its setup header's version string, without `std`: what
//! the restorer compares an image's kernel with.

/// Bytes from a bzImage's start that hold its version string: the setup sectors (at most
/// 64 of 512 bytes, which is what the 16-bit pointer at 0x20E can reach).
pub const VERSION_HEAD: usize = 0x10200;

/// The version string a bzImage's setup header points at (`6.1.0-56-amd64
/// (debian-kernel@lists.debian.org) #1 SMP PREEMPT_DYNAMIC Debian 6.1.192-2 (2026-11-16)`),
/// read from the kernel's first bytes `head`; `None` when `head` is not a bzImage's start
/// or the string does not end inside it.
pub fn bzimage_version(head: &[u8]) -> Option<&str> {
    if head.get(0x202..0x206) != Some(b"HdrS") {
        return None;
    }
    let ptr = usize::from(u16::from_le_bytes([head[0x20E], head[0x20F]])) + 0x200;
    let text = head.get(ptr..)?;
    let end = text.iter().take(256).position(|&b| b == 0)?;
    core::str::from_utf8(&text[..end]).ok()
}

/// `uname -r` and `uname -v` of a kernel from its version string: the first word, and
/// what follows the builder's `(user@host) ` (it starts with `#`).
pub fn uname_of(version: &str) -> Option<(&str, &str)> {
    let release = version.split_whitespace().next()?;
    let at = version.find(") #")?;
    Some((release, &version[at + 2..]))
}
