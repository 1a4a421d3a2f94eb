//! End-to-end tests of the restorer (crates/restorer): started by the PC's firmware in place
//! of a kernel, it reads the image from the store on the board's disks, checks it as resume
//! does and restores it with no kernel booted first (lazy images too, whose swap region it
//! checks as resume does); or it refuses with its reason and boots the stock kernel cold
//! from the kernel pack. Either way it keeps the store's boot log as a restoring boot does:
//! the restored system and the stock kernel read its status back, and its crash-loop guard
//! skips an image restored too often without a confirmation. The store may be named by
//! `PARTLABEL=`. Signed images through the restorer: flash.rs. `restorer_bench_shell`
//! (ignored: about 10 minutes) measures it against a cold boot and the stock kernel's
//! restore of the same image.

use crate::common::{bundle, run, store_options};
use crate::snapshot::{
    ask, assert_all_differ, captured, captured_lazy, check_restored_app, copy_store,
    damage_newest_image, host_checksum, region_hash, rename_release, swap_of,
};
use regex::Regex;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// Builds the restorer once (scripts/restorer.sh) and returns its ELF.
fn restorer_elf() -> PathBuf {
    static ELF: OnceLock<PathBuf> = OnceLock::new();
    ELF.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/restorer.sh");
        let (out, so, se) = run(Command::new(script));
        assert!(out.status.success(), "restorer build failed:\n{so}\n{se}");
        PathBuf::from(so.trim())
    })
    .clone()
}

/// Builds the EFI restorer once (`scripts/restorer.sh efi`) and returns its PE file.
pub(crate) fn restorer_efi() -> PathBuf {
    static EFI: OnceLock<PathBuf> = OnceLock::new();
    EFI.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/restorer.sh");
        let mut c = Command::new(script);
        c.arg("efi");
        let (out, so, se) = run(c);
        assert!(
            out.status.success(),
            "EFI restorer build failed:\n{so}\n{se}"
        );
        PathBuf::from(so.trim())
    })
    .clone()
}

/// Run options booting the restorer on `store`: the disks and command line of a snapshot
/// boot, the restorer in place of the kernel (`board::restorer_boot`, what `bench compare`
/// boots too).
pub(crate) fn restorer_options(b: &bundle::Bundle, store: &Path) -> board::RunOptions {
    let mut opts = board::RunOptions::for_bundle(b);
    opts.timeout = Duration::from_secs(300);
    board::restorer_boot::restorer_options(b, &opts, &restorer_elf(), store)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A GPT disk image under the test home: partition 1 a small `boot`, partition 2
/// `snapstore` holding a copy of `store` (copied sparsely).
fn in_gpt_partition(store: &Path, name: &str) -> PathBuf {
    use board::partdisk::{gpt_disk, GptPartition};
    let disk = crate::common::home().join(name);
    let part = |name: &str, uuid: &str, bytes: u64| GptPartition {
        name: name.into(),
        uuid: uuid.into(),
        bytes,
    };
    let size = std::fs::metadata(store).unwrap().len();
    let placed = gpt_disk(
        &disk,
        &[
            part("boot", "0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0", 1 << 20),
            part("snapstore", "5C3A0F6E-1D2B-4C8E-9F00-0123456789AB", size),
        ],
    )
    .unwrap();
    assert_eq!(placed[1].offset % (1 << 20), 0);
    let mut dd = Command::new("dd");
    dd.arg(format!("if={}", store.display()))
        .arg(format!("of={}", disk.display()))
        .args(["bs=1M", "conv=sparse,notrunc", "status=none"])
        .arg(format!("seek={}", placed[1].offset >> 20));
    let (out, so, se) = run(dd);
    assert!(out.status.success(), "dd: {so}{se}");
    disk
}

/// One restore from the restorer, answered by the restored shell: its timeline (with a TTI).
fn restore_once(b: &bundle::Bundle, o: &board::RunOptions) -> boottrace::Timeline {
    let tl = bench::measured_boot(b, o, true).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        tl.lines
            .iter()
            .any(|l| l.text.contains("snapboot-restorer: image checked")),
        "the restorer did not run"
    );
    assert!(tl.tti.is_some_and(|t| t > 0.0), "no TTI");
    tl
}

/// Restores of one `app` image in a row from the restorer (3, or SNAPBOOT_RESTORER_ROUNDS),
/// each checked: the app's state, the clock, and the RNG output differing from every
/// other restore's. `make soak` runs it with 50 rounds.
#[test]
fn restorer_restores_the_app_repeatedly_with_state_clock_and_rng() {
    let rounds: usize = std::env::var("SNAPBOOT_RESTORER_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let store = copy_store(&captured("app"), "test-restorer-app.store");
    let b = bundle::Bundle::load(&bundle("app")).unwrap();
    let o = restorer_options(&b, &store);
    let expected = host_checksum();
    let restored = Regex::new(r"snapboot: @restored").unwrap();
    let mut randoms = Vec::new();
    for boot in 0..rounds {
        let started = std::time::Instant::now();
        let mut s = board::qemu::Session::start(&b, &o).unwrap();
        let (line, _) = s
            .wait_for(&restored, "restored marker", Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("restore {boot}: {e}"));
        assert!(!line.is_empty());
        randoms.push(check_restored_app(&mut s, boot, &expected));
        let tl = s.finish(boottrace::Outcome::Answered);
        assert!(
            tl.lines
                .iter()
                .any(|l| l.text.contains("snapboot-restorer: image checked: current")),
            "restore {boot}: the restorer did not restore it"
        );
        assert!(
            !tl.lines.iter().any(|l| l.text.contains("Linux version")),
            "restore {boot}: a kernel booted before the image"
        );
        eprintln!(
            "restorer restore {boot}: TTI {:.2} s, {:.1} s from power-on to checked",
            tl.tti.unwrap_or_default(),
            started.elapsed().as_secs_f64()
        );
    }
    assert_all_differ(randoms);
}

/// Waits for a console line matching `pattern`; returns it and its time.
fn expect_line(s: &mut board::qemu::Session, pattern: &str, what: &str) -> (String, f64) {
    let re = Regex::new(pattern).unwrap();
    s.wait_for(&re, what, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// What the stock kernel's cold boot after a refusal is followed to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Then {
    /// Its boot re-captures the system at ready and powers off.
    Recapture,
    /// Ready, and the workload answers its probe.
    Probe,
    /// Nothing more: the stock kernel's resume standing down is the cold boot (`app`'s
    /// cold boot to ready is a minute or two of TCG that the other cases already cover).
    StoodDown,
}

/// Boots the restorer and expects it to refuse with `reason`, then to boot the stock kernel
/// cold from the kernel pack: the refusal and the `cold boot:` line come before the stock
/// kernel's first line, which stands down from the image (`snapboot.handedover`), reads the
/// restorer's refusal back from the store's boot log as its status, then reaches ready and
/// `then` (unless [`Then::StoodDown`]).
fn expect_refusal_then_cold_boot(
    b: &bundle::Bundle,
    o: &board::RunOptions,
    reason: &str,
    then: Then,
) -> boottrace::Timeline {
    let mut s = board::qemu::Session::start(b, o).unwrap();
    let refusal = format!("snapboot-restorer: refused: {reason}");
    let status = format!("snapboot: @status fallback: {reason}");
    // Each wait sees only lines after the previous match: the order is checked too.
    let steps = [
        (refusal.as_str(), "the refusal"),
        (
            r"snapboot-restorer: cold boot: 6\.1\.\S+-amd64 from /dev/vd[a-z] \(kernel \d+\.\d MiB, initramfs \d+\.\d MiB\)",
            "the cold boot line",
        ),
        (r"Linux version 6\.1\.", "the stock kernel's banner"),
        (
            r"snapboot: @handed-over",
            "the stock kernel's resume standing down",
        ),
        (
            status.as_str(),
            "the stock kernel's status: the restorer's refusal",
        ),
        (r"snapboot: @ready", "the cold boot reaching ready"),
    ];
    // Standing down (and its status) is where a stood-down case stops.
    let steps = if then == Then::StoodDown {
        &steps[..5]
    } else {
        &steps[..]
    };
    let mut times = Vec::new();
    let mut lines = Vec::new();
    for &(pattern, what) in steps {
        let (line, t) = expect_line(&mut s, pattern, what);
        times.push((what, t));
        lines.push(line);
    }
    if then == Then::StoodDown {
        eprintln!("restorer refusal then cold boot, seconds from power-on: {times:?}");
        return s.finish(boottrace::Outcome::Incomplete);
    }
    if then == Then::Recapture {
        // The stock kernel's boot captures the system again at its ready point (the
        // system changed) and goes on.
        expect_line(&mut s, r"snapboot: @capture-done", "the re-capture");
        eprintln!(
            "restorer refusal then cold boot and re-capture, seconds from power-on: {times:?}"
        );
        return s.finish(boottrace::Outcome::Ready);
    }
    let probe = &b.workload.probe;
    let (_, answered) = s
        .probe(
            &probe.send,
            &Regex::new(&probe.expect).unwrap(),
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("the probe after the cold boot: {e}"));
    times.push(("the probe's answer", answered));
    // The disk the restorer read the pack from (found by its PCI walk) is the one Linux
    // gives that name.
    let from = Regex::new(r"cold boot: .* from (/dev/vd[a-z])").unwrap();
    let disk = lines.iter().find_map(|l| from.captures(l)).unwrap()[1].to_string();
    s.send(&format!("busybox head -c 7 {disk}; echo")).unwrap();
    expect_line(
        &mut s,
        "^SBKPACK$",
        "the kernel pack's magic on the same disk",
    );
    eprintln!("restorer refusal then cold boot, seconds from power-on: {times:?}");
    s.finish(boottrace::Outcome::Answered)
}

/// A damaged chunk, an image of another kernel and another RAM size are each refused with
/// the reason on the console, and the stock kernel then boots cold from the kernel pack,
/// its status the restorer's refusal. The other kernel's image is captured again in that
/// cold boot (the system changed; the damaged image is left for someone to look at, as
/// resume leaves it), and the restorer restores the new one at the next power-on, leaving
/// the restored system its status. That image's restores are never confirmed
/// (`snapboot.confirm=app`, `snapboot.attempts=1`), so the power-on after that the
/// crash-loop guard refuses it.
#[test]
fn restorer_refuses_a_corrupt_image_another_kernel_and_another_ram_size() {
    let b = bundle::Bundle::load(&bundle("shell")).unwrap();
    let bad = copy_store(&captured("shell"), "test-restorer-bad.store");
    let chunk = damage_newest_image(&bad);
    let o = restorer_options(&b, &bad);
    expect_refusal_then_cold_boot(
        &b,
        &o,
        &format!(
            r"no image restores: current: store is damaged: checksum mismatch in chunk {chunk} "
        ),
        Then::Probe,
    );
    let foreign = copy_store(&captured("shell"), "test-restorer-foreign.store");
    rename_release(&foreign);
    let mut o = restorer_options(&b, &foreign);
    // The board's runs leave re-capture off (`snapboot.norecapture`); this one wants it.
    o.params.recapture = true;
    o.cmdline
        .extend(["snapboot.confirm=app".into(), "snapboot.attempts=1".into()]);
    expect_refusal_then_cold_boot(
        &b,
        &o,
        r#"no image restores: current: image does not fit this system: kernel release differs: image was captured on "9\.1\.[^"]+", running "6\.1\."#,
        Then::Recapture,
    );
    // The restorer restores that new image at the next power-on: the stock kernel it
    // booted saw the memory map a PVH boot sees, so the image carries the e820 checksum the
    // restorer computes. The restored system's status is the one the restorer left.
    let tl = restore_once(&b, &o);
    let restored =
        Regex::new(r"snapboot: @status restored current generation \d+ restore 1 of 1 unconfirmed")
            .unwrap();
    let line = |re: &Regex| {
        tl.lines
            .iter()
            .find(|l| re.is_match(&l.text))
            .map(|l| l.text.clone())
    };
    assert!(
        line(&restored).is_some(),
        "no restored status from the restorer's boot log:\n{}",
        tl.lines
            .iter()
            .map(|l| l.text.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        line(&Regex::new(r"restore attempt recorded in the store's boot log").unwrap()).is_some(),
        "the restorer did not record the attempt"
    );
    // Unconfirmed, it is not restored again.
    expect_refusal_then_cold_boot(
        &b,
        &o,
        r"no image restores: current: crash-loop guard: restored 1 times without a confirmation from the restored system \(limit snapboot.attempts=1\); skipped until it is captured again",
        Then::Probe,
    );
    // The same store in partition 2 of a GPT disk, named by `PARTLABEL=` as the Debian
    // root's config names it: the restorer finds it, restores its image (its second
    // attempt, under the default limit of 2) and keeps the boot log inside the partition.
    let parted = in_gpt_partition(&foreign, "test-restorer-parted.img");
    let mut o = restorer_options(&b, &parted);
    o.params.store = Some(bootparams::StoreAddress::parse("PARTLABEL=snapstore").unwrap());
    let tl = bench::measured_boot(&b, &o, true).unwrap_or_else(|e| panic!("{e}"));
    let said = |part: &str| tl.lines.iter().any(|l| l.text.contains(part));
    assert!(
        said("snapboot-restorer: store PARTLABEL=snapstore is /dev/vdb2 (")
            && said("snapboot-restorer: image checked: current")
            && said("restore attempt recorded in the store's boot log"),
        "the restorer did not restore from the partition, or kept no boot log there: {:#?}",
        tl.lines.iter().map(|l| &l.text).collect::<Vec<_>>()
    );
    eprintln!(
        "restorer restore from PARTLABEL=snapstore: TTI {:.2} s",
        tl.tti.expect("a TTI")
    );
    let good = copy_store(&captured("shell"), "test-restorer-ram.store");
    let mut o = restorer_options(&b, &good);
    o.cmdline.push("snapboot.norecapture".into());
    o.mem_mib += 64;
    expect_refusal_then_cold_boot(
        &b,
        &o,
        r"no image restores: current: image does not fit this system: the memory map differs: the image kernel's e820 checksum is 0x[0-9a-f]+, this machine's 0x[0-9a-f]+",
        Then::Probe,
    );
}

/// A lazy `app` image (the one plain lazy capture the tests share) restored by the restorer:
/// the restorer checks its swap region as resume does and restores the eager part, and
/// the device-mapper stack inside the image kernel pages the rest in from the region on
/// the store: the state checksum is right before and after squeezing memory, and the
/// region is byte for byte as captured afterwards. Then the region's swap header is
/// overwritten on the host: the restorer refuses the image with resume's reason and boots
/// the stock kernel cold.
#[test]
fn restorer_restores_a_lazy_app_image_and_refuses_one_whose_swap_region_is_overwritten() {
    let store = copy_store(&captured_lazy(), "test-restorer-lazy.store");
    let (off, len, used) = swap_of(&store);
    let pristine = region_hash(&store, off, len);
    let b = bundle::Bundle::load(&bundle("app")).unwrap();
    let o = restorer_options(&b, &store);
    let expected = host_checksum();
    let mut s = board::qemu::Session::start(&b, &o).unwrap();
    let (line, _) = expect_line(
        &mut s,
        &format!(
            r"snapboot-restorer: image checked: current, .*, lazy: {used} pages in its swap region at byte {off} \(header and verity tree's top checked\); restoring"
        ),
        "the restorer's check of the lazy image",
    );
    eprintln!("{line}");
    expect_line(&mut s, r"snapboot: @restored", "restored marker");
    // Touches every record: pages everything back in from the swap region.
    let sum = ask(&mut s, "checksum", "^checksum [0-9a-f]{64}$");
    assert_eq!(sum, expected, "state differs from before capture");
    ask(&mut s, "squeeze 700", "^squeezed 700$");
    let sum = ask(&mut s, "checksum", "^checksum [0-9a-f]{64}$");
    assert_eq!(sum, expected, "state differs after swapping");
    let tl = s.finish(boottrace::Outcome::Answered);
    assert!(
        !tl.lines.iter().any(|l| l.text.contains("Linux version")),
        "a kernel booted before the image"
    );
    assert_eq!(
        region_hash(&store, off, len),
        pristine,
        "the restored system wrote to the image's swap region"
    );

    // The swap header overwritten (as a new swap area made over the region would).
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&store)
            .unwrap();
        f.write_all_at(&[0u8; 10], off + 4096 - 10).unwrap();
    }
    let mut o = restorer_options(&b, &store);
    o.cmdline.push("snapboot.norecapture".into());
    expect_refusal_then_cold_boot(
        &b,
        &o,
        &format!(
            r"no image restores: current: lazy image: swap region at byte {off} no longer holds this image's swap area \(header overwritten\)"
        ),
        Then::StoodDown,
    );
}

fn stats(v: &[f64]) -> String {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    format!(
        "median {:.3} s [{:.3}..{:.3}] (n={})",
        s[s.len() / 2],
        s[0],
        s[s.len() - 1],
        s.len()
    )
}

/// 20 rounds, interleaved: a cold boot, the stock kernel's restore of the captured `shell`
/// image, the restorer's restore of the same image. Prints each method's TTI. Run with
/// `cargo test --release -p snapboot --test e2e restorer_bench_shell -- --ignored --nocapture`
/// (SNAPBOOT_ROUNDS changes the number of rounds).
#[test]
#[ignore]
fn restorer_bench_shell() {
    let rounds: usize = std::env::var("SNAPBOOT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let store = copy_store(&captured("shell"), "bench-restorer.store");
    let b = bundle::Bundle::load(&bundle("shell")).unwrap();
    let cold = board::RunOptions::for_bundle(&b);
    let stock = store_options(&b, &store);
    let restorer = restorer_options(&b, &store);
    let (mut c, mut k, mut r) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let tl = bench::measured_boot(&b, &cold, false).unwrap();
        c.push(tl.tti.unwrap());
        let tl = bench::measured_boot(&b, &stock, true).unwrap();
        k.push(tl.tti.unwrap());
        r.push(restore_once(&b, &restorer).tti.unwrap());
        eprintln!(
            "round {round}: cold {:.3} s, stock-kernel restore {:.3} s, restorer {:.3} s",
            c[round], k[round], r[round]
        );
    }
    eprintln!("cold boot:             {}", stats(&c));
    eprintln!("stock-kernel restore:  {}", stats(&k));
    eprintln!("restorer restore:      {}", stats(&r));
}

/// A copy of the `shell` bundle (hard links) whose kernel pack is `pack(kernel, initrd)`.
fn bundle_with_pack(name: &str, pack: impl FnOnce(&[u8], &[u8]) -> Vec<u8>) -> bundle::Bundle {
    let from = bundle("shell");
    let dir = crate::common::home().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let (out, so, se) = run({
        let mut c = Command::new("cp");
        c.arg("-al").arg(&from).arg(&dir);
        c
    });
    assert!(out.status.success(), "cp: {so}{se}");
    let b = bundle::Bundle::load(&dir).unwrap();
    let old = kernelpack::read(std::fs::File::open(b.kernel_pack()).unwrap()).unwrap();
    let bytes = pack(&old.kernel, &old.initrd);
    // A new file, not the linked one: the bundle's own pack stays as it is.
    std::fs::remove_file(b.kernel_pack()).unwrap();
    std::fs::write(b.kernel_pack(), bytes).unwrap();
    b
}

/// The kernel pack's initramfs summary spares the restorer the archive; a pack without one
/// (written before it existed) or with one of another initramfs still restores, the
/// archive read instead and the console saying why.
#[test]
fn restorer_reads_the_initramfs_itself_when_the_pack_has_no_summary_or_a_wrong_one() {
    let store = copy_store(&captured("shell"), "test-restorer-summary.store");
    let lines = |b: &bundle::Bundle| -> Vec<String> {
        let o = restorer_options(b, &store);
        restore_once(b, &o)
            .lines
            .iter()
            .map(|l| l.text.clone())
            .filter(|l| l.contains("kernel pack's initramfs"))
            .collect()
    };
    let b = bundle::Bundle::load(&bundle("shell")).unwrap();
    let got = lines(&b);
    assert!(
        got.iter().any(|l| l.contains("initramfs summary read")),
        "{got:?}"
    );

    let plain = bundle_with_pack("test-bundle-plain-pack", |k, i| {
        let mut out = Vec::new();
        kernelpack::write(&mut out, k, i).unwrap();
        out
    });
    let got = lines(&plain);
    assert!(
        got.iter()
            .any(|l| l.contains("the kernel pack's initramfs read (cpio")),
        "{got:?}"
    );

    let wrong = bundle_with_pack("test-bundle-wrong-summary", |k, i| {
        let mut i2 = i.to_vec();
        i2.extend_from_slice(&[0u8; 4]);
        // A summary of another initramfs than the pack's (the archive with padding after
        // it hashes differently, and reads to the same root).
        let summary = restorer::stockinit::summary(&i2).unwrap();
        let mut out = Vec::new();
        kernelpack::write_with_summary(&mut out, k, i, Some(&summary)).unwrap();
        out
    });
    let got = lines(&wrong);
    assert!(
        got.iter().any(|l| l.contains(
            "initramfs summary: taken from another initramfs than the pack's; reading the initramfs itself"
        )) && got.iter().any(|l| l.contains("initramfs read (cpio")),
        "{got:?}"
    );
}
