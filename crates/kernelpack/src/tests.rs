use super::*;
use proptest::prelude::*;
use std::io::Cursor;

/// A minimal bzImage: boot flag, `HdrS`, and a version string the header points at.
fn bzimage(release: &str, extra: usize) -> Vec<u8> {
    let mut k = vec![0u8; 0x400 + extra];
    k[0x1FE] = 0x55;
    k[0x1FF] = 0xAA;
    k[0x202..0x206].copy_from_slice(b"HdrS");
    let ptr: u16 = 0x100; // the string is at ptr + 0x200
    k[0x20E..0x210].copy_from_slice(&ptr.to_le_bytes());
    let v = format!("{release} (builder@host) #1 SMP\0");
    k[0x300..0x300 + v.len()].copy_from_slice(v.as_bytes());
    for (i, b) in k.iter_mut().enumerate().skip(0x400) {
        *b = (i * 7 % 251) as u8;
    }
    k
}

fn packed(kernel: &[u8], initrd: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    write(&mut out, kernel, initrd).unwrap();
    out
}

#[test]
fn reads_back_what_it_wrote_with_the_release() {
    let k = bzimage("6.1.0-56-amd64", 5000);
    let i = b"070701 initramfs bytes".repeat(300);
    let bytes = packed(&k, &i);
    assert_eq!(bytes.len() % HEADER_LEN, 0);
    let p = read(Cursor::new(&bytes)).unwrap();
    assert_eq!(p.kernel, k);
    assert_eq!(p.initrd, i);
    assert_eq!(p.header.release, "6.1.0-56-amd64");
    assert_eq!(p.header.total_len(), bytes.len() as u64);
}

#[test]
fn a_kernel_that_is_not_a_bzimage_is_refused_when_packing() {
    let e = write(Vec::new(), b"\x7fELF not a bzImage", b"i").unwrap_err();
    assert!(matches!(e, PackError::NotAKernel), "{e}");
}

#[test]
fn every_damage_is_named() {
    let k = bzimage("6.1.0-56-amd64", 9000);
    let i = vec![3u8; 7000];
    let good = packed(&k, &i);

    let mut b = good.clone();
    b[0] ^= 1;
    assert!(matches!(read(Cursor::new(&b)), Err(PackError::NotAPack(_))));

    let mut b = good.clone();
    b[8] = 2;
    let e = read(Cursor::new(&b)).unwrap_err();
    assert!(matches!(e, PackError::Version(2)));
    assert!(e.to_string().contains("version 2 is not supported"), "{e}");

    let mut b = good.clone();
    b[0x18] ^= 1; // kernel length
    assert!(matches!(
        read(Cursor::new(&b)),
        Err(PackError::HeaderChecksum)
    ));

    let mut b = good.clone();
    b[HEADER_LEN + 0x500] ^= 0x40; // inside the kernel
    let e = read(Cursor::new(&b)).unwrap_err();
    assert!(matches!(e, PackError::Checksum { what: "kernel" }), "{e}");

    let mut b = good.clone();
    let last = b.len() - HEADER_LEN - 1; // inside the initramfs (its last page)
    b[last - 2000] ^= 1;
    let e = read(Cursor::new(&b)).unwrap_err();
    assert!(
        matches!(e, PackError::Checksum { what: "initramfs" }),
        "{e}"
    );

    let b = &good[..good.len() - 2 * HEADER_LEN];
    let e = read(Cursor::new(b)).unwrap_err();
    assert!(e.to_string().contains("truncated"), "{e}");

    let e = read(Cursor::new(&good[..100])).unwrap_err();
    assert!(e.to_string().contains("truncated"), "{e}");
}

#[test]
fn lengths_are_capped_before_anything_is_allocated() {
    let k = bzimage("6.1.0-56-amd64", 0);
    let mut h = Header::new(&k, b"i").unwrap();
    h.initrd_len = MAX_INITRD + 1;
    let e = Header::decode(&h.encode()).unwrap_err();
    assert!(
        matches!(
            e,
            PackError::TooLarge {
                what: "initramfs",
                ..
            }
        ),
        "{e}"
    );

    let mut h = Header::new(&k, b"i").unwrap();
    h.initrd_offset = h.kernel_offset; // overlaps the kernel
    let e = Header::decode(&h.encode()).unwrap_err();
    assert!(matches!(e, PackError::Layout { .. }), "{e}");
}

proptest! {
    #[test]
    fn round_trip(extra in 0usize..20_000, initrd in proptest::collection::vec(any::<u8>(), 0..20_000)) {
        let k = bzimage("6.1.0-1-amd64", extra);
        let p = read(Cursor::new(packed(&k, &initrd))).unwrap();
        prop_assert_eq!(p.kernel, k);
        prop_assert_eq!(p.initrd, initrd);
    }

    #[test]
    fn random_headers_never_panic(bytes in proptest::collection::vec(any::<u8>(), HEADER_LEN..HEADER_LEN + 64)) {
        let _ = Header::decode(&bytes);
    }
}

/// An arm64 `Image`: the magic at byte 56 and the banner somewhere in the kernel's text.
#[test]
fn arm64_image_is_packed_with_the_release_of_its_banner() {
    let mut k = vec![0u8; 8192];
    k[56..60].copy_from_slice(b"ARM\x64");
    // A format string first (not a banner), then init/version.c's banner without the build
    // number, then the one the kernel prints.
    k[3000..3020].copy_from_slice(b"Linux version %s (%s");
    let weak = b"Linux version 6.1.0-56-arm64 (debian-kernel@lists.debian.org) (gcc) # SMP Debian 6.1.192-2 (2026-11-16)\n";
    k[4000..4000 + weak.len()].copy_from_slice(weak);
    let banner = b"Linux version 6.1.0-56-arm64 (debian-kernel@lists.debian.org) (gcc) #1 SMP Debian 6.1.192-2 (2026-11-16)\n";
    k[5000..5000 + banner.len()].copy_from_slice(banner);
    let h = Header::new(&k, b"initrd").unwrap();
    assert_eq!(h.release, "6.1.0-56-arm64");
    // `uname -v` is recorded, and read back from the header block.
    assert_eq!(h.uts_version, "#1 SMP Debian 6.1.192-2 (2026-11-16)");
    let back = Header::decode(&h.encode()).unwrap();
    assert_eq!(back.uts_version, "#1 SMP Debian 6.1.192-2 (2026-11-16)");
    // A bzImage's pack records none (its head carries it).
    assert_eq!(
        Header::new(&bzimage("6.1.0-56-amd64", 0), b"i")
            .unwrap()
            .uts_version,
        ""
    );
    let mut no_banner = k.clone();
    no_banner[5000..5014].copy_from_slice(b"Linux versio_ ");
    no_banner[4000..4014].copy_from_slice(b"Linux versio_ ");
    assert!(matches!(
        Header::new(&no_banner, b"i"),
        Err(PackError::NotAKernel)
    ));
}

/// The release is kept in 64 bytes without allocating: cut on a character boundary, read
/// back up to its NUL or its first byte that is not UTF-8.
#[test]
fn a_release_fits_its_field_whole_characters_only() {
    let long = "6.1.0-".to_string() + &"é".repeat(40);
    let r = Release::new(&long);
    assert_eq!(r.as_str().len(), 64);
    assert!(long.starts_with(r.as_str()));
    let odd = "x".repeat(63) + "é";
    assert_eq!(Release::new(&odd).as_str(), "x".repeat(63));
    let k = bzimage("6.1.0-56-amd64", 0);
    let mut block = Header::new(&k, b"i").unwrap().encode();
    block[0x70 + 5] = 0xFF;
    // A damaged release field is caught by the header checksum first...
    assert!(matches!(
        Header::decode(&block),
        Err(PackError::HeaderChecksum)
    ));
    // ...and read only up to its valid part if the checksum is made to match.
    let h = blake3::hash(&block[..0xFE0]);
    block[0xFE0..].copy_from_slice(h.as_bytes());
    assert_eq!(Header::decode(&block).unwrap().release, "6.1.0");
}

/// A payload checked in pieces (the restorer reads the bzImage's setup apart from the rest)
/// checks as the whole.
#[test]
fn a_payload_checks_the_same_in_pieces() {
    let k = bzimage("6.1.0-56-amd64", 9000);
    let h = Header::new(&k, b"initramfs").unwrap();
    h.check(Payload::Kernel, [&k[..]]).unwrap();
    h.check(Payload::Kernel, [&k[..512], &k[512..700], &k[700..]])
        .unwrap();
    h.check(Payload::Initramfs, [&b"initr"[..], &b"amfs"[..]])
        .unwrap();
    assert!(matches!(
        h.check(Payload::Kernel, [&k[1..]]),
        Err(PackError::Checksum { what: "kernel" })
    ));
    assert_eq!(
        (h.offset(Payload::Initramfs), h.len(Payload::Kernel)),
        (h.initrd_offset, h.kernel_len)
    );
}

#[test]
fn a_bzimage_packs_with_the_release_its_setup_header_names() {
    let mut k = bzimage("6.1.0-56-amd64", 0);
    assert_eq!(kernel_release(&k).unwrap(), "6.1.0-56-amd64");
    // No version string: still a kernel kexec loads, packed without a release.
    k[0x20E..0x210].fill(0);
    assert_eq!(kernel_release(&k).unwrap(), "");
    assert!(matches!(
        kernel_release(&k[..0x210]),
        Err(PackError::NotAKernel)
    ));
}

/// A summary goes after the initramfs, on a block of its own, named and checked by the
/// header; packs without one read as before, and a damaged one is caught.
#[test]
fn a_summary_rides_after_the_initramfs() {
    let k = bzimage("6.1.0-56-amd64", 5000);
    let mut bytes = Vec::new();
    let h = write_with_summary(&mut bytes, &k, b"initramfs", Some(b"the summary")).unwrap();
    assert!(h.has_summary());
    assert_eq!(h.offset(Payload::Summary), h.initrd_offset + 4096);
    assert_eq!(bytes.len() as u64, h.total_len());
    let p = read(Cursor::new(&bytes)).unwrap();
    assert_eq!(p.summary.as_deref(), Some(&b"the summary"[..]));
    assert_eq!(p.initrd, b"initramfs");

    let plain = packed(&k, b"initramfs");
    let p = read(Cursor::new(&plain)).unwrap();
    assert!(!p.header.has_summary() && p.summary.is_none());
    assert_eq!(plain.len() as u64, p.header.total_len());

    let mut bad = bytes.clone();
    let at = h.summary.0 as usize;
    bad[at] ^= 1;
    assert!(matches!(
        read(Cursor::new(&bad)),
        Err(PackError::Checksum {
            what: "initramfs summary"
        })
    ));
    // A summary said to lie inside the initramfs is refused before anything is read.
    let mut h2 = h.clone();
    h2.summary.0 = h.initrd_offset;
    assert!(matches!(
        Header::decode(&h2.encode()),
        Err(PackError::SummaryLayout { .. })
    ));
    let big = vec![0u8; (MAX_SUMMARY + 1) as usize];
    assert!(matches!(
        write_with_summary(Vec::new(), &k, b"i", Some(&big)),
        Err(PackError::TooLarge { .. })
    ));
}
