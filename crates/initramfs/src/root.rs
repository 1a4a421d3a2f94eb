//! The root an initramfs builds: every path the kernel would create, with the mode, mtime
//! and data it would give it, as `init/initramfs.c` does entry by entry:
//!
//! - an entry of a path that exists with another type removes it first (a directory only
//!   when empty: otherwise the entry is not made); a symbolic link always replaces;
//! - a regular file of an existing one rewrites it in place (every hard link of it sees
//!   the new data), a directory or device of an existing one keeps it and takes the new
//!   mode and mtime;
//! - within one archive, names with `nlink` > 1 and the same inode, device and type are
//!   hard links of the first one seen: they share its data, and a later one's non-empty
//!   data replaces it (`cpio` writes the data with the last name only);
//! - names lose `./`, `.` and empty components (`..` goes up, never past the root); the
//!   root itself is not an entry;
//! - entries the kernel skips are skipped: a name of 0 or more than `PATH_MAX` bytes, a
//!   symbolic link target of more than `PATH_MAX`, data on anything but a regular file or
//!   a symbolic link, an unknown type.
//!
//! Not modelled: a parent directory missing (or reached through a symbolic link), which
//! the kernel would not create or would follow; the entry is kept under its own path.

use crate::compression::Compression;
use crate::newc::{Header, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK};
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

/// What kind of file an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A symbolic link: its data is the target.
    Symlink,
    /// A regular file.
    Regular,
    /// A device node, FIFO or socket.
    Other,
}

/// One path of the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry<'r> {
    /// Its path: relative, `/`-separated, without `.` or empty components.
    pub path: &'r str,
    /// `st_mode`: type and permission bits.
    pub mode: u32,
    /// Modification time, seconds since the epoch.
    pub mtime: u32,
    /// How many paths of the root name this file (hard links).
    pub links: u32,
    data: &'r [u8],
}

impl<'r> Entry<'r> {
    /// A regular file's contents, a symbolic link's target; empty for the others.
    pub fn data(&self) -> &'r [u8] {
        self.data
    }

    /// Its kind, from the type bits of its mode.
    pub fn kind(&self) -> Kind {
        match self.mode & S_IFMT {
            S_IFDIR => Kind::Dir,
            S_IFLNK => Kind::Symlink,
            S_IFREG => Kind::Regular,
            _ => Kind::Other,
        }
    }
}

/// One segment of the bytes handed in: an uncompressed archive or a compressed stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Where it starts.
    pub at: usize,
    /// Bytes of the input it spans.
    pub len: usize,
    /// Its compression; `None`: an uncompressed cpio archive.
    pub compression: Option<Compression>,
    /// Bytes of cpio it holds (`len` when uncompressed).
    pub unpacked: usize,
}

/// The root an initramfs builds ([`crate::unpack`]); its entries borrow the bytes handed
/// in (uncompressed archives) and the buffers it owns (what compressed streams unpacked to).
#[derive(Debug)]
pub struct Root<'a> {
    pub(crate) input: &'a [u8],
    pub(crate) buffers: Vec<Vec<u8>>,
    pub(crate) tree: Tree,
    pub(crate) segments: Vec<Segment>,
}

impl<'a> Root<'a> {
    pub(crate) fn new(input: &'a [u8]) -> Self {
        Root {
            input,
            buffers: Vec::new(),
            tree: Tree::default(),
            segments: Vec::new(),
        }
    }

    /// The entry at `path` (`/init`, `./init` and `init` are one path).
    pub fn get(&self, path: &str) -> Option<Entry<'_>> {
        let (p, &i) = self.tree.paths.get_key_value(normalize(path).as_str())?;
        Some(self.entry(p, i))
    }

    /// Every entry, in bytewise order of their paths.
    pub fn iter(&self) -> impl Iterator<Item = Entry<'_>> + '_ {
        self.tree.paths.iter().map(|(p, &i)| self.entry(p, i))
    }

    /// How many paths the root has (the root itself not counted).
    pub fn len(&self) -> usize {
        self.tree.paths.len()
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.tree.paths.is_empty()
    }

    /// The segments of the bytes handed in, in order.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    fn entry<'r>(&'r self, path: &'r str, i: usize) -> Entry<'r> {
        let n = &self.tree.inodes[i];
        let d = n.data;
        let bytes = match d.source {
            Source::Input => self.input,
            Source::Buffer(b) => &self.buffers[b],
        };
        Entry {
            path,
            mode: n.mode,
            mtime: n.mtime,
            links: n.names,
            data: &bytes[d.start..d.start + d.len],
        }
    }
}

/// `path` as the root keys it: no leading `/`, no `.` or empty components, `..` resolved.
pub(crate) fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    parts.join("/")
}

/// Which bytes hold a file's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The bytes handed in.
    Input,
    /// The root's buffer with this index.
    Buffer(usize),
}

/// A file's data: `len` bytes at `start` of `source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Data {
    pub source: Source,
    pub start: usize,
    pub len: usize,
}

/// A file the root holds, under one or more paths.
#[derive(Debug, Clone, Copy)]
struct Inode {
    mode: u32,
    mtime: u32,
    data: Data,
    /// Paths naming it.
    names: u32,
}

/// A hard link's identity within an archive: inode, device, type (the kernel's `find_link`).
type LinkKey = (u32, u32, u32, u32);

/// What a hard link attempt did (the kernel's `maybe_link`).
enum Link {
    /// Not a link (one name, or the first of its group).
    None,
    /// The path now names the group's file.
    Made,
    /// The link could not be made: the entry is dropped.
    Failed,
}

/// Paths to files, and the hard link groups of the archive being read.
#[derive(Debug, Default)]
pub(crate) struct Tree {
    paths: BTreeMap<String, usize>,
    inodes: Vec<Inode>,
    links: BTreeMap<LinkKey, String>,
}

impl Tree {
    /// An archive ended: its hard link groups end with it (the kernel's `free_hash`).
    pub(crate) fn end_archive(&mut self) {
        self.links.clear();
    }

    /// Applies one entry (header `h`, normalized non-empty `path`, its `data`), as the
    /// kernel's `do_name`/`do_symlink` would.
    pub(crate) fn add(&mut self, h: &Header, path: String, data: Data) {
        let kind = h.mode & S_IFMT;
        let new = Inode {
            mode: h.mode,
            mtime: h.mtime,
            data,
            names: 1,
        };
        if kind == S_IFLNK {
            self.clean(&path, None);
            if !self.paths.contains_key(&path) {
                self.insert(path, new);
            }
            return;
        }
        self.clean(&path, Some(kind));
        match kind {
            S_IFREG => match self.maybe_link(h, &path) {
                Link::Failed => {}
                Link::Made => self.update(&path, &new, data.len > 0),
                Link::None => match self.kind_at(&path) {
                    None => self.insert(path, new),
                    Some(S_IFREG) => self.update(&path, &new, true),
                    Some(_) => {}
                },
            },
            S_IFDIR => match self.kind_at(&path) {
                None => self.insert(path, new),
                Some(S_IFDIR) => self.update(&path, &new, false),
                Some(_) => {}
            },
            S_IFBLK | S_IFCHR | S_IFIFO | S_IFSOCK => match self.maybe_link(h, &path) {
                Link::Failed | Link::Made => {}
                Link::None => match self.kind_at(&path) {
                    None => self.insert(path, new),
                    Some(k) if k == kind => self.update(&path, &new, false),
                    Some(_) => {}
                },
            },
            _ => {}
        }
    }

    fn kind_at(&self, path: &str) -> Option<u32> {
        self.paths.get(path).map(|&i| self.inodes[i].mode & S_IFMT)
    }

    fn insert(&mut self, path: String, inode: Inode) {
        self.inodes.push(inode);
        self.paths.insert(path, self.inodes.len() - 1);
    }

    /// The file at `path` takes `new`'s mode and mtime, and its data when `data`.
    fn update(&mut self, path: &str, new: &Inode, data: bool) {
        let Some(&i) = self.paths.get(path) else {
            return;
        };
        let n = &mut self.inodes[i];
        n.mode = new.mode;
        n.mtime = new.mtime;
        if data {
            n.data = new.data;
        }
    }

    /// Removes what is at `path` unless it has type `kind` (`None`: whatever it is), as
    /// the kernel's `clean_path`; a directory that still has entries stays (`rmdir` fails).
    fn clean(&mut self, path: &str, kind: Option<u32>) {
        let Some(old) = self.kind_at(path) else {
            return;
        };
        if Some(old) == kind || (old == S_IFDIR && self.has_children(path)) {
            return;
        }
        if let Some(i) = self.paths.remove(path) {
            self.inodes[i].names -= 1;
        }
    }

    fn has_children(&self, dir: &str) -> bool {
        let mut prefix = String::from(dir);
        prefix.push('/');
        self.paths
            .range(prefix.clone()..)
            .next()
            .is_some_and(|(p, _)| p.starts_with(&prefix))
    }

    /// The kernel's `maybe_link`: the first name of a group is remembered; a later one is
    /// made a link to the file that name holds (what is at the later path removed first).
    fn maybe_link(&mut self, h: &Header, path: &str) -> Link {
        if h.nlink < 2 {
            return Link::None;
        }
        let key = (h.ino, h.devmajor, h.devminor, h.mode & S_IFMT);
        let Some(first) = self.links.get(&key).cloned() else {
            self.links.insert(key, path.into());
            return Link::None;
        };
        self.clean(path, None);
        let Some(&i) = self.paths.get(&first) else {
            return Link::Failed;
        };
        if self.paths.contains_key(path) || self.inodes[i].mode & S_IFMT == S_IFDIR {
            return Link::Failed;
        }
        self.paths.insert(path.into(), i);
        self.inodes[i].names += 1;
        Link::Made
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{archive, archive_of, Member};
    use crate::{unpack, Kind};
    use alloc::vec::Vec;

    #[test]
    fn a_later_entry_replaces_an_earlier_one_as_the_kernels_does() {
        let mut bytes = archive(&[
            (".", 0o040755, b""),
            ("etc", 0o040755, b""),
            ("etc/conf", 0o100644, b"first version"),
            ("lib", 0o040755, b""),
            ("lib/x", 0o100644, b"x"),
            ("run", 0o040755, b""),
            ("sbin", 0o120777, b"bin"),
        ]);
        bytes.extend(archive(&[
            // A regular file rewritten in place: new data, mode, mtime.
            ("./etc/conf", 0o100600, b"second"),
            // A directory again: kept, new mode.
            ("etc", 0o040700, b""),
            // Another type over a directory with entries: rmdir fails, not made.
            ("lib", 0o100644, b"not a dir"),
            // Another type over an empty directory: replaced.
            ("run", 0o120777, b"/tmp"),
            // A symbolic link replaced by a directory.
            ("sbin", 0o040755, b""),
            // Data on a directory: the kernel skips the entry.
            ("data-dir", 0o040755, b"junk"),
            ("a/../b/./c", 0o100644, b"c"),
        ]));
        let root = unpack(&bytes).unwrap();
        let paths: Vec<&str> = root.iter().map(|e| e.path).collect();
        assert_eq!(
            paths,
            ["b/c", "etc", "etc/conf", "lib", "lib/x", "run", "sbin"]
        );
        let conf = root.get("/etc/conf").unwrap();
        assert_eq!((conf.data(), conf.mode), (&b"second"[..], 0o100600));
        assert_eq!(root.get("etc").unwrap().mode, 0o040700);
        assert_eq!(root.get("lib").unwrap().kind(), Kind::Dir);
        assert_eq!(root.get("run").unwrap().kind(), Kind::Symlink);
        assert_eq!(root.get("run").unwrap().data(), b"/tmp");
        assert_eq!(root.get("sbin").unwrap().kind(), Kind::Dir);
    }

    #[test]
    fn hard_links_share_the_data_written_with_the_last_name() {
        let link = |name, data: &'static [u8]| Member {
            ino: 42,
            nlink: 3,
            mtime: 7,
            ..Member::new(name, 0o100755, data)
        };
        let mut bytes = archive_of(&[
            link("bin/a", b""),
            link("bin/b", b""),
            link("bin/c", b"shared data"),
            Member::new("other", 0o100644, b"o"),
        ]);
        // The next archive's inode 42 is another file; rewriting bin/a reaches its links.
        bytes.extend(archive_of(&[link("x", b"new file")]));
        bytes.extend(archive(&[("bin/b", 0o100700, b"rewritten")]));
        let root = unpack(&bytes).unwrap();
        for p in ["bin/a", "bin/b", "bin/c"] {
            let e = root.get(p).unwrap();
            assert_eq!(
                (e.data(), e.links, e.mode),
                (&b"rewritten"[..], 3, 0o100700),
                "{p}"
            );
        }
        assert_eq!(root.get("x").unwrap().data(), b"new file");
        assert_eq!(root.get("x").unwrap().links, 1);
        assert_eq!(root.get("bin/a").unwrap().mtime, 0);
    }
}
