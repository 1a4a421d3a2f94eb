//! End-to-end tests of the restorer (crates/restorer): started by the PC's firmware in place
//! of a kernel, it restores the stock kernel's `shell` image from a restore pack
//! (`board restore-pack`) with no kernel booted first, or refuses with its reason and boots
//! the stock kernel cold from the kernel pack. `restorer_bench_shell` (ignored: about 10
//! minutes) measures it against a cold boot and the stock kernel's restore of the same
//! image.

use crate::common::{bundle, run, snapboot, store_options};
use crate::snapshot::{captured, copy_store};
use board::run_options::KernelImage;
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

/// A copy of the captured `shell` store (named `name`) and its newest image as a pack.
fn shell_pack(name: &str) -> (PathBuf, PathBuf) {
    let store = copy_store(&captured("shell"), &format!("{name}.store"));
    let pack = store.with_extension("pack");
    let mut c = snapboot();
    c.args(["board", "restore-pack", "--store"])
        .arg(&store)
        .arg("--out")
        .arg(&pack);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "restore-pack failed:\n{so}\n{se}");
    assert!(so.contains("enters 0xffffffff"), "{so}");
    (store, pack)
}

/// Run options booting the restorer with `pack`; the store stays attached so the firmware's
/// memory map is the one the image was captured on.
fn restorer_options(b: &board::Bundle, store: &Path, pack: &Path) -> board::RunOptions {
    let mut o = store_options(b, store);
    o.kernel = KernelImage::Restorer {
        elf: restorer_elf(),
        pack: pack.to_path_buf(),
    };
    o
}

/// One restore from the restorer, answered by the restored shell: its TTI.
fn restore_once(b: &board::Bundle, o: &board::RunOptions) -> f64 {
    let tl = board::bench::measured_boot(b, o, true).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        tl.lines
            .iter()
            .any(|l| l.text.contains("snapboot-restorer: image checked")),
        "the restorer did not run"
    );
    tl.tti.expect("a TTI")
}

/// The restorer restores the same image again and again, each time answering the probe.
#[test]
fn restorer_restores_shell_repeatedly() {
    let (store, pack) = shell_pack("test-restorer");
    let b = board::Bundle::load(&bundle("shell")).unwrap();
    let o = restorer_options(&b, &store, &pack);
    for _ in 0..3 {
        let tti = restore_once(&b, &o);
        assert!(tti > 0.0 && tti < 60.0, "{tti}");
    }
}

/// Waits for a console line matching `pattern`; returns it and its time.
fn expect_line(s: &mut board::qemu::Session, pattern: &str, what: &str) -> (String, f64) {
    let re = Regex::new(pattern).unwrap();
    s.wait_for(&re, what, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Boots the restorer and expects it to refuse with `reason`, then to boot the stock kernel
/// cold from the kernel pack: the refusal and the `cold boot:` line come before the stock
/// kernel's first line, which stands down from the image (`snapboot.handedover`) and
/// reaches ready, and the shell answers its probe.
fn expect_refusal_then_cold_boot(b: &board::Bundle, o: &board::RunOptions, reason: &str) {
    let mut s = board::qemu::Session::start(b, o).unwrap();
    let refusal = format!("snapboot-restorer: refused: {reason}");
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
        (r"snapboot: @ready", "the cold boot reaching ready"),
    ];
    let mut times = Vec::new();
    let mut lines = Vec::new();
    for (pattern, what) in steps {
        let (line, t) = expect_line(&mut s, pattern, what);
        times.push((what, t));
        lines.push(line);
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
    s.finish(boottrace::Outcome::Answered);
}

/// A damaged pack and another RAM size are refused before any page is written, each with
/// its reason on the console, and the stock kernel then boots cold from the kernel pack.
#[test]
fn restorer_refuses_a_corrupt_pack_and_another_ram_size() {
    let (store, pack) = shell_pack("test-restorer-refuse");
    let b = board::Bundle::load(&bundle("shell")).unwrap();
    let mut o = restorer_options(&b, &store, &pack);
    o.mem_mib += 64;
    expect_refusal_then_cold_boot(
        &b,
        &o,
        r"memory map: image's e820 checksum 0x[0-9a-f]+, this machine's",
    );
    let mut bytes = std::fs::read(&pack).unwrap();
    let last = bytes.len() - 100;
    bytes[last] ^= 0x40;
    let damaged = pack.with_extension("damaged.pack");
    std::fs::write(&damaged, &bytes).unwrap();
    let o = restorer_options(&b, &store, &damaged);
    expect_refusal_then_cold_boot(&b, &o, r"pack checksum 0x[0-9a-f]+, header says");
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
    let (store, pack) = shell_pack("bench-restorer");
    let b = board::Bundle::load(&bundle("shell")).unwrap();
    let cold = board::RunOptions::for_bundle(&b);
    let stock = store_options(&b, &store);
    let restorer = restorer_options(&b, &store, &pack);
    let (mut c, mut k, mut r) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let tl = board::bench::measured_boot(&b, &cold, false).unwrap();
        c.push(tl.tti.unwrap());
        let tl = board::bench::measured_boot(&b, &stock, true).unwrap();
        k.push(tl.tti.unwrap());
        r.push(restore_once(&b, &restorer));
        eprintln!(
            "round {round}: cold {:.3} s, stock-kernel restore {:.3} s, restorer {:.3} s",
            c[round], k[round], r[round]
        );
    }
    eprintln!("cold boot:             {}", stats(&c));
    eprintln!("stock-kernel restore:  {}", stats(&k));
    eprintln!("restorer restore:      {}", stats(&r));
}
