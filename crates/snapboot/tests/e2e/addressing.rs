//! Store addressing on the real board: a store in a GPT partition, named by `PARTUUID=` or
//! by its own `LABEL=`, is found again after other disks are attached before its disk (so
//! it is another `/dev/vdX`), and a store named by a path that now names a decoy disk is
//! refused without a byte of the decoy written.

use crate::common::bundle;
use crate::snapshot::{ask, region_hash};
use board::partdisk::{format_store_in, gpt_disk, open_store_in, GptPartition, Placed};
use board::run_options::Disk;
use regex::Regex;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The store partition's unique GUID, written in upper case on the command line (a
/// PARTUUID is matched in any case).
const STORE_UUID: &str = "5C3A0F6E-1D2B-4C8E-9F00-0123456789AB";
/// The decoy disk's second partition, where the store's partition was at capture.
const DECOY_UUID: &str = "66666666-7777-8888-9999-AAAAAAAAAAAA";
/// The store's own label.
const LABEL: &str = "e2e-store";

fn part(name: &str, uuid: &str, bytes: u64) -> GptPartition {
    GptPartition {
        name: name.into(),
        uuid: uuid.into(),
        bytes,
    }
}

/// The shell bundle booted with `disks` after the root disk and `words` on the command line.
fn boot(disks: &[&Path], words: &[String]) -> board::qemu::Session {
    let b = bundle::Bundle::load(&bundle("shell")).unwrap();
    let mut o = board::RunOptions::for_bundle(&b);
    o.disks = disks
        .iter()
        .map(|p| Disk {
            path: p.to_path_buf(),
            readonly: false,
            sd: false,
        })
        .collect();
    o.cmdline = words.to_vec();
    board::qemu::Session::start(&b, &o).unwrap()
}

/// Boots with the store named by `address` and expects a restore into a working shell.
fn expect_restore(disks: &[&Path], address: &str) {
    let mut s = boot(disks, &[format!("snapboot.store={address}")]);
    let restored = Regex::new(r"snapboot: @(restored|fallback)").unwrap();
    let (line, _) = s
        .wait_for(&restored, "restored marker", Duration::from_secs(180))
        .unwrap();
    assert!(line.contains("@restored"), "{address}: {line}");
    ask(&mut s, "echo alive-$((6*7))", "^alive-42$");
    s.finish(boottrace::Outcome::Answered);
}

fn file_hash(p: &Path) -> String {
    region_hash(p, 0, std::fs::metadata(p).unwrap().len())
}

/// Disk images under the test home: the store's disk (a small partition, then the store's),
/// a decoy GPT disk with two partitions of its own and no store, and a disk of zeros.
fn disks() -> (PathBuf, Placed, PathBuf, PathBuf) {
    let dir = crate::common::home().join("test-addressing");
    std::fs::create_dir_all(&dir).unwrap();
    let store_disk = dir.join("store-disk.img");
    let mem_mib = bundle::Bundle::load(&bundle("shell"))
        .unwrap()
        .workload
        .mem_mib;
    let placed = gpt_disk(
        &store_disk,
        &[
            part("boot", "0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0", 1 << 20),
            part("snapstore", STORE_UUID, board::capture::store_size(mem_mib)),
        ],
    )
    .unwrap();
    format_store_in(&store_disk, &placed[1], LABEL).unwrap();
    let decoy = dir.join("decoy.img");
    gpt_disk(
        &decoy,
        &[
            part("boot", "11111111-2222-3333-4444-555555555555", 1 << 20),
            part(
                "snapstore",
                "66666666-7777-8888-9999-AAAAAAAAAAAA",
                16 << 20,
            ),
        ],
    )
    .unwrap();
    let zeros = dir.join("zeros.img");
    let f = std::fs::File::create(&zeros).unwrap();
    f.set_len(64 << 20).unwrap();
    (store_disk, placed[1].clone(), decoy, zeros)
}

/// Captured on `/dev/vdb2` by PARTUUID, the image restores by PARTUUID and by LABEL with the
/// store's disk moved to `/dev/vdc` behind a decoy GPT disk (whose own partition 2 is called
/// `snapstore` too) and behind a disk of zeros; neither is written. The path the store had
/// at capture, `/dev/vdb2`, now names the decoy's partition: that boot falls back with the
/// reason, a capture onto the decoy's partition by its PARTUUID is refused, and the decoy
/// keeps every byte.
#[test]
fn a_store_found_by_partuuid_or_label_restores_wherever_its_disk_is_and_a_stale_path_writes_nothing(
) {
    let (store_disk, at, decoy, zeros) = disks();
    let b = bundle::Bundle::load(&bundle("shell")).unwrap();
    let mut o = board::RunOptions::for_bundle(&b);
    o.timeout = Duration::from_secs(300);
    for p in [&store_disk, &zeros] {
        o.disks.push(Disk {
            path: p.clone(),
            readonly: false,
            sd: false,
        });
    }
    o.params.store =
        Some(bootparams::StoreAddress::parse(&format!("PARTUUID={STORE_UUID}")).unwrap());
    board::capture::capture_boot_attached(&b, &o).unwrap();
    let s = open_store_in(&store_disk, &at).unwrap();
    assert_eq!(s.label(), LABEL);
    assert_eq!(s.images().len(), 1, "the capture went into the partition");
    drop(s);

    let (decoy_before, zeros_before) = (file_hash(&decoy), file_hash(&zeros));
    expect_restore(&[&decoy, &store_disk], &format!("PARTUUID={STORE_UUID}"));
    expect_restore(&[&zeros, &store_disk], &format!("LABEL={LABEL}"));

    let mut s = boot(&[&decoy, &store_disk], &["snapboot.store=/dev/vdb2".into()]);
    let fb = Regex::new(r"snapboot: @(fallback|restored)").unwrap();
    let (line, _) = s
        .wait_for(&fb, "fallback marker", Duration::from_secs(180))
        .unwrap();
    assert!(
        line.contains("@fallback store /dev/vdb2: no snapboot store here"),
        "{line}"
    );
    let ready = Regex::new(r"snapboot: @ready").unwrap();
    s.wait_for(&ready, "cold boot after fallback", Duration::from_secs(180))
        .unwrap();
    // Named by its own PARTUUID, the decoy's partition is found, and refused as no store:
    // a capture writes nothing to it either.
    s.send(&format!(
        "/run/snapboot/bin/snapboot capture --store PARTUUID={DECOY_UUID}"
    ))
    .unwrap();
    let ended = Regex::new(r"snapboot: @capture-(failed|done)").unwrap();
    let (line, _) = s
        .wait_for(&ended, "the refused capture", Duration::from_secs(120))
        .unwrap();
    let expected = format!(
        "@capture-failed store PARTUUID={} (/dev/vdb2): no snapboot store here",
        DECOY_UUID.to_lowercase()
    );
    assert!(line.contains(&expected), "{line}");
    s.finish(boottrace::Outcome::Ready);
    assert_eq!(
        file_hash(&decoy),
        decoy_before,
        "the decoy disk was written"
    );
    assert_eq!(
        file_hash(&zeros),
        zeros_before,
        "the disk of zeros was written"
    );
}
