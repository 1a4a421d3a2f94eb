//! Parsing the words the board writes, and the round trip.

use super::*;
use alloc::vec;
use proptest::prelude::*;

#[test]
fn a_plain_boot_has_no_words() {
    let p = BootParams::parse("console=ttyS0 root=/dev/vda ro quiet").unwrap();
    assert_eq!(p, BootParams::default());
    assert!(p.render().is_empty());
}

#[test]
fn each_word_sets_its_field() {
    let p = BootParams::parse(
        "console=ttyS0 snapboot.store=/dev/vdb snapboot.capture snapboot.then=continue \
         snapboot.force snapboot.nodrop snapboot.nocompact snapboot.compress=none \
         snapboot.lazy=96M snapboot.swapsize=1G snapboot.once \
         snapboot.khibernate=/dev/vdc snapboot.kresume=/dev/vdd \
         snapboot.coldkernel=/dev/vde snapboot.handedover snapboot.image=new,factory \
         snapboot.dedupe=runs:4 snapboot.pin snapboot.pmtimes snapboot.noverity \
         snapboot.profile=prefetch snapboot.profilecheck snapboot.afterudev snapboot.defermem=16G \
         snapboot.memonline=kernel snapboot.memdeadline=5 snapboot.memfault=noload snapboot.baseline=medium \
         snapboot.attempts=5 snapboot.confirm=app snapboot.grace=4 snapboot.watchdog=20 snapboot.norecapture \
         snapboot.encrypt=tpm:7+0 snapboot.rollback=off noresume",
    )
    .unwrap();
    assert_eq!(
        p,
        BootParams {
            store: Some(StoreAddress::path("/dev/vdb")),
            capture: true,
            then: Then::Continue,
            force: true,
            drop_caches: false,
            compact: false,
            compression: Some(Compression::None),
            lazy: Some(Reclaim::Bytes(96 << 20)),
            verity: false,
            profile: ProfileMode::Prefetch,
            profile_check: true,
            after_udev: true,
            swap_size: Some(1 << 30),
            once: true,
            khibernate: Some("/dev/vdc".into()),
            kresume: Some("/dev/vdd".into()),
            cold_kernel: Some("/dev/vde".into()),
            handed_over: true,
            images: vec!["new".into(), "factory".into()],
            dedupe: Some(Dedupe::Selective {
                min_use: 0,
                min_run: 4,
            }),
            pin: true,
            pm_times: true,
            defer_mem: Some(16 << 30),
            mem_online: MemOnline::Kernel,
            mem_deadline: 5,
            mem_fault: Some(MemFault::NoLoad),
            medium_baseline: true,
            attempts: 5,
            confirm: Confirm::App,
            grace: 4,
            watchdog: Some(20),
            recapture: false,
            encrypt: Encrypt::Tpm { pcrs: vec![0, 7] },
            rollback: Rollback::Off,
            resume: false,
        }
    );
}

#[test]
fn encrypt_words() {
    assert_eq!(Encrypt::parse("key"), Some(Encrypt::KeyFile));
    assert_eq!(Encrypt::parse("tpm"), Some(Encrypt::Tpm { pcrs: vec![] }));
    assert_eq!(
        Encrypt::parse("tpm:14+7+7"),
        Some(Encrypt::Tpm { pcrs: vec![7, 14] })
    );
    for bad in ["tpm:", "tpm:24", "tpm:x", "yes", "off", ""] {
        assert_eq!(Encrypt::parse(bad), None, "{bad}");
    }
    for e in [
        Encrypt::KeyFile,
        Encrypt::Tpm { pcrs: vec![] },
        Encrypt::Tpm { pcrs: vec![0, 7] },
    ] {
        assert_eq!(Encrypt::parse(&e.word()), Some(e.clone()));
    }
    let e = BootParams::parse("snapboot.encrypt=maybe")
        .unwrap_err()
        .to_string();
    assert!(e.contains("tpm, tpm:PCR+PCR"), "{e}");
}

#[test]
fn rollback_words_and_what_auto_means() {
    for r in Rollback::ALL {
        assert_eq!(Rollback::parse(r.word()), Some(r));
    }
    assert_eq!(Rollback::parse("yes"), None);
    let tpm = Encrypt::Tpm { pcrs: vec![] };
    assert!(Rollback::Auto.on(&tpm));
    assert!(Rollback::Auto.on(&Encrypt::Tpm { pcrs: vec![7] }));
    assert!(!Rollback::Auto.on(&Encrypt::KeyFile));
    assert!(!Rollback::Auto.on(&Encrypt::Off));
    assert!(Rollback::Tpm.on(&Encrypt::Off));
    assert!(!Rollback::Off.on(&tpm));
    let e = BootParams::parse("snapboot.rollback=on")
        .unwrap_err()
        .to_string();
    assert!(e.contains("auto, tpm or off"), "{e}");
}

#[test]
fn dedupe_words() {
    use crate::{dedupe_word, parse_dedupe};
    assert_eq!(parse_dedupe("selective"), Some(Dedupe::SELECTIVE));
    assert_eq!(
        parse_dedupe("selective:75%"),
        Some(Dedupe::Selective {
            min_use: 75,
            min_run: 1
        })
    );
    assert_eq!(
        parse_dedupe("runs:8"),
        Some(Dedupe::Selective {
            min_use: 0,
            min_run: 8
        })
    );
    assert_eq!(dedupe_word(Dedupe::SELECTIVE), "selective:90");
    for bad in [
        "selective:",
        "selective:90:0",
        "runs:",
        "full:1",
        "selective:x",
        "on",
    ] {
        assert_eq!(parse_dedupe(bad), None, "{bad}");
    }
}

#[test]
fn one_value_is_found_even_beside_a_bad_word() {
    let line = "snapboot.onse snapboot.coldkernel=/dev/vdc snapboot.coldkernel= x=1";
    assert!(BootParams::parse(line).is_err());
    assert_eq!(value_of(line, key::COLDKERNEL), Some("/dev/vdc"));
    assert_eq!(value_of(line, key::STORE), None);
}

#[test]
fn lazy_with_and_without_a_value() {
    for (word, want) in [
        ("snapboot.lazy", Reclaim::Max),
        ("snapboot.lazy=", Reclaim::Max),
        ("snapboot.lazy=max", Reclaim::Max),
        ("snapboot.lazy=64K", Reclaim::Bytes(64 << 10)),
        ("snapboot.lazy=4096", Reclaim::Bytes(4096)),
    ] {
        assert_eq!(BootParams::parse(word).unwrap().lazy, Some(want), "{word}");
    }
}

#[test]
fn bad_words_are_named() {
    for (line, want) in [
        (
            "snapboot.attempts=0",
            "snapboot.attempts=0: expected a count (1 or more)",
        ),
        (
            "snapboot.confirm=never",
            "snapboot.confirm=never: expected auto, boot-complete, up, app or restored",
        ),
        (
            "snapboot.watchdog=never",
            "snapboot.watchdog=never: expected seconds (1 or more) or off",
        ),
        (
            "snapboot.grace=0",
            "snapboot.grace=0: expected seconds (1 or more)",
        ),
        (
            "ro snapboot.lazy=garbage",
            "snapboot.lazy=garbage: expected max or a size such as 96M",
        ),
        (
            "snapboot.profile=lru",
            "snapboot.profile=lru: expected eager, prefetch or off",
        ),
        (
            "snapboot.noverity=1",
            "snapboot.noverity=1: expected no value, or yes, no, true or false",
        ),
        (
            "snapboot.defermem=lots",
            "snapboot.defermem=lots: expected a size such as 96M",
        ),
        (
            "snapboot.memonline=dma",
            "snapboot.memonline=dma: expected movable or kernel",
        ),
        (
            "snapboot.memdeadline=0",
            "snapboot.memdeadline=0: expected seconds (1 or more)",
        ),
        (
            "snapboot.memfault=crash",
            "snapboot.memfault=crash: expected offline or noload",
        ),
        (
            "snapboot.compress=lzo",
            "snapboot.compress=lzo: expected lz4 or none",
        ),
        (
            "snapboot.capture=on",
            "snapboot.capture=on: expected no value, or yes, no, true or false",
        ),
        (
            "snapboot.store",
            "snapboot.store: empty store address: expected a device such as /dev/vdb, \
             PARTUUID=, PARTLABEL= or LABEL=",
        ),
        (
            "snapboot.store=PARTUUID=xyz",
            "snapboot.store=PARTUUID=xyz: PARTUUID=\"xyz\": expected a GPT partition GUID \
             (8-4-4-4-12 hex digits) or an MBR SSSSSSSS-PP",
        ),
        (
            "snapboot.then=reboot",
            "snapboot.then=reboot: expected continue or poweroff",
        ),
        (
            "snapboot.swapsize=1T",
            "snapboot.swapsize=1T: expected a size such as 96M",
        ),
        (
            "snapboot.dedupe=runs:0",
            "snapboot.dedupe=runs:0: expected off, full, selective, selective:USE or selective:USE:RUN",
        ),
        (
            "snapboot.image=a,,b",
            "snapboot.image=a,,b: an image name cannot be empty",
        ),
        (
            "snapboot.image=current,a/b",
            "snapboot.image=current,a/b: image name \"a/b\": '/' is not one of A-Z a-z 0-9 . _ -",
        ),
        (
            "snapboot.image",
            "snapboot.image: expected image names such as current or current,factory \
             (each 1 to 64 of A-Z a-z 0-9 . _ -)",
        ),
        (
            "snapboot.pin=1",
            "snapboot.pin=1: expected no value, or yes, no, true or false",
        ),
        (
            "snapboot.dedupe=selective:101",
            "snapboot.dedupe=selective:101: expected off, full, selective, selective:USE or selective:USE:RUN",
        ),
        (
            "snapboot.pmtimes=2",
            "snapboot.pmtimes=2: expected no value, or yes, no, true or false",
        ),
    ] {
        assert_eq!(BootParams::parse(line).unwrap_err().to_string(), want);
    }
    // A word of an older snapboot that no longer means anything is not silently ignored.
    let e = BootParams::parse("snapboot.threads=2").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("unknown boot parameter \"snapboot.threads=2\""),
        "{e}"
    );
    let e = BootParams::parse("snapboot.stor=/dev/vdb").unwrap_err();
    assert!(
        e.to_string().starts_with(
            "unknown boot parameter \"snapboot.stor=/dev/vdb\" (known: snapboot.store, "
        ),
        "{e}"
    );
}

#[test]
fn an_image_name_that_cannot_name_an_image_is_refused_by_name() {
    let long = "x".repeat(65);
    for (names, bad) in [
        ("current,a/b", "a/b"),
        (long.as_str(), long.as_str()),
        ("current,", ""),
    ] {
        let word = format!("snapboot.image={names}");
        match BootParams::parse(&word) {
            Err(BootParamsError::ImageName { word: w, source }) => {
                assert_eq!(w, word);
                assert_eq!(source.name(), bad, "{word}");
                assert_eq!(storelayout::check_image_name(bad), Err(source));
            }
            other => panic!("{word}: {other:?}"),
        }
    }
}

#[test]
fn later_words_override_earlier_ones() {
    let p = BootParams::parse("snapboot.store=/dev/vdb snapboot.store=/dev/vdc").unwrap();
    assert_eq!(p.store, Some(StoreAddress::path("/dev/vdc")));
}

#[test]
fn sizes_and_compressions() {
    assert_eq!(parse_size("96M"), Some(96 << 20));
    assert_eq!(parse_size("2g"), Some(2 << 30));
    assert_eq!(parse_size(""), None);
    assert_eq!(parse_size("M"), None);
    assert_eq!(parse_size("99999999999G"), None);
    for c in Compression::ALL {
        assert_eq!(parse_compression(&compression_word(c)), Some(c));
    }
    assert_eq!(parse_compression("zstd"), None);
}

fn device() -> impl Strategy<Value = Option<String>> {
    proptest::option::of("/dev/[a-z]{1,6}[0-9]?")
}

fn store() -> impl Strategy<Value = Option<StoreAddress>> {
    proptest::option::of(prop_oneof![
        "/dev/[a-z]{1,6}[0-9]?".prop_map(StoreAddress::Path),
        "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
            .prop_map(StoreAddress::PartUuid),
        "[0-9a-f]{8}-[0-9a-f]{2}".prop_map(StoreAddress::PartUuid),
        "[a-z_]{1,36}".prop_map(StoreAddress::PartLabel),
        "[a-z_.-]{1,32}".prop_map(StoreAddress::Label),
    ])
}

fn compression() -> impl Strategy<Value = Option<Compression>> {
    proptest::option::of(prop_oneof![Just(Compression::None), Just(Compression::Lz4),])
}

fn reclaim() -> impl Strategy<Value = Option<Reclaim>> {
    proptest::option::of(prop_oneof![
        Just(Reclaim::Max),
        (0u64..1 << 40).prop_map(Reclaim::Bytes),
    ])
}

prop_compose! {
    pub(crate) fn params()(
        store in store(), khibernate in device(), kresume in device(), cold_kernel in device(),
        flags in any::<[bool; 6]>(), continue_after in any::<bool>(),
        compression in compression(), lazy in reclaim(),
        swap_size in proptest::option::of(0u64..1 << 40),
        images in proptest::collection::vec("[A-Za-z0-9._-]{1,12}", 0..3),
        dedupe in proptest::option::of(prop_oneof![
            Just(Dedupe::Off), Just(Dedupe::Full),
            (0u8..=100, 1u16..100).prop_map(|(min_use, min_run)| Dedupe::Selective { min_use, min_run })
        ]),
        pin in any::<bool>(),
        pm_times in any::<bool>(),
        verity in any::<bool>(),
        profile_check in any::<bool>(),
        after_udev in any::<bool>(),
        profile in prop_oneof![Just(ProfileMode::Eager), Just(ProfileMode::Prefetch), Just(ProfileMode::Off)],
        defer_mem in proptest::option::of(1u64..1 << 40),
        mem_online in prop_oneof![Just(MemOnline::Movable), Just(MemOnline::Kernel)],
        mem_deadline in 1u32..1000,
        mem_fault in proptest::option::of(prop_oneof![Just(MemFault::Offline), Just(MemFault::NoLoad)]),
        medium_baseline in any::<bool>(),
        attempts in 1u32..10,
        confirm in proptest::sample::select(Confirm::ALL.to_vec()),
        grace in 1u32..100,
        watchdog in proptest::option::of(1u32..600),
        recapture in any::<bool>(),
        resume in any::<bool>(),
        rollback in proptest::sample::select(Rollback::ALL.to_vec()),
        encrypt in prop_oneof![
            Just(Encrypt::Off),
            Just(Encrypt::KeyFile),
            proptest::collection::btree_set(0u32..24, 0..4)
                .prop_map(|s| Encrypt::Tpm { pcrs: s.into_iter().collect() }),
        ],
    ) -> BootParams {
        BootParams {
            store,
            capture: flags[0],
            then: if continue_after { Then::Continue } else { Then::PowerOff },
            force: flags[1],
            drop_caches: flags[2],
            compact: flags[3],
            compression,
            lazy,
            verity,
            profile,
            profile_check,
            after_udev,
            swap_size,
            once: flags[4],
            khibernate,
            kresume,
            cold_kernel,
            handed_over: flags[5],
            images,
            dedupe,
            pin,
            pm_times,
            defer_mem,
            mem_online,
            mem_deadline,
            mem_fault,
            medium_baseline,
            attempts,
            confirm,
            grace,
            watchdog,
            recapture,
            encrypt,
            rollback,
            resume,
        }
    }
}

proptest! {
    #[test]
    fn render_then_parse_is_the_same(p in params(), other in "[a-z]{1,8}(=[a-z0-9]{1,4})?") {
        let mut words = p.render();
        // Words that are not ours anywhere in the line change nothing.
        words.insert(0, other.clone());
        words.push(other);
        prop_assert_eq!(BootParams::parse(&words.join(" ")).unwrap(), p);
    }
}
