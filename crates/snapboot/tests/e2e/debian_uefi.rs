//! The `debian` workload on the UEFI PC (`--firmware uefi`): OVMF boots GRUB from the disk's
//! ESP, GRUB boots the entries snapboot ships (`guest/grub/42_snapboot`). The device asks for
//! its own capture (`snapboot capture --next-boot` sets `next_entry` in the ESP's grubenv);
//! GRUB boots the capture entry once and clears the request. With the restore kernel
//! installed its entry is GRUB's default: it restores the image, and hands a boot it cannot
//! restore to the stock kernel (the pack partition), which boots cold; GRUB's normal entry
//! (the stock kernel) restores the same image before udev, and boots cold on a damaged one.
//! The store is the PC disk's partition `snapstore`, which the root's config file names: no
//! kernel word.

use crate::snapshot::{ask, check_restored_app, copy_store, flip, newest_chunk_middle};
use board::run_options::Firmware;
use board::uefi::{grubenv_var, CAPTURE_ENTRY, NORMAL_ENTRY, RESTORE_ENTRY};
use regex::Regex;
use std::path::Path;
use std::time::Duration;

/// The `debian` board on UEFI booting `disk`, the PC's disk with the store partition (made
/// from the bundle's disk with an empty store when missing); with `restore_kernel`, what a
/// device has after `snapboot restore-kernel install`: that kernel as GRUB's default entry.
pub(crate) fn uefi_session(
    b: &bundle::Bundle,
    disk: &Path,
    restore_kernel: Option<&Path>,
) -> board::qemu::Session {
    uefi_session_with_words(b, disk, restore_kernel, &[])
}

/// [`uefi_session`] with kernel `words` added to GRUB's entries.
fn uefi_session_with_words(
    b: &bundle::Bundle,
    disk: &Path,
    restore_kernel: Option<&Path>,
    words: &[&str],
) -> board::qemu::Session {
    let mut o = uefi_options(b, disk);
    o.cmdline.extend(words.iter().map(|w| w.to_string()));
    if let Some(k) = restore_kernel {
        o.kernel = board::run_options::KernelImage::Restore(k.to_path_buf());
    }
    board::qemu::Session::start(b, &o).unwrap()
}

fn uefi_options(b: &bundle::Bundle, disk: &Path) -> board::RunOptions {
    let mut o = board::RunOptions::for_bundle(b);
    o.timeout = Duration::from_secs(300);
    o.firmware = Firmware::Uefi;
    board::capture::attach_store(&mut o, disk, false).unwrap();
    o
}

/// The UEFI PC booting `disk` with the EFI restorer as GRUB's default entry (the stock
/// kernel's entry the fallback), the PC changed by `change` (another RAM size, another
/// firmware memory map).
pub(crate) fn restorer_session(
    b: &bundle::Bundle,
    disk: &Path,
    change: impl FnOnce(&mut board::RunOptions),
) -> board::qemu::Session {
    let o = uefi_options(b, disk);
    let mut o =
        board::restorer_boot::restorer_options(b, &o, &crate::restorer::restorer_efi(), disk)
            .unwrap();
    change(&mut o);
    board::qemu::Session::start(b, &o).unwrap()
}

/// An ACPI table of `bytes` bytes (signature `SBTS`, checksummed): given to the firmware it
/// grows the ACPI memory in its map, as a firmware update or another setting would.
fn acpi_table(path: &Path, bytes: usize) {
    let mut t = vec![0u8; bytes];
    t[0..4].copy_from_slice(b"SBTS");
    t[4..8].copy_from_slice(&(bytes as u32).to_le_bytes());
    t[8] = 1;
    t[10..16].copy_from_slice(b"SNAPBT");
    t[16..24].copy_from_slice(b"TESTMAP ");
    let sum = t.iter().fold(0u8, |a, b| a.wrapping_add(*b));
    t[9] = 0u8.wrapping_sub(sum);
    std::fs::write(path, t).unwrap();
}

/// Follows a boot of the EFI restorer that restores (boot number `boot` of the image): it
/// takes the image, the system comes back with the service's state, clock and fresh RNG
/// (`expected`: the state's checksum), the restorer set the image kernel's runtime map, and
/// EFI variables are read and written through it. Returns the RNG's answer and the timeline.
pub(crate) fn restorer_restores(
    mut s: board::qemu::Session,
    boot: usize,
    expected: &str,
) -> (String, boottrace::Timeline) {
    expect_grub_entry(&mut s, "snapboot-restorer");
    let verdict = expect(
        &mut s,
        r"snapboot-restorer: (image checked|refused|image-refused)",
        "the EFI restorer's verdict",
        120,
    );
    assert!(
        verdict.contains("image checked: current"),
        "boot {boot}: the EFI restorer did not take the image: {verdict}"
    );
    expect(&mut s, r"snapboot: @restored ", "restored marker", 300);
    let random = check_restored_app(&mut s, boot, expected);
    assert_efi_variables(
        &mut s,
        &format!("boot {boot}, restored by the EFI restorer"),
    );
    let tl = s.finish(boottrace::Outcome::Answered);
    assert!(
        tl.lines.iter().any(|l| l
            .text
            .contains("snapboot-restorer: runtime services in virtual mode")),
        "boot {boot}: the EFI restorer did not set the image kernel's runtime map"
    );
    // A chunk that read wrong and right again restores, but the soak reports it: the
    // record of an intermittent bad read through the firmware.
    for l in tl
        .lines
        .iter()
        .filter(|l| l.text.contains("read right again"))
    {
        eprintln!("boot {boot}: {}", l.text.trim());
    }
    (random, tl)
}

/// Follows a boot of the EFI restorer that refuses: the reason (matching `why`) on the
/// console before it leaves boot services, then GRUB's fallback, the stock kernel, whose
/// own resume refuses too (`stock_why`) or is not waited for (`None`).
fn restorer_refuses(mut s: board::qemu::Session, why: &str, stock_why: Option<&str>) {
    expect_grub_entry(&mut s, "snapboot-restorer");
    let line = expect(
        &mut s,
        r"snapboot-restorer: (refused|image-refused|leaving boot services)",
        "the EFI restorer's verdict",
        120,
    );
    assert!(
        line.contains("refused") && line.contains(why),
        "{why} not in {line}"
    );
    expect(&mut s, r"Falling back to", "GRUB's fallback entry", 60);
    expect(
        &mut s,
        r"Linux version 6\.1\.\S+-amd64 ",
        "the stock kernel",
        120,
    );
    if let Some(w) = stock_why {
        let line = expect(
            &mut s,
            r"snapboot: @fallback ",
            "the stock kernel's fallback",
            300,
        );
        assert!(line.contains(w), "{w} not in {line}");
    }
    // Dropping the session powers the PC off: the cold boot is not waited for.
    drop(s);
}

/// Damages the newest image in the store partition of the PC's disk `disk` (one byte in
/// the middle of its last chunk); returns that chunk's id.
fn damage_newest_image_on(disk: &Path) -> u64 {
    let part = board::uefi::store_partition(disk).unwrap();
    let s = board::uefi::open_store(disk, false).unwrap();
    let (id, at) = newest_chunk_middle(&s);
    drop(s);
    flip(disk, part.offset + at);
    id
}

/// The EFI runtime map the newest image on the PC's disk `disk` recorded (the capture's
/// kernel's `/sys/firmware/efi/runtime-map`), printed; asserts it has regions, so the check
/// every restore makes of it is not of two empty maps.
pub(crate) fn recorded_efi_runtime_map(disk: &Path) -> Vec<snapimg::EfiRuntimeRegion> {
    let s = board::uefi::open_store(disk, false).unwrap();
    let rec = s.newest().unwrap().clone();
    let meta = s.image_meta(&rec).unwrap();
    let d = snapimg::Description::decode(&meta.user).unwrap();
    let map = d.identity.memory.efi_runtime;
    for r in &map {
        eprintln!(
            "capture's EFI runtime region: {r} type {} attribute {:#x}",
            r.kind, r.attribute
        );
    }
    assert!(!map.is_empty(), "the capture recorded no EFI runtime map");
    map
}

/// Asks the running system for UEFI runtime services (`efivar`): it reads the firmware's
/// `BootOrder`, writes, reads back and deletes snapboot's own variable; asserts each step.
/// After a restore this is the image kernel calling the firmware through the virtual map
/// it set at capture, which the boot that restored it must have given the firmware.
pub(crate) fn assert_efi_variables(s: &mut board::qemu::Session, boot: &str) {
    let value = "736e6170626f6f74"; // "snapboot"
    let answer = ask(
        s,
        &format!("efivar {value}"),
        r"^(efivar BootOrder=|efivar error |error )",
    );
    eprintln!("{boot}: {answer}");
    let order = Regex::new(r"^efivar BootOrder=[0-9A-F]{4}(,[0-9A-F]{4})* ").unwrap();
    if !order.is_match(&answer) {
        // What the kernel said about EFI this boot, and whether efivarfs is mounted.
        let log = ask(s, "journal efi", r"^journal \d+");
        let mount = ask(
            s,
            "mount /sys/firmware/efi/efivars",
            r"^mount /sys/firmware/efi/efivars \S",
        );
        panic!("{boot}: BootOrder not read: {answer}\n{mount}\n{log}");
    }
    let own = format!(" wrote={value} read={value} deleted=yes");
    assert!(
        answer.ends_with(&own),
        "{boot}: snapboot's variable not written, read back and deleted: {answer}"
    );
}

/// Waits up to `secs` for a console line matching `pattern`; returns it.
pub(crate) fn expect(s: &mut board::qemu::Session, pattern: &str, what: &str, secs: u64) -> String {
    let re = Regex::new(pattern).unwrap();
    s.wait_for(&re, what, Duration::from_secs(secs))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .0
}

/// Waits for GRUB's line naming the entry it boots and checks it is `entry`.
pub(crate) fn expect_grub_entry(s: &mut board::qemu::Session, entry: &str) {
    let line = expect(s, r"grub: booting (\S+)", "GRUB's entry", 120);
    assert!(line.ends_with(&format!("booting {entry}")), "{line}");
}

/// Follows a boot of GRUB's capture entry: the capture, at the store the config file names
/// (no kernel word names one), then the power-off.
pub(crate) fn captures_through_grubs_entry(mut s: board::qemu::Session) {
    expect_grub_entry(&mut s, CAPTURE_ENTRY);
    let line = expect(
        &mut s,
        r"snapboot: @capture-(done|failed)",
        "the capture",
        500,
    );
    assert!(line.contains("@capture-done"), "{line}");
    let found = format!("PARTLABEL={} (/dev/vda4)", board::uefi::STORE_NAME);
    let start = s
        .timeline()
        .lines
        .iter()
        .find(|l| l.text.contains("@capture-start"))
        .map(|l| l.text.clone())
        .unwrap_or_default();
    assert!(start.contains(&found), "{found} not in {start:?}");
    s.wait_exit(Duration::from_secs(60)).unwrap();
    s.finish(boottrace::Outcome::PoweredOff);
}

/// The device's request, as in the field, on a PC whose default entry is the restore kernel's:
/// with no image the restore kernel hands the boot to the stock kernel in the pack partition,
/// which boots cold; there the application runs `snapboot capture --next-boot` and powers off.
/// The next power-on GRUB boots the capture entry once (and clears the request itself),
/// which captures; the power-on after that is the restore kernel's entry again, which
/// restores with the service's state intact. GRUB's normal entry (a PC without the restore
/// kernel) restores it too, before udev, with the outcome in the journal; a damaged image
/// there is refused with the reason and boots cold, and so is the good one when the stock
/// kernel runs without EFI runtime services. After the hand-over and after each kind of
/// restore the running system reads, writes and deletes EFI variables.
#[test]
fn debian_on_uefi_captures_through_grubs_entry_once_and_restores() {
    let rk = crate::restore_kernel::restore_kernel();
    let b = bundle::Bundle::load(&crate::common::bundle("debian")).unwrap();
    // No request left in the bundle's disk, which the PC's disk is made from: the first
    // power-on is the default entry.
    board::uefi::set_next_entry(&board::uefi::ensure_disk(&b).unwrap(), None).unwrap();
    // The PC's whole disk: ESP, root, pack, and an empty store in its partition.
    let store = crate::common::home().join("test-uefi-debian.img");
    let _ = std::fs::remove_file(&store);
    let disk = &store;
    let mem = board::RunOptions::for_bundle(&b).mem_mib;
    board::uefi::ensure_store_disk(&b, disk, true, board::capture::store_size(mem)).unwrap();
    let ready = r"snapboot: @ready";

    // 1. The restore kernel's entry, no image: handed to the stock kernel, cold. The device
    // asks for a capture and powers off.
    let mut s = uefi_session(&b, &store, Some(&rk));
    expect_grub_entry(&mut s, RESTORE_ENTRY);
    expect(
        &mut s,
        r"Linux version \S+-snapboot-restore",
        "the restore kernel",
        120,
    );
    expect(&mut s, r"snapboot: @fallback ", "fallback", 300);
    let line = expect(&mut s, r"snapboot: @handover", "handover marker", 120);
    assert!(line.contains("kexec into 6.1"), "{line}");
    expect(
        &mut s,
        r"Linux version 6\.1\.\S+-amd64 ",
        "the stock kernel",
        120,
    );
    expect(&mut s, ready, "the cold boot's ready", 400);
    // The stock kernel kexec'd by the restore kernel calls the firmware through the map the
    // restore kernel set (kexec_file handed it over).
    assert_efi_variables(&mut s, "the stock kernel after the hand-over");
    let answer = ask(&mut s, "nextboot", r"^next-boot \S+$");
    assert_eq!(answer, "next-boot 0", "snapboot capture --next-boot failed");
    s.wait_exit(Duration::from_secs(120)).unwrap();
    s.finish(boottrace::Outcome::PoweredOff);
    let next = grubenv_var(disk, "next_entry").unwrap();
    assert_eq!(next.as_deref(), Some(CAPTURE_ENTRY), "the device's request");

    // 2. GRUB takes the request: the capture entry (the stock kernel), once; it captures and
    // powers off.
    let s = uefi_session(&b, &store, Some(&rk));
    captures_through_grubs_entry(s);
    let next = grubenv_var(disk, "next_entry").unwrap();
    assert!(
        next.as_deref().unwrap_or("").is_empty(),
        "GRUB left next_entry set: {next:?}"
    );

    // 3. The restore kernel's entry again: it restores the capture boot's system, on its
    // first try: it gave the firmware the EFI runtime map the capture recorded (resume
    // checks it), and the restored system reads and writes EFI variables through it.
    recorded_efi_runtime_map(disk);
    let expected = crate::snapshot::host_checksum_at(bundle::debian::APP_SCALE);
    let mut s = uefi_session(&b, &store, Some(&rk));
    expect_grub_entry(&mut s, RESTORE_ENTRY);
    expect(&mut s, r"snapboot: @restored ", "restored marker", 300);
    // On its first try: the config file's PARTLABEL found by the first process itself.
    crate::restore_kernel::assert_restored_on_first_try(&s, "the restore kernel's entry");
    check_restored_app(&mut s, 1, &expected);
    assert_efi_variables(&mut s, "restored by the restore kernel");
    s.finish(boottrace::Outcome::Answered);

    // 3b. GRUB's normal entry (the stock kernel and initramfs-tools' initramfs, as on a PC
    // without the restore kernel): the store named only in the config file is restored by
    // the init-top script, before udev; the restored system's journal has the outcome.
    let mut s = uefi_session(&b, &store, None);
    expect_grub_entry(&mut s, NORMAL_ENTRY);
    expect(&mut s, r"snapboot: @restored ", "restored marker", 300);
    crate::debian_config::assert_resumed_before_udev(&s, "initramfs-tools");
    check_restored_app(&mut s, 2, &expected);
    assert_efi_variables(&mut s, "restored by the stock kernel");
    crate::debian_config::assert_in_journal(&mut s, "@status", "@status restored");
    crate::debian_config::assert_history_restored(&mut s, "current");
    s.finish(boottrace::Outcome::Answered);

    // 3c. The EFI restorer as GRUB's default entry: no kernel before the image, the store
    // found through the firmware's Block I/O by the config file's PARTLABEL, every chunk
    // read and checked before it leaves boot services; the system comes back as it was.
    let s = restorer_session(&b, &store, |_| {});
    restorer_restores(s, 3, &expected);

    // 3d. The same disk on a PC with another RAM size: the firmware's memory map is not the
    // image kernel's; the restorer refuses before it leaves the firmware, and GRUB boots
    // the stock kernel's entry.
    let mem = board::RunOptions::for_bundle(&b).mem_mib;
    let s = restorer_session(&b, &store, |o| o.mem_mib = mem + 256);
    restorer_refuses(s, "the memory map differs", None);

    // 3e. The same RAM under a firmware whose memory map differs (60 KiB more ACPI tables,
    // as after a firmware update): refused before the exit, the stock kernel's entry.
    let table = crate::common::home().join("test-uefi-acpi.bin");
    acpi_table(&table, 60 << 10);
    let s = restorer_session(&b, &store, |o| o.acpi_tables.push(table.clone()));
    restorer_refuses(s, "the memory map differs", None);

    // 4. A damaged image on GRUB's normal entry (the stock kernel): refused with the reason,
    // cold.
    let bad = copy_store(&store, "test-uefi-debian-bad.img");
    let chunk = damage_newest_image_on(&bad);
    let mut s = uefi_session(&b, &bad, None);
    expect_grub_entry(&mut s, NORMAL_ENTRY);
    let line = expect(&mut s, r"snapboot: @fallback ", "fallback", 300);
    assert!(
        line.contains(&format!("checksum mismatch in chunk {chunk}")),
        "fallback without the damaged part named: {line}"
    );
    // No store word on the kernel line: the config file's PARTLABEL found the partition.
    let found = format!("store PARTLABEL={} (/dev/vda4)", board::uefi::STORE_NAME);
    assert!(line.contains(&found), "{found} not in {line}");
    expect(&mut s, ready, "the cold boot's ready", 400);
    ask(&mut s, "ping", r"^pong \d+$");
    // Why this boot was not restored is in the journal too (the kernel log's copy).
    crate::debian_config::assert_in_journal(
        &mut s,
        "@fallback",
        &format!("checksum mismatch in chunk {chunk}"),
    );
    s.finish(boottrace::Outcome::Answered);

    // 4b. The damaged image from the EFI restorer: the chunk fails its checksum while the
    // firmware still runs, so the refusal goes back to GRUB, whose fallback entry (the
    // stock kernel) refuses it too.
    let s = restorer_session(&b, &bad, |_| {});
    let mismatch = format!("checksum mismatch in chunk {chunk}");
    restorer_refuses(s, &mismatch, Some(&mismatch));

    // 4c. An image of another kernel build (its description names release 9.x, the kernel
    // pack's kernel is 6.1): the EFI restorer refuses it by that field before the exit, and
    // the stock kernel's resume in GRUB's fallback entry does too.
    let foreign = copy_store(&store, "test-uefi-debian-foreign.img");
    let mut fs = board::uefi::open_store(&foreign, true).unwrap();
    crate::snapshot::rewrite_identity_in(&mut fs, crate::snapshot::another_release);
    drop(fs);
    let s = restorer_session(&b, &foreign, |_| {});
    restorer_refuses(s, "kernel release differs", Some("kernel release differs"));

    // 5. The good image on GRUB's normal entry with the stock kernel's EFI runtime services
    // off (`efi=noruntime`): the firmware is not in the virtual mode the image kernel set,
    // so the image is refused with that reason, before any page, and the PC boots cold.
    let regions = recorded_efi_runtime_map(disk).len();
    let mut s = uefi_session_with_words(&b, &store, None, &["efi=noruntime"]);
    expect_grub_entry(&mut s, NORMAL_ENTRY);
    let line = expect(&mut s, r"snapboot: @fallback ", "fallback", 300);
    let reason = format!(
        "EFI runtime map differs from the capture's: the image kernel mapped {regions} firmware \
         regions for EFI runtime services, this boot's kernel runs without them"
    );
    assert!(line.contains(&reason), "{reason:?} not in {line}");
    eprintln!("efi=noruntime: {line}");
    s.finish(boottrace::Outcome::Incomplete);
}

/// Issue 46's spike, kept as a soak: one `debian` image on the UEFI PC restored by the EFI
/// restorer `SNAPBOOT_EFI_RESTORER_ROUNDS` times in a row (`make soak`: 20), each restore
/// checked: the service's state, the clock and the RNG (fresh every time), the runtime map
/// the restorer set, and an EFI variable read, written, read back and deleted through it.
#[test]
#[ignore = "a soak: `make soak` runs it"]
fn efi_restorer_restores_debian_repeatedly_with_efi_variables() {
    let rounds: usize = std::env::var("SNAPBOOT_EFI_RESTORER_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let b = bundle::Bundle::load(&crate::common::bundle("debian")).unwrap();
    let disk = crate::common::home().join("test-uefi-soak.img");
    let _ = std::fs::remove_file(&disk);
    let mem = board::RunOptions::for_bundle(&b).mem_mib;
    board::uefi::ensure_store_disk(&b, &disk, true, board::capture::store_size(mem)).unwrap();
    let mut o = board::RunOptions::for_bundle(&b);
    o.timeout = Duration::from_secs(600);
    o.firmware = Firmware::Uefi;
    board::capture::capture_boot(&b, &o, &disk).unwrap_or_else(|e| panic!("capture: {e}"));
    let expected = crate::snapshot::host_checksum_at(bundle::debian::APP_SCALE);
    let mut randoms = Vec::new();
    for round in 0..rounds {
        let started = std::time::Instant::now();
        let s = restorer_session(&b, &disk, |_| {});
        let (random, tl) = restorer_restores(s, round, &expected);
        randoms.push(random);
        eprintln!(
            "EFI restorer round {round}: TTI {:.2} s, {:.1} s wall",
            tl.tti.unwrap_or_default(),
            started.elapsed().as_secs_f64()
        );
    }
    crate::snapshot::assert_all_differ(randoms);
}
