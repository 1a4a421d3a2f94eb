//! Newc archives for tests (feature `testing`): the bytes `cpio -H newc` would write.

use alloc::vec::Vec;

/// One entry to write.
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    /// Its name as stored (`./` and all).
    pub name: &'a str,
    /// Type and permission bits.
    pub mode: u32,
    /// Its data.
    pub data: &'a [u8],
    /// Inode number.
    pub ino: u32,
    /// Link count.
    pub nlink: u32,
    /// Modification time.
    pub mtime: u32,
    /// Written as `070702` with the data's byte sum in the check field.
    pub checksummed: bool,
}

impl<'a> Member<'a> {
    /// An entry with inode 0, one link, mtime 0 and no checksum.
    pub fn new(name: &'a str, mode: u32, data: &'a [u8]) -> Self {
        Member {
            name,
            mode,
            data,
            ino: 0,
            nlink: 1,
            mtime: 0,
            checksummed: false,
        }
    }
}

/// Appends `m` to `out` (which holds whole entries: its length is a multiple of 4).
pub fn write(out: &mut Vec<u8>, m: &Member) {
    let sum = m.data.iter().fold(0u32, |s, &b| s.wrapping_add(b as u32));
    let fields = [
        m.ino,
        m.mode,
        0,
        0,
        m.nlink,
        m.mtime,
        m.data.len() as u32,
        0,
        0,
        0,
        0,
        m.name.len() as u32 + 1,
        if m.checksummed { sum } else { 0 },
    ];
    out.extend_from_slice(if m.checksummed { b"070702" } else { b"070701" });
    for f in fields {
        out.extend_from_slice(alloc::format!("{f:08X}").as_bytes());
    }
    out.extend_from_slice(m.name.as_bytes());
    out.push(0);
    out.resize(out.len().next_multiple_of(4), 0);
    out.extend_from_slice(m.data);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// An archive of `members` with its trailer.
pub fn archive_of(members: &[Member]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in members {
        write(&mut out, m);
    }
    write(&mut out, &Member::new("TRAILER!!!", 0, b""));
    out
}

/// An archive of `files` (name, mode, data), each its own inode, with its trailer.
pub fn archive(files: &[(&str, u32, &[u8])]) -> Vec<u8> {
    let members: Vec<Member> = files
        .iter()
        .enumerate()
        .map(|(i, (name, mode, data))| Member {
            ino: i as u32 + 1,
            ..Member::new(name, *mode, data)
        })
        .collect();
    archive_of(&members)
}
