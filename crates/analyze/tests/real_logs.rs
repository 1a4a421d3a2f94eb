//! The analysis, advisor and reports against real logs: the board's consoles captured by
//! boottrace (host-stamped), this host's own `dmesg` and kernel config, and dmesg captures in
//! the formats real boards print (initcall_debug, `dmesg -r` levels, no printk time).

use std::path::PathBuf;

use analyze::{analyze_files, load_config, MilestoneKind as K, PhaseKind, Report, Verdict};

fn board(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../boottrace/tests/data")
        .join(name)
}

fn ours(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn report(paths: &[PathBuf]) -> Report {
    match analyze_files(paths, None) {
        Ok(r) => r,
        Err(e) => panic!("analysis failed: {e}"),
    }
}

fn rules(r: &Report, run: usize) -> Vec<&str> {
    r.runs[run]
        .findings
        .iter()
        .map(|f| f.rule.as_str())
        .collect()
}

#[test]
fn board_cold_boots_have_every_phase_on_the_host_axis() {
    let r = report(&[board("shell-cold.log"), board("app-cold.log")]);
    for run in &r.runs {
        let a = &run.analysis;
        assert!(a.has_host_stamps && a.has_printk_time && !a.has_initcall_debug);
        for k in [
            PhaseKind::Firmware,
            PhaseKind::Kernel,
            PhaseKind::Unpack,
            PhaseKind::Initramfs,
            PhaseKind::Userspace,
            PhaseKind::App,
        ] {
            assert!(a.phase(k).is_some(), "{}: no {k:?} phase", a.source);
        }
        // Phases of the main row follow each other without overlap.
        let main: Vec<_> = a.phases.iter().filter(|p| !p.kind.is_detail()).collect();
        assert!(
            main.windows(2).all(|w| w[0].end <= w[1].start + 1e-9),
            "{main:?}"
        );
        assert_eq!(a.tti, a.at(K::ProbeAnswered));
        let c = a.console.as_ref().expect("console cost");
        assert_eq!(c.console.baud, 115200);
        assert!(c.virtual_uart, "QEMU's UART is faster than 115200 baud");
    }
    let app = &r.runs[1].analysis;
    assert!(app
        .phase(PhaseKind::App)
        .is_some_and(|p| p.duration() > 20.0));
    assert!(rules(&r, 1).contains(&"snapshot_gain"));
    assert!(!rules(&r, 0).contains(&"snapshot_gain"));
}

#[test]
fn board_panic_log_has_no_user_space() {
    let r = report(&[board("panic.log")]);
    let a = &r.runs[0].analysis;
    assert!(a.outcome.contains("Unable to mount root fs"));
    assert!(a.phase(PhaseKind::Kernel).is_some());
    assert!(a.phase(PhaseKind::Userspace).is_none() && a.tti.is_none());
    assert_eq!(rules(&r, 0), ["quiet"]);
}

#[test]
fn this_hosts_dmesg_parses_and_is_quiet() {
    let r = report(&[ours("host-dmesg.log")]);
    let a = &r.runs[0].analysis;
    assert!(a.has_printk_time && !a.has_host_stamps);
    assert!(a.kernel_version.is_some());
    assert!(a.init_exec.is_some_and(|t| t > 0.0));
    assert!(a.console.as_ref().is_some_and(|c| c.quiet));
    assert!(!rules(&r, 0).contains(&"quiet"));
}

#[test]
fn initcall_debug_log_gives_bars_per_pid() {
    let r = report(&[ours("beagle-initcall-debug.log")]);
    let a = &r.runs[0].analysis;
    assert!(a.has_initcall_debug);
    assert_eq!(a.initcalls.len(), 23);
    let pids: std::collections::BTreeSet<u32> = a.initcalls.iter().map(|c| c.pid).collect();
    assert_eq!(pids.into_iter().collect::<Vec<_>>(), [1, 26, 1127]);
    let ftdi = a.initcalls.iter().find(|c| c.name == "ftdi_sio_init");
    assert!(ftdi.is_some_and(|c| c.module.as_deref() == Some("ftdi_sio")));
    for rule in [
        "lpj",
        "quiet",
        "legacy_ptys",
        "slow_initcalls",
        "probe_delay",
        "initramfs_unpack",
        "rootfs_mount",
    ] {
        assert!(rules(&r, 0).contains(&rule), "{rule} did not fire");
    }
    let svg = r.to_svg();
    assert!(svg.contains("initcalls pid 26"));
    assert_eq!(svg.matches(r#"class="initcall""#).count(), 22);
    assert_eq!(svg.matches(r#"class="initcall module""#).count(), 1);
}

#[test]
fn dmesg_raw_levels_and_ip_config() {
    let r = report(&[ours("nfsroot-ipconfig.log")]);
    let a = &r.runs[0].analysis;
    assert_eq!(a.cmdline.as_ref().and_then(|c| c.value("ip")), Some("dhcp"));
    assert_eq!(rules(&r, 0)[0], "ip_autoconfig");
}

#[test]
fn serial_capture_without_printk_time() {
    let r = report(&[ours("serial-no-printk-time.log")]);
    let a = &r.runs[0].analysis;
    assert!(!a.has_printk_time && !a.has_host_stamps && a.phases.is_empty());
    assert_eq!(a.kernel_version.as_deref(), Some("3.2.0"));
    let lpj = r.runs[0].findings.iter().find(|f| f.rule == "lpj");
    assert!(lpj.is_some_and(|f| f.saving_s.is_none()));
}

#[test]
fn every_format_renders() {
    let paths = [
        board("shell-cold.log"),
        board("app-cold.log"),
        board("panic.log"),
        ours("host-dmesg.log"),
        ours("beagle-initcall-debug.log"),
        ours("nfsroot-ipconfig.log"),
        ours("serial-no-printk-time.log"),
    ];
    let r = report(&paths);
    assert_eq!(r.runs.len(), paths.len());
    let text = r.to_text();
    for p in &paths {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        assert!(
            text.contains(&format!("== {name}")),
            "{name} missing from\n{text}"
        );
    }
    let json: serde_json::Value =
        serde_json::from_str(&r.to_json().expect("json")).expect("valid JSON");
    assert_eq!(json["runs"].as_array().map(Vec::len), Some(paths.len()));
    assert_eq!(
        json["runs"][4]["analysis"]["initcalls"][0]["name"],
        "init_mmap_min_addr"
    );
    let html = r.to_html();
    assert_eq!(html.matches("<g class=\"run\"").count(), paths.len());
    assert_eq!(r.to_svg().matches("<g class=\"run\"").count(), paths.len());
}

#[test]
fn this_hosts_kernel_config_cannot_hibernate() {
    let cfg = load_config(Some(&ours("host-config.gz"))).expect("gzip config");
    let r = match analyze_files(&[board("shell-cold.log")], Some(&ours("host-config.gz"))) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    let hib = r
        .kernel_checks
        .iter()
        .find(|c| c.option == "CONFIG_HIBERNATION");
    assert!(hib.is_some_and(|c| c.verdict == Verdict::Blocker && c.value == "is not set"));
    assert!(cfg.is_builtin("PRINTK_TIME"));
    assert!(
        rules(&r, 0).contains(&"kernel_compression"),
        "CONFIG_KERNEL_GZIP=y"
    );
    assert!(r
        .to_text()
        .contains("BLOCKER CONFIG_HIBERNATION (is not set)"));
    // The running kernel's own config, where it is exposed.
    if std::path::Path::new("/proc/config.gz").exists() {
        assert!(load_config(None).is_ok_and(|c| !c.options.is_empty()));
    }
}

/// The three ways the board brings `app` up, side by side: only the restores have a resume
/// phase, only the cold boot pays the app's start-up (a restore's app phase is its first
/// answer after `@restored`), and the snapshot-boot advice fires only where the
/// application's start-up is still paid.
#[test]
fn board_cold_kernel_resume_and_snapboot_side_by_side() {
    let r = report(&[
        board("app-cold.log"),
        board("app-kernel-resume.log"),
        board("app-snapboot.log"),
    ]);
    let [cold, native, snap] = [0, 1, 2].map(|i| &r.runs[i].analysis);
    assert!(cold.phase(PhaseKind::App).is_some() && cold.phase(PhaseKind::Resume).is_none());
    for a in [native, snap] {
        let resume = a.phase(PhaseKind::Resume).expect("resume phase");
        assert!(resume.end - resume.start > 0.5, "{}: {resume:?}", a.source);
        let app = a.phase(PhaseKind::App).expect("the restored app answering");
        assert!(app.duration() < 0.5, "{}: {app:?}", a.source);
        assert!(a.tti.unwrap() < cold.tti.unwrap() / 2.0);
    }
    assert!(rules(&r, 0).contains(&"snapshot_gain"));
    assert!(!rules(&r, 1).contains(&"snapshot_gain"));
    assert!(!rules(&r, 2).contains(&"snapshot_gain"));
    let html = r.to_html();
    assert_eq!(html.matches("class=\"run\"").count(), 3);
}
