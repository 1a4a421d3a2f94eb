//! One entry of a newc cpio archive (the format `cpio -H newc` writes and the kernel
//! unpacks), read from a byte slice without copying:
//!
//! ```text
//! +--------+----------------------------------------------------------------+
//! | 6      | magic "070701" (or "070702": the header's check field holds    |
//! |        | the sum of a regular file's data bytes, which the kernel checks) |
//! | 13 x 8 | hex fields: ino, mode, uid, gid, nlink, mtime, filesize,       |
//! |        | devmajor, devminor, rdevmajor, rdevminor, namesize, check      |
//! | n      | name, NUL-terminated (namesize counts the NUL); header + name  |
//! |        | padded to 4 bytes                                              |
//! | size   | data (a symbolic link's: its target), padded to 4 bytes        |
//! +--------+----------------------------------------------------------------+
//! ... the last entry of an archive is named "TRAILER!!!"; an archive starts at a
//! multiple of 4 bytes from the start of its stream.
//! ```
//!
//! What the entry then does to the root is [`crate::root`]'s.

use core::ops::Range;

/// The magic of an archive without checksums.
pub const MAGIC: &[u8; 6] = b"070701";
/// The magic of an archive whose header check field sums each regular file's data.
pub const MAGIC_CRC: &[u8; 6] = b"070702";
/// Bytes of a header before the name.
pub const HEADER_LEN: usize = 110;
/// The name of the entry that ends an archive.
pub const TRAILER: &[u8] = b"TRAILER!!!";
/// The longest name, and symbolic link target, the kernel takes (`PATH_MAX`).
pub const PATH_MAX: u32 = 4096;

/// File type bits of a mode.
pub const S_IFMT: u32 = 0o170000;
/// A socket's type bits.
pub const S_IFSOCK: u32 = 0o140000;
/// A symbolic link's type bits.
pub const S_IFLNK: u32 = 0o120000;
/// A regular file's type bits.
pub const S_IFREG: u32 = 0o100000;
/// A block device's type bits.
pub const S_IFBLK: u32 = 0o060000;
/// A directory's type bits.
pub const S_IFDIR: u32 = 0o040000;
/// A character device's type bits.
pub const S_IFCHR: u32 = 0o020000;
/// A FIFO's type bits.
pub const S_IFIFO: u32 = 0o010000;

/// A header's fields (uid, gid and rdev are read past: the root does not keep them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Inode number: with `nlink` > 1, names of one file share it within an archive.
    pub ino: u32,
    /// `st_mode`: type and permission bits.
    pub mode: u32,
    /// Link count.
    pub nlink: u32,
    /// Modification time, seconds since the epoch.
    pub mtime: u32,
    /// Bytes of data.
    pub filesize: u32,
    /// The device of the archived file (part of a hard link's identity).
    pub devmajor: u32,
    /// The device of the archived file (part of a hard link's identity).
    pub devminor: u32,
    /// Bytes of the name, its NUL included.
    pub namesize: u32,
    /// The check field: with [`MAGIC_CRC`], the sum of a regular file's data bytes.
    pub check: u32,
    /// Whether the magic was [`MAGIC_CRC`].
    pub checksummed: bool,
}

/// One entry as it lies in its stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// Its header.
    pub header: Header,
    /// Its name as stored: `namesize` bytes, the NUL included if there is one.
    pub name: &'a [u8],
    /// Where its data lies in the stream.
    pub data: Range<usize>,
    /// Where the next entry starts (the data's end padded to 4 bytes, or the stream's end).
    pub next: usize,
}

impl Record<'_> {
    /// The name before its NUL, or `None` when `namesize` holds none at its end (the kernel
    /// calls that a malformed archive).
    pub fn name(&self) -> Option<&[u8]> {
        let n = self.name.strip_suffix(&[0])?;
        // A NUL inside ends the name, as for the kernel's C strings.
        Some(n.split(|&b| b == 0).next().unwrap_or(n))
    }
}

/// The hex field `i` (0: ino) of a header.
fn field(h: &[u8], i: usize) -> Result<u32, &'static str> {
    let f = &h[6 + 8 * i..14 + 8 * i];
    f.iter().try_fold(0u32, |v, &c| {
        let d = (c as char)
            .to_digit(16)
            .ok_or("a header field is not hex")?;
        Ok((v << 4) | d)
    })
}

/// Reads the entry whose header starts at `at` of `stream`; `Err` says what is wrong with it.
pub fn read(stream: &[u8], at: usize) -> Result<Record<'_>, &'static str> {
    let h = stream
        .get(at..)
        .and_then(|r| r.get(..HEADER_LEN))
        .ok_or("the header runs past the end")?;
    let checksummed = match &h[..6] {
        m if m == MAGIC => false,
        m if m == MAGIC_CRC => true,
        m if m == b"070707" => {
            return Err("an odc (portable ASCII) header: the kernel reads newc only")
        }
        _ => return Err("no newc magic (070701 or 070702)"),
    };
    let header = Header {
        ino: field(h, 0)?,
        mode: field(h, 1)?,
        nlink: field(h, 4)?,
        mtime: field(h, 5)?,
        filesize: field(h, 6)?,
        devmajor: field(h, 7)?,
        devminor: field(h, 8)?,
        namesize: field(h, 11)?,
        check: field(h, 12)?,
        checksummed,
    };
    let name_at = at + HEADER_LEN;
    let name_end = name_at + header.namesize as usize;
    let name = stream
        .get(name_at..name_end)
        .ok_or("the name runs past the end")?;
    let data_at = name_end.next_multiple_of(4);
    let data = data_at..data_at + header.filesize as usize;
    if data.end > stream.len() {
        return Err("the data runs past the end");
    }
    Ok(Record {
        header,
        name,
        next: data.end.next_multiple_of(4).min(stream.len()),
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{write, Member};
    use alloc::vec::Vec;

    #[test]
    fn an_entry_reads_back_as_written() {
        let mut s = Vec::new();
        let mut m = Member::new("./bin/sh", 0o120777, b"busybox");
        m.ino = 7;
        m.nlink = 2;
        m.mtime = 1_700_000_000;
        write(&mut s, &m);
        write(&mut s, &Member::new("TRAILER!!!", 0, b""));
        let r = read(&s, 0).unwrap();
        assert_eq!(r.name(), Some(&b"./bin/sh"[..]));
        assert_eq!(&s[r.data.clone()], b"busybox");
        assert_eq!(
            (r.header.ino, r.header.mode, r.header.nlink, r.header.mtime),
            (7, 0o120777, 2, 1_700_000_000)
        );
        assert_eq!(r.next % 4, 0);
        assert_eq!(read(&s, r.next).unwrap().name(), Some(TRAILER));
    }

    #[test]
    fn a_damaged_header_says_what_is_wrong() {
        let mut s = Vec::new();
        write(&mut s, &Member::new("init", 0o100755, b"0123456789"));
        assert_eq!(read(&s[..60], 0), Err("the header runs past the end"));
        assert_eq!(
            read(&s[..HEADER_LEN + 8], 0),
            Err("the data runs past the end")
        );
        let mut bad = s.clone();
        bad[6 + 8] = b'x';
        assert_eq!(read(&bad, 0), Err("a header field is not hex"));
        let mut odc = s.clone();
        odc[..6].copy_from_slice(b"070707");
        assert!(read(&odc, 0).unwrap_err().contains("newc only"));
    }
}
