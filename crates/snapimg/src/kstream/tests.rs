//! Tests of the stream header, parser and producers.

use super::page::le_u64;
use super::*;

fn page_of(bytes: &[u8], i: usize) -> &Page {
    bytes[i * PAGE_SIZE..(i + 1) * PAGE_SIZE]
        .try_into()
        .unwrap()
}

#[test]
fn header_roundtrip_and_offsets() {
    let h = StreamHeader::x86_64(1000, 4096, 0xdead_beef);
    let p = h.encode();
    assert_eq!(le_u64(&p[..], 24), X86_64_RESTORE_MAGIC);
    assert_eq!(le_u64(&p[..], 416), 1000);
    assert_eq!(le_u64(&p[..], 424), 1000 + 2 + 1);
    assert_eq!(le_u64(&p[..], 432), 1003 * 4096);
    assert_eq!(StreamHeader::parse(&p).unwrap(), h);
    assert_eq!(h.meta_pages(), PageCount(2));
}

#[test]
fn generic_utsname_header() {
    let mut h = StreamHeader::x86_64(10, 100, 0);
    h.arch = ArchRecord::Utsname {
        sysname: "Linux".into(),
        release: "6.1.0".into(),
        version: "#1 SMP".into(),
        machine: "aarch64".into(),
        version_code: 0x060100,
    };
    assert_eq!(StreamHeader::parse(&h.encode()).unwrap(), h);
}

#[test]
fn header_validation_errors() {
    let mut p = StreamHeader::x86_64(1000, 4096, 0).encode();
    p[24] ^= 1;
    assert!(matches!(
        StreamHeader::parse(&p),
        Err(StreamError::UnknownArch { .. })
    ));

    let mut h = StreamHeader::x86_64(1000, 4096, 0);
    h.size += 1;
    assert_eq!(
        StreamHeader::parse(&h.encode()),
        Err(StreamError::SizeMismatch {
            size: 1003 * 4096 + 1,
            pages: 1003
        })
    );
    let mut h = StreamHeader::x86_64(1000, 4096, 0);
    h.pages = PageCount(1001);
    h.size = 1001 * 4096;
    assert!(matches!(
        StreamHeader::parse(&h.encode()),
        Err(StreamError::MetaTooSmall {
            meta_pages: 0,
            image_pages: 1000,
            needed: 2
        })
    ));
    let h = StreamHeader::x86_64(1000, 999, 0);
    assert!(matches!(
        StreamHeader::parse(&h.encode()),
        Err(StreamError::ImageLargerThanRam { .. })
    ));
}

#[test]
fn parser_walks_phases() {
    let s = synthetic_stream(600, 7);
    assert_eq!(s.len(), (600 + 2 + 1) * PAGE_SIZE);
    let mut p = StreamParser::new();
    assert_eq!(p.phase(), Phase::Header);
    assert_eq!(p.push_page(page_of(&s, 0)).unwrap(), PageKind::Header);
    assert_eq!(p.phase(), Phase::Meta);
    assert_eq!(
        p.push_page(page_of(&s, 1)).unwrap(),
        PageKind::Meta { index: 0 }
    );
    assert_eq!(
        p.push_page(page_of(&s, 2)).unwrap(),
        PageKind::Meta { index: 1 }
    );
    assert_eq!(p.phase(), Phase::Data);
    assert!(p.finish().is_err());
    for i in 3..603 {
        assert_eq!(
            p.push_page(page_of(&s, i)).unwrap(),
            PageKind::Data {
                index: i as u64 - 3
            }
        );
    }
    assert_eq!(p.phase(), Phase::Done);
    assert_eq!(p.finish().unwrap().image_pages, PageCount(600));
    assert_eq!(
        p.push_page(page_of(&s, 3)),
        Err(StreamError::PastEnd { pages: 603 })
    );
}

#[test]
fn parser_rejects_bad_pfn_index() {
    let s = synthetic_stream(100, 1);
    let mut meta = *page_of(&s, 1);
    // Drop the last PFN: count no longer matches.
    meta[99 * 8..100 * 8].copy_from_slice(&PFN_END_OF_MAP.to_le_bytes());
    let mut p = StreamParser::new();
    p.push_page(page_of(&s, 0)).unwrap();
    assert_eq!(
        p.push_page(&meta),
        Err(StreamError::PfnCount {
            listed: 99,
            image_pages: 100
        })
    );
    // Swap two PFNs: not ascending.
    let mut meta = *page_of(&s, 1);
    let (a, b) = (le_u64(&meta, 0), le_u64(&meta, 8));
    meta[0..8].copy_from_slice(&b.to_le_bytes());
    meta[8..16].copy_from_slice(&a.to_le_bytes());
    let mut p = StreamParser::new();
    p.push_page(page_of(&s, 0)).unwrap();
    assert!(matches!(
        p.push_page(&meta),
        Err(StreamError::PfnNotIncreasing { entry: 1, .. })
    ));
}

#[test]
fn zero_flagged_pfns_have_no_data_page() {
    // Newer kernels: 3 listed pages, one of them all-zero, 2 data pages.
    let h = StreamHeader::x86_64(2, 100, 0);
    assert_eq!(h.pages, PageCount(4));
    let mut meta = [0u8; PAGE_SIZE];
    for (i, v) in [10u64, 11 | PFN_ZERO_FLAG, 12, PFN_END_OF_MAP]
        .iter()
        .enumerate()
    {
        meta[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    let mut p = StreamParser::new();
    p.push_page(&h.encode()).unwrap();
    p.push_page(&meta).unwrap();
    assert_eq!(p.zero_pages_listed(), PageCount(1));
    p.push_page(&[1; PAGE_SIZE]).unwrap();
    p.push_page(&[2; PAGE_SIZE]).unwrap();
    assert!(p.finish().is_ok());
}

#[test]
fn producers_regenerate_identical_stream() {
    let s = synthetic_stream(1025, 3);
    let mut syn = SyntheticStream::new(1025, 3);
    assert_eq!(collect_stream(&mut syn).unwrap(), s);
    assert_eq!(collect_stream(&mut SliceStream::new(&s)).unwrap(), s);
    assert_ne!(synthetic_stream(1025, 4), s);
}

#[test]
fn arm64_stream_round_trips_through_the_parser() {
    let version = "#1 SMP Debian 6.1.192-2 (2026-11-16)";
    let arch = StreamHeader::arm64(1, 1, version, 0x3).arch;
    let syn = SyntheticStream::new(700, 9).with_arch(arch.clone());
    let s = syn.to_bytes();
    assert_eq!(&s[..version.len()], version.as_bytes());
    let mut p = StreamParser::new();
    for i in 0..s.len() / PAGE_SIZE {
        p.push_page(page_of(&s, i)).unwrap();
    }
    let h = p.finish().unwrap();
    assert_eq!(h.arch, arch);
    assert_eq!(h, syn.header());
    assert_eq!(h.image_pages, PageCount(700));
    // The counts follow the arch record exactly as on x86.
    let h = StreamHeader::arm64(1000, 4096, version, 0);
    assert_eq!(StreamHeader::parse(&h.encode()).unwrap(), h);
    assert_eq!(le_u64(&h.encode()[..], 424), 1003);
}

#[test]
fn garbage_at_the_start_of_page_0_is_named() {
    let mut p = StreamHeader::arm64(10, 100, "#1 SMP", 0).encode();
    p[..8].copy_from_slice(b"garbage!");
    let e = StreamHeader::parse(&p).unwrap_err();
    assert!(matches!(e, StreamError::UnknownArch { .. }), "{e}");
    let text = e.to_string();
    assert!(text.contains("x86_64") && text.contains("arm64"), "{text}");
}

#[test]
fn a_large_page_kernel_is_named_by_its_page_size() {
    for (page_size, kib) in [(16u64 << 10, "16 KiB"), (64 << 10, "64 KiB")] {
        let mut h = StreamHeader::arm64(10, 100, "#1 SMP", 0);
        h.size = h.pages.0 * page_size;
        let e = StreamHeader::parse(&h.encode()).unwrap_err();
        assert_eq!(
            e,
            StreamError::PageSize {
                size: h.size,
                pages: h.pages.0,
                page_size
            }
        );
        assert!(e.to_string().contains(kib), "{e}");
    }
}
