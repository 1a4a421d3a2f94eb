//! The walk over the bytes handed in, as the kernel's `unpack_to_rootfs`: zero bytes are
//! padding; a `0` at a multiple of 4 bytes starts an uncompressed archive; anything else
//! is a compressed stream by its magic, whose output must be whole archives (padding
//! between and after them allowed), and after which the walk goes on.

use crate::compression::{self, Compression, StreamError};
use crate::error::{ArchiveError, Place};
use crate::newc::{self, PATH_MAX, S_IFLNK, S_IFMT, S_IFREG, TRAILER};
use crate::root::{normalize, Data, Root, Segment, Source, Tree};

/// The default cap on what compressed streams may unpack to, all together (512 MiB).
pub const DEFAULT_LIMIT: usize = 512 << 20;

/// The root the kernel would build from `bytes`, decompressing at most [`DEFAULT_LIMIT`].
pub fn unpack(bytes: &[u8]) -> Result<Root<'_>, ArchiveError> {
    unpack_with_limit(bytes, DEFAULT_LIMIT)
}

/// The root the kernel would build from `bytes`, its compressed streams unpacking to at
/// most `limit` bytes together (refused with [`ArchiveError::TooLarge`] past it).
pub fn unpack_with_limit(bytes: &[u8], limit: usize) -> Result<Root<'_>, ArchiveError> {
    let mut root = Root::new(bytes);
    let mut unpacked = 0;
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == 0 {
            at += 1;
            continue;
        }
        if bytes[at] == b'0' && at % 4 == 0 {
            let end = archive(bytes, at, Source::Input, None, &mut root.tree)?;
            root.segments.push(Segment {
                at,
                len: end - at,
                compression: None,
                unpacked: end - at,
            });
            at = end;
            continue;
        }
        let Some(format) = Compression::detect(&bytes[at..]) else {
            let mut magic = [0; 6];
            let n = (bytes.len() - at).min(6);
            magic[..n].copy_from_slice(&bytes[at..at + n]);
            return Err(ArchiveError::Unknown { at, magic });
        };
        let out =
            compression::unpack(format, &bytes[at..], limit - unpacked).map_err(|e| match e {
                StreamError::Unsupported => ArchiveError::Unsupported { at, format },
                StreamError::TooLarge(n) => ArchiveError::TooLarge {
                    at,
                    format,
                    unpacked: unpacked + n,
                    limit,
                },
                StreamError::Damaged(why) => ArchiveError::Stream { at, format, why },
            })?;
        let source = Source::Buffer(root.buffers.len());
        stream(&out.data, source, (format, at), &mut root.tree)?;
        unpacked += out.data.len();
        root.segments.push(Segment {
            at,
            len: out.consumed,
            compression: Some(format),
            unpacked: out.data.len(),
        });
        root.buffers.push(out.data);
        at += out.consumed;
    }
    Ok(root)
}

/// The archives of a compressed stream's output `data` (the stream `of`).
fn stream(
    data: &[u8],
    source: Source,
    of: (Compression, usize),
    tree: &mut Tree,
) -> Result<(), ArchiveError> {
    let mut at = 0;
    while at < data.len() {
        let why = match data[at] {
            0 => {
                at += 1;
                continue;
            }
            b'0' if at % 4 == 0 => {
                at = archive(data, at, source, Some(of), tree)?;
                continue;
            }
            b'0' => "an archive starts off a 4-byte boundary (broken padding)",
            _ => "junk between archives in the compressed stream",
        };
        let place = Place {
            at,
            stream: Some(of),
        };
        return Err(ArchiveError::Damaged { place, why });
    }
    Ok(())
}

/// Applies the archive starting at `start` of `data` (the bytes handed in, or the output
/// of stream `of`) to `tree`; returns where it ends, after its trailer.
fn archive(
    data: &[u8],
    start: usize,
    source: Source,
    of: Option<(Compression, usize)>,
    tree: &mut Tree,
) -> Result<usize, ArchiveError> {
    let mut at = start;
    loop {
        let place = Place { at, stream: of };
        let damaged = |why| ArchiveError::Damaged { place, why };
        let r = newc::read(data, at).map_err(damaged)?;
        at = r.next;
        let h = r.header;
        let kind = h.mode & S_IFMT;
        // What the kernel's do_header skips without reading the name.
        if h.namesize == 0
            || h.namesize > PATH_MAX
            || (kind == S_IFLNK && h.filesize > PATH_MAX)
            || (kind != S_IFLNK && kind != S_IFREG && h.filesize > 0)
        {
            continue;
        }
        let name = r.name().ok_or(damaged("its name has no NUL at its end"))?;
        if name == TRAILER {
            tree.end_archive();
            return Ok(at);
        }
        let name = core::str::from_utf8(name).map_err(|_| damaged("its name is not UTF-8"))?;
        let path = normalize(name);
        if path.is_empty() {
            // The root itself.
            continue;
        }
        let bytes = &data[r.data.clone()];
        if h.checksummed && kind == S_IFREG {
            let got = bytes.iter().fold(0u32, |s, &b| s.wrapping_add(b as u32));
            if got != h.check {
                return Err(ArchiveError::Checksum {
                    place,
                    path,
                    want: h.check,
                    got,
                });
            }
        }
        let d = Data {
            source,
            start: r.data.start,
            len: r.data.len(),
        };
        tree.add(&h, path, d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compression::tests::{gzip_of, lz4_of, zstd_of};
    use crate::testing::{archive, archive_of, Member};
    use crate::Kind;
    use std::vec::Vec;

    fn early_and_main() -> (Vec<u8>, Vec<u8>) {
        let early = archive(&[
            ("kernel", 0o040755, b""),
            ("kernel/x86", 0o040755, b""),
            ("kernel/x86/microcode", 0o040755, b""),
            ("kernel/x86/microcode/GenuineIntel.bin", 0o100644, b"ucode"),
        ]);
        let main = archive(&[
            (".", 0o040755, b""),
            ("init", 0o100755, b"#!/bin/sh\nexec /sbin/init\n"),
            ("bin", 0o040755, b""),
            ("bin/sh", 0o120777, b"busybox"),
            ("dev", 0o040755, b""),
            ("dev/console", 0o020600, b""),
        ]);
        (early, main)
    }

    fn paths(root: &Root) -> Vec<String> {
        root.iter().map(|e| e.path.into()).collect()
    }

    #[test]
    fn an_early_cpio_then_each_compression_unpack_to_one_root() {
        let (early, main) = early_and_main();
        let mut two = main.clone();
        two.extend_from_slice(&[0; 12]);
        two.extend(archive(&[("init", 0o100700, b"second")]));
        for (format, packed) in [
            (Some(Compression::Zstd), zstd_of(&two)),
            (Some(Compression::Gzip), gzip_of(&two)),
            (Some(Compression::Lz4), lz4_of(&two, 64)),
            (None, two.clone()),
        ] {
            let mut bytes = early.clone();
            bytes.extend_from_slice(&[0; 512]);
            let at = bytes.len();
            bytes.extend_from_slice(&packed);
            bytes.extend_from_slice(&[0; 3]);
            let root = unpack(&bytes).unwrap();
            assert_eq!(
                paths(&root),
                [
                    "bin",
                    "bin/sh",
                    "dev",
                    "dev/console",
                    "init",
                    "kernel",
                    "kernel/x86",
                    "kernel/x86/microcode",
                    "kernel/x86/microcode/GenuineIntel.bin"
                ],
                "{format:?}"
            );
            let init = root.get("init").unwrap();
            assert_eq!((init.data(), init.mode), (&b"second"[..], 0o100700));
            assert_eq!(root.get("dev/console").unwrap().kind(), Kind::Other);
            let s = root.segments();
            assert_eq!(
                s[0],
                Segment {
                    at: 0,
                    len: early.len(),
                    compression: None,
                    unpacked: early.len()
                }
            );
            match format {
                Some(f) => {
                    assert_eq!(s.len(), 2);
                    assert_eq!(
                        (s[1].at, s[1].len, s[1].compression),
                        (at, packed.len(), Some(f))
                    );
                    assert_eq!(s[1].unpacked, two.len());
                }
                None => assert_eq!(s.len(), 3),
            }
        }
    }

    #[test]
    fn what_does_not_unpack_is_named_with_its_offset() {
        let (early, main) = early_and_main();
        let at = early.len();
        let with = |tail: &[u8]| [&early[..], tail].concat();
        // An unsupported compression.
        let e = unpack(&with(b"\xfd7zXZ\0\0\0")).unwrap_err();
        assert_eq!(
            e,
            ArchiveError::Unsupported {
                at,
                format: Compression::Xz
            }
        );
        assert!(
            e.to_string()
                .contains(&format!("at byte {at} is xz-compressed: not supported")),
            "{e}"
        );
        // Bytes that are nothing.
        assert!(
            matches!(unpack(&with(b"hello world")), Err(ArchiveError::Unknown { at: a, .. }) if a == at)
        );
        // A cut zstd stream.
        let z = zstd_of(&main);
        match unpack(&with(&z[..z.len() - 20])).unwrap_err() {
            ArchiveError::Stream {
                at: a,
                format: Compression::Zstd,
                ..
            } => assert_eq!(a, at),
            other => panic!("{other}"),
        }
        // A stream whose output ends inside an archive.
        let e = unpack(&with(&zstd_of(&main[..main.len() - 60]))).unwrap_err();
        match &e {
            ArchiveError::Damaged { place, .. } => {
                assert_eq!(place.stream, Some((Compression::Zstd, at)))
            }
            other => panic!("{other}"),
        }
        assert!(
            e.to_string()
                .contains(&format!("of the zstd stream at byte {at}")),
            "{e}"
        );
        // An uncompressed archive cut inside an entry.
        let cut = &main[..main.len() - 200];
        let e = unpack(cut).unwrap_err();
        assert!(
            matches!(
                e,
                ArchiveError::Damaged {
                    place: Place { stream: None, .. },
                    ..
                }
            ),
            "{e}"
        );
        // A 070702 entry whose data does not sum to its check field.
        let mut m = Member::new("init", 0o100755, b"abc");
        m.checksummed = true;
        let mut bad = archive_of(&[m]);
        assert!(unpack(&bad).is_ok());
        let data = bad.iter().position(|&b| b == b'a').unwrap();
        bad[data] = b'b';
        assert!(matches!(
            unpack(&bad),
            Err(ArchiveError::Checksum {
                want: 0x126,
                got: 0x127,
                ..
            })
        ));
    }

    #[test]
    fn decompression_stops_at_the_limit() {
        let big = archive(&[("zeros", 0o100644, &[0u8; 200_000])]);
        let bytes = [zstd_of(&big), zstd_of(&big)].concat();
        assert_eq!(unpack_with_limit(&bytes, 2 * big.len()).unwrap().len(), 1);
        let e = unpack_with_limit(&bytes, big.len() + 1000).unwrap_err();
        match e {
            ArchiveError::TooLarge {
                at,
                unpacked,
                limit,
                ..
            } => {
                assert_eq!(at, bytes.len() / 2);
                assert_eq!(limit, big.len() + 1000);
                assert!(unpacked > limit);
            }
            other => panic!("{other}"),
        }
    }

    /// The board's Debian initramfs (initramfs-tools, zstd), when built
    /// (`snapboot board build --workload debian`), against `zstd -dc | cpio`.
    #[test]
    fn the_debian_initramfs_unpacks_as_cpio_lists_it() {
        use std::process::Command;
        let home = std::env::var("SNAPBOOT_HOME").unwrap_or_else(|_| ".snapboot".into());
        let file = std::path::Path::new(&home).join("bundles/debian/initramfs.cpio");
        let Ok(bytes) = std::fs::read(&file) else {
            println!(
                "skipped: no {} (snapboot board build --workload debian)",
                file.display()
            );
            return;
        };
        let t = std::time::Instant::now();
        let root = unpack(&bytes).unwrap();
        let unpack_ms = t.elapsed().as_secs_f64() * 1e3;
        let t = std::time::Instant::now();
        let mut hasher = blake3::Hasher::new();
        for e in root.iter() {
            hasher.update(e.path.as_bytes());
            hasher.update(e.data());
        }
        let hash_ms = t.elapsed().as_secs_f64() * 1e3;
        let unpacked: usize = root.segments().iter().map(|s| s.unpacked).sum();
        println!(
            "{}: {} bytes in {:?}, {unpacked} bytes of cpio, {} paths: unpacked in {unpack_ms:.1} ms, \
             hashed in {hash_ms:.1} ms",
            file.display(),
            bytes.len(),
            root.segments().iter().map(|s| s.compression).collect::<Vec<_>>(),
            root.len()
        );
        let sh = |cmd: &str| {
            let out = Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .arg("sh")
                .arg(&file)
                .output()
                .unwrap();
            assert!(out.status.success(), "{cmd}");
            out.stdout
        };
        let listed = String::from_utf8(sh(r#"zstd -dc "$1" | cpio -t --quiet"#)).unwrap();
        let mut want: Vec<String> = listed
            .lines()
            .map(normalize)
            .filter(|p| !p.is_empty())
            .collect();
        want.sort();
        want.dedup();
        assert_eq!(paths(&root), want);
        let init = sh(r#"zstd -dc "$1" | cpio -i --quiet --to-stdout init"#);
        assert_eq!(root.get("init").unwrap().data(), &init[..]);
        assert_eq!(root.get("init").unwrap().kind(), Kind::Regular);
    }
}
