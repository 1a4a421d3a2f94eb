//! Tests of the store: slots, generations, atomic publication, invalidation,
//! damaged headers and stores, identity checks.

use std::io::Cursor;

use super::{mem_store, meta, poke, write_with};
use crate::header::{off, Header};
use crate::kstream::{collect_stream, synthetic_stream, PAGE_SIZE};
use crate::*;

const MIB: u64 = 1 << 20;

fn ident() -> Identity {
    meta().identity
}

fn write_stream<D: Device>(store: &mut Store<D>, stream: &[u8]) -> Result<ImageInfo, ImageError> {
    let opts = WriteOptions {
        threads: 1,
        ..WriteOptions::default()
    };
    write_with(store, stream, opts)
}

fn read_all<D: Device>(store: &mut Store<D>) -> Result<Vec<u8>, ImageError> {
    let mut r = store.reader()?;
    assert!(r.verify_all()?.verified);
    collect_stream(&mut r)
}

#[test]
fn round_trip_is_identical() {
    let stream = synthetic_stream(1000, 1);
    let mut store = mem_store(16 * MIB);
    let info = write_stream(&mut store, &stream).unwrap();
    assert_eq!((info.slot, info.generation), (Slot::A, 1));
    assert_eq!(info.stream.image_pages, 1000);
    assert_eq!(info.stream.meta_pages, 2);
    assert_eq!(info.stream.pages, 1003);
    assert_eq!(
        info.chunk_count,
        info.stats
            .unique_pages
            .div_ceil(u64::from(DEFAULT_CHUNK_PAGES))
    );
    assert_eq!(info.stream.arch_magic, crate::kstream::X86_64_RESTORE_MAGIC);
    assert_eq!(read_all(&mut store).unwrap(), stream);
    let newest = store.newest().unwrap();
    assert_eq!(newest.identity, ident());
    assert_eq!(newest.created_unix, 1_700_000_000);
    assert!(!newest.verified);
}

#[test]
fn image_info_serializes() {
    let mut store = mem_store(4 * MIB);
    let info = write_stream(&mut store, &synthetic_stream(10, 2)).unwrap();
    let json = serde_json::to_value(&info).unwrap();
    assert_eq!(json["slot"], "A");
    assert_eq!(json["identity"]["release"], "6.1.0-18-amd64");
    assert_eq!(json["stream"]["image_pages"], 10);
    assert_eq!(json["stream_header_blake3"].as_str().unwrap().len(), 64);
}

#[test]
fn successive_writes_alternate_slots_and_bump_generation() {
    let mut store = mem_store(16 * MIB);
    let mut seen = Vec::new();
    for seed in 1..=3 {
        let stream = synthetic_stream(300 + seed * 10, seed);
        let info = write_stream(&mut store, &stream).unwrap();
        seen.push((info.slot, info.generation));
        assert_eq!(read_all(&mut store).unwrap(), stream);
    }
    assert_eq!(seen, vec![(Slot::A, 1), (Slot::B, 2), (Slot::A, 3)]);
    let [a, b] = store.slots().unwrap();
    assert_eq!(format!("{a} / {b}"), "generation 3 / generation 2");
}

#[test]
fn torn_newest_header_leaves_previous_bootable() {
    let (s1, s2) = (synthetic_stream(100, 1), synthetic_stream(100, 2));
    let mut store = mem_store(4 * MIB);
    write_stream(&mut store, &s1).unwrap();
    write_stream(&mut store, &s2).unwrap();
    // Slot B (gen 2) half written: second half of the slot zero.
    let mut store = poke(store, |b| b[4096 + 2048..8192].fill(0));
    assert_eq!(store.newest().unwrap().generation, 1);
    assert_eq!(read_all(&mut store).unwrap(), s1);
}

#[test]
fn flipped_header_byte_means_no_image_with_reason() {
    let mut store = mem_store(4 * MIB);
    write_stream(&mut store, &synthetic_stream(50, 1)).unwrap();
    let mut store = poke(store, |b| b[off::RAM_BYTES] ^= 1);
    let err = store.reader().unwrap_err();
    assert!(matches!(err, ImageError::NoImage { .. }));
    assert_eq!(
        err.to_string(),
        "no snapboot image in the store (slot A: invalid: checksum mismatch in header; slot B: empty)"
    );
    let mut store = poke(store, |b| b[0] = b'X');
    let err = store.reader().unwrap_err().to_string();
    assert!(
        err.contains("slot A: invalid: not a snapboot header: magic is \"XNAPBOOT\""),
        "{err}"
    );
    let [a, _] = store.slots().unwrap();
    assert!(matches!(a, SlotState::Invalid(ImageError::BadMagic { .. })));
}

#[test]
fn unsupported_version_is_reported() {
    // Version 1 (verbatim pages, written by early builds) and a future version 3 are both
    // refused with a reason that names the version this build reads.
    for version in [1u8, 3] {
        let mut store = mem_store(4 * MIB);
        write_stream(&mut store, &synthetic_stream(50, 1)).unwrap();
        let mut store = poke(store, |b| {
            b[off::VERSION] = version;
            let sum = blake3::hash(&b[..off::CHECKSUM]);
            b[off::CHECKSUM..SLOT_SIZE as usize].copy_from_slice(sum.as_bytes());
        });
        let [a, _] = store.slots().unwrap();
        assert!(
            matches!(a, SlotState::Invalid(ImageError::UnsupportedVersion { found }) if found == u32::from(version)),
            "{a}"
        );
        assert_eq!(
            store.reader().unwrap_err().to_string(),
            format!(
                "no snapboot image in the store (slot A: invalid: image format version {version} \
                 is not supported (this build reads version 2); slot B: empty)"
            )
        );
    }
}

#[test]
fn header_encode_decode_round_trip() {
    let mut store = mem_store(4 * MIB);
    write_stream(&mut store, &synthetic_stream(50, 1)).unwrap();
    let bytes = store.into_inner().into_inner();
    let h = Header::decode(&bytes[..4096]).unwrap().unwrap();
    assert_eq!(h.encode().unwrap(), bytes[..4096].to_vec());
    assert_eq!(Header::decode(&bytes[4096..8192]).unwrap(), None);
}

#[test]
fn truncated_store_is_reported() {
    let stream = synthetic_stream(1000, 7);
    let mut store = mem_store(16 * MIB);
    let info = write_stream(&mut store, &stream).unwrap();
    let end = info.area_offset + info.image_bytes;
    let mut store = poke(store, |b| b.truncate(2 * MIB as usize));
    match store.reader() {
        Err(ImageError::Truncated { expected, actual }) => {
            assert_eq!((expected, actual), (end, 2 * MIB));
        }
        other => panic!("expected Truncated, got {other:?}"),
    }
}

#[test]
fn identity_mismatch_names_the_field() {
    let mut store = mem_store(4 * MIB);
    let info = write_stream(&mut store, &synthetic_stream(20, 1)).unwrap();
    assert_eq!(check_compat(&info, &ident()), Ok(()));
    type Change = fn(&mut Identity);
    let cases: [(&str, Change); 3] = [
        ("release", |i| i.release = "6.1.0-19-amd64".into()),
        ("version", |i| i.version = "#2 SMP".into()),
        ("machine", |i| i.machine = "aarch64".into()),
    ];
    for (name, change) in cases {
        let mut running = ident();
        change(&mut running);
        match check_compat(&info, &running) {
            Err(Incompat::KernelMismatch { field, .. }) => assert_eq!(field, name),
            other => panic!("{name}: {other:?}"),
        }
    }
    let mut running = ident();
    running.ram_bytes += 4096;
    let err = check_compat(&info, &running).unwrap_err();
    assert_eq!(
        err,
        Incompat::RamMismatch {
            image: 512 * MIB,
            running: 512 * MIB + 4096
        }
    );
    let err: ImageError = err.into();
    assert!(err.to_string().starts_with("RAM size differs"));
    let mut running = ident();
    running.release = "6.6.0".into();
    assert_eq!(
        check_compat(&info, &running).unwrap_err().to_string(),
        "kernel release differs: image was captured on \"6.1.0-18-amd64\", running \"6.6.0\""
    );
}

#[test]
fn too_small_store_errors_before_writing() {
    let small = synthetic_stream(8, 1);
    let mut store = mem_store(MIN_STORE_SIZE);
    write_stream(&mut store, &small).unwrap();
    let before = store.into_inner().into_inner();
    let mut store = Store::new(Cursor::new(before.clone())).unwrap();
    let big = synthetic_stream(100, 2);
    let err = write_stream(&mut store, &big).unwrap_err();
    assert!(
        matches!(
            err,
            ImageError::TooLarge {
                available: 65536,
                ..
            } | ImageError::OutOfSpace {
                available: 65536,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(store.into_inner().into_inner(), before);

    let err = Store::format(Cursor::new(vec![0u8; 4096])).unwrap_err();
    assert!(matches!(err, ImageError::StoreTooSmall { size: 4096, .. }));
}

#[test]
fn invalidate_prevents_any_restore_until_next_write() {
    let (s1, s2) = (synthetic_stream(30, 1), synthetic_stream(40, 2));
    let mut store = mem_store(4 * MIB);
    assert_eq!(store.invalidate().unwrap(), None);
    write_stream(&mut store, &s1).unwrap();
    write_stream(&mut store, &s2).unwrap();
    assert_eq!(store.invalidate().unwrap(), Some(2));
    let err = store.reader().unwrap_err();
    assert!(
        matches!(
            err,
            ImageError::Invalidated {
                generation: 2,
                slot: Slot::B
            }
        ),
        "{err}"
    );
    // The older image does not come back, even when asked for explicitly.
    assert!(matches!(
        store.reader_for(Slot::A),
        Err(ImageError::NoImage { .. })
    ));
    let [a, b] = store.slots().unwrap();
    assert_eq!(format!("{a} / {b}"), "empty / generation 2 (invalidated)");
    let info = write_stream(&mut store, &s1).unwrap();
    assert_eq!((info.slot, info.generation), (Slot::A, 3));
    assert_eq!(read_all(&mut store).unwrap(), s1);
}

#[test]
fn explicit_fallback_reads_older_slot() {
    let (s1, s2) = (synthetic_stream(30, 1), synthetic_stream(40, 2));
    let mut store = mem_store(4 * MIB);
    write_stream(&mut store, &s1).unwrap();
    let info = write_stream(&mut store, &s2).unwrap();
    let at = (info.area_offset + 2 * 4096) as usize;
    let mut store = poke(store, |b| b[at] ^= 1);
    // Newest is damaged: reported, not silently replaced.
    assert!(matches!(
        read_all(&mut store),
        Err(ImageError::ChecksumMismatch { .. })
    ));
    let mut r = store.reader_for(Slot::A).unwrap();
    r.verify_all().unwrap();
    assert_eq!(collect_stream(&mut r).unwrap(), s1);
}

#[test]
fn bad_stream_is_refused_before_writing() {
    let mut store = mem_store(4 * MIB);
    let before = store.slots().unwrap().map(|s| s.to_string());
    let mut w = store.writer(meta()).unwrap();
    let err = w.push_page(&[0x11; PAGE_SIZE]).unwrap_err();
    assert!(
        matches!(
            err,
            ImageError::Stream(crate::StreamError::UnknownArch { .. })
        ),
        "{err}"
    );
    assert_eq!(store.slots().unwrap().map(|s| s.to_string()), before);
    let mut m = meta();
    m.identity.release = "x".repeat(65);
    assert!(matches!(
        store.writer(m),
        Err(ImageError::FieldTooLong {
            field: "release",
            len: 65
        })
    ));
}

#[test]
fn file_store_round_trip_and_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.img");
    let stream = synthetic_stream(700, 9);
    {
        let mut store = Store::create_file(&path, 8 * MIB).unwrap();
        write_stream(&mut store, &stream).unwrap();
    }
    let mut store = Store::open(&path, false).unwrap();
    assert_eq!(store.size(), 8 * MIB);
    assert_eq!(read_all(&mut store).unwrap(), stream);
    assert!(matches!(store.invalidate(), Err(ImageError::ReadOnly)));
    let mut store = Store::open(&path, true).unwrap();
    assert_eq!(store.invalidate().unwrap(), Some(1));
}

/// A stream in the newer-kernel shape: 10 data pages, but 257 index pages
/// because most listed PFNs are zero pages (bit 63) without data.
fn zero_page_stream() -> Vec<u8> {
    use crate::kstream::{PageCount, StreamHeader, PFN_END_OF_MAP, PFN_ZERO_FLAG};
    let mut h = StreamHeader::x86_64(10, 200_000, 0);
    h.pages = PageCount(10 + 257 + 1);
    h.size = h.pages.bytes();
    let mut out = h.encode().to_vec();
    let mut entries: Vec<u64> = (0..256 * 512).map(|p| p | PFN_ZERO_FLAG).collect();
    entries.extend((0..10).map(|p| 256 * 512 + p));
    entries.push(PFN_END_OF_MAP);
    entries.resize(257 * 512, 0);
    out.extend(entries.iter().flat_map(|e| e.to_le_bytes()));
    out.extend((0..10u8).flat_map(|d| [d; PAGE_SIZE]));
    out
}

#[test]
fn zero_page_stream_with_multi_chunk_index() {
    let stream = zero_page_stream();
    let mut store = mem_store(8 * MIB);
    let info = write_stream(&mut store, &stream).unwrap();
    assert_eq!(info.stream.meta_pages, 257);
    assert_eq!(read_all(&mut store).unwrap(), stream);
    let layout = crate::index::Layout::new(info.stream.pages, info.chunk_pages).unwrap();
    let at = (info.area_offset + layout.data_offset()) as usize;
    let mut store = poke(store, |b| b[at] ^= 1);
    let err = store.reader().unwrap().verify_all().unwrap_err();
    assert!(
        err.to_string().starts_with("checksum mismatch in chunk 0 "),
        "{err}"
    );
}
