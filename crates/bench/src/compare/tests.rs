use super::*;
use crate::measure::{check_boot, BootError};
use crate::plan::RestoreKernelUse;
use board::testutil::{bundle, opts};
use boottrace::{MilestoneKind, Outcome};

fn boot(tti: f64, restored: Option<f64>) -> Timeline {
    let mut tl = Timeline::new("test");
    if let Some(t) = restored {
        tl.push_event(MilestoneKind::Restored, t, None);
    }
    tl.push_event(MilestoneKind::ProbeAnswered, tti, None);
    tl.tti = Some(tti);
    tl.outcome = Outcome::Answered;
    tl.finalize();
    tl
}

#[test]
fn a_fallback_never_counts_and_names_its_reason() {
    let mut tl = boot(5.0, None);
    tl.push_event(
        MilestoneKind::ResumeFallback,
        1.0,
        Some("command line differs".into()),
    );
    for want_restore in [false, true] {
        let err = check_boot(&tl, want_restore).unwrap_err();
        assert_eq!(
            err.to_string(),
            "expected a restore, got a cold boot: command line differs"
        );
    }
}

/// The restorer's refusal, then the stock kernel's cold boot answering the probe: not a
/// restore, with the restorer's reason.
#[test]
fn a_refusal_of_the_restorer_never_counts_and_names_its_reason() {
    let mut tl = Timeline::new("restorer");
    tl.push_lines([
        boottrace::ConsoleLine::new(0.2, "snapboot-restorer: started"),
        boottrace::ConsoleLine::new(
            0.25,
            "snapboot-restorer: refused: pack checksum 0x1, header says 0x2",
        ),
        boottrace::ConsoleLine::new(0.3, "snapboot-restorer: cold boot: the stock kernel"),
        boottrace::ConsoleLine::new(4.0, "snapboot: @ready"),
    ]);
    tl.finalize();
    let err = check_boot(&tl, true).unwrap_err();
    assert_eq!(
        err.to_string(),
        "expected a restore, got a cold boot: the restorer refused: pack checksum 0x1, header \
         says 0x2"
    );
}

#[test]
fn a_restore_method_needs_the_restored_marker() {
    assert!(check_boot(&boot(30.0, None), false).is_ok());
    assert!(check_boot(&boot(6.0, Some(5.5)), true).is_ok());
    let err = check_boot(&boot(30.0, None), true).unwrap_err();
    assert!(matches!(err, BootError::NotRestored), "{err}");
}

#[test]
fn a_failed_boot_names_the_method_and_step_then_the_reason() {
    let err = BenchError::Boot {
        what: "snapboot-lazy resume".into(),
        source: BootError::NotRestored,
    };
    let chain = format!("{:#}", boottrace::error_chain(&err));
    assert_eq!(
        chain,
        "snapboot-lazy resume: the board came up without restoring an image"
    );
}

#[test]
fn zero_runs_are_refused_before_anything_boots() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let mut ticks = 0;
    let plan = ComparePlan::new(&bundle().workload, RestoreKernelUse::Declined);
    let err = compare(&bundle(), &opts(), &work, 0, &plan, None, &mut || {
        ticks += 1
    })
    .unwrap_err();
    assert_eq!(err.to_string(), "--runs must be at least 1");
    let err = cold(&bundle(), &opts(), 0, &mut || ticks += 1).unwrap_err();
    assert!(matches!(err, BenchError::NoRuns), "{err}");
    assert_eq!(ticks, 0);
    assert!(!work.exists());
}

#[test]
fn compare_ticks_once_per_boot_and_capture() {
    let shell = bundle().workload;
    let plan = |rk| ComparePlan::new(&shell, rk);
    assert_eq!(plan(RestoreKernelUse::Declined).steps(1), 9);
    assert_eq!(plan(RestoreKernelUse::Declined).steps(3), 19);
    let rk = RestoreKernelUse::Measured("/rk/vmlinux".into());
    assert_eq!(plan(rk).steps(3), 28);
}

#[test]
fn a_method_summary_carries_its_image_sizes() {
    let runs = MethodRuns {
        method: "snapboot",
        timelines: vec![boot(6.0, Some(5.0)), boot(7.0, Some(6.0))],
        image_bytes: Some(100 << 20),
        stored_bytes: Some(40 << 20),
    };
    let m = runs.summary();
    assert_eq!(m.method, "snapboot");
    assert_eq!(m.samples, [6.0, 7.0]);
    assert_eq!(
        (m.image_bytes, m.stored_bytes),
        (Some(100 << 20), Some(40 << 20))
    );
    assert_eq!(m.milestones["restored"].n, 2);
}

#[test]
fn the_report_names_the_board_and_its_json_is_the_contract() {
    let cold = MethodRuns {
        method: "cold",
        timelines: vec![boot(30.0, None)],
        image_bytes: None,
        stored_bytes: None,
    };
    let r = report_at(
        "cold",
        &bundle(),
        &opts(),
        1,
        vec![cold.summary()],
        1_795_400_000,
    );
    assert_eq!(
        (r.workload.as_str(), r.kernel.as_str(), r.accel.as_str()),
        ("shell", "6.1.0-56-amd64", "tcg")
    );
    assert_eq!((r.mem_mib, r.runs), (512, 1));

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report.json");
    write_json(&r, &path).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(v["bench"], "cold");
    assert_eq!(v["finished_unix"], 1_795_400_000u64);
    assert_eq!(v["methods"][0]["method"], "cold");
    assert_eq!(v["methods"][0]["tti"]["median"], 30.0);

    let missing = dir.path().join("no/such/dir/report.json");
    let err = write_json(&r, &missing).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("writing {}", missing.display()),
        "the message names the file, the source says why"
    );
}

/// A load phase as the device prints it: 40 MB read, 120 MB placed in `wall` seconds.
fn load(wall: f64) -> boottrace::report::Throughput {
    boottrace::report::Throughput {
        read_bytes: 40_000_000,
        requests: 20,
        large_bytes: 38_000_000,
        decoded_bytes: 100_000_000,
        placed_bytes: 120_000_000,
        read_s: 0.5,
        check_s: 0.4,
        decode_s: 1.0,
        place_s: 0.2,
        wall_s: wall,
        workers: 2,
    }
}

/// A restore's console excerpt, stamped as the board records it, with the throughput line
/// after `resume-loaded` (the restore kernel's, behind a printk prefix).
fn restore_console(tti: f64, wall: f64) -> Timeline {
    let throughput = boottrace::Marker::Throughput.line(Some(&load(wall).line()));
    let mut tl = Timeline::new("restore-kernel");
    tl.push_lines([
        boottrace::ConsoleLine::new(0.96, "snapboot: @resume-start /dev/vdb"),
        boottrace::ConsoleLine::new(1.60, "snapboot: @resume-loaded 23014 pages (89.9 MiB)"),
        boottrace::ConsoleLine::new(1.60, format!("[    1.180000] {throughput}")),
        boottrace::ConsoleLine::new(1.87, "snapboot: @restored"),
    ]);
    tl.push_event(MilestoneKind::ProbeAnswered, tti, None);
    tl.tti = Some(tti);
    tl.finalize();
    tl
}

/// A medium-baseline boot: the restore kernel reads the image's extent, prints the marker
/// and powers off.
fn medium_console(read_s: f64) -> Timeline {
    let read = boottrace::report::Throughput {
        read_bytes: 40_000_000,
        requests: 39,
        large_bytes: 40_000_000,
        read_s,
        wall_s: read_s,
        workers: 1,
        ..Default::default()
    };
    let mut tl = Timeline::new("medium");
    tl.push_lines([
        boottrace::ConsoleLine::new(0.88, "snapboot: @init"),
        boottrace::ConsoleLine::new(
            1.20,
            boottrace::Marker::MediumBaseline.line(Some(&read.line())),
        ),
        boottrace::ConsoleLine::new(1.25, "snapboot: @poweroff"),
    ]);
    tl.finalize();
    tl
}

#[test]
fn each_run_s_throughput_line_becomes_the_method_s_load_phase() {
    let runs = MethodRuns {
        method: "restore-kernel",
        timelines: vec![
            restore_console(2.0, 1.0),
            restore_console(2.1, 0.5),
            restore_console(1.9, 2.0),
        ],
        image_bytes: Some(120_000_000),
        stored_bytes: Some(40_000_000),
    };
    let t = runs.summary().throughput.expect("every run printed one");
    assert_eq!(t.n, 3);
    assert_eq!(
        (t.load_mbps.median, t.load_mbps.min, t.load_mbps.max),
        (120.0, 60.0, 240.0)
    );
    assert_eq!((t.stored_load_mbps, t.medium_mbps), (40.0, 80.0));
    assert_eq!((t.decode_mbps_per_cpu, t.large_share), (100.0, 0.95));
    assert_eq!((t.workers, t.read_mb, t.bound.as_str()), (2, 40.0, "cpu"));
    // A cold boot has no load phase.
    let cold = MethodRuns {
        method: "cold",
        timelines: vec![boot(30.0, None)],
        image_bytes: None,
        stored_bytes: None,
    };
    assert!(cold.summary().throughput.is_none());
}

#[test]
fn a_medium_baseline_boot_counts_only_with_its_marker_and_says_why_not() {
    let t = crate::check_medium_baseline(&medium_console(0.25)).unwrap();
    assert_eq!((t.read_bytes, t.requests, t.read_s), (40_000_000, 39, 0.25));

    let mut missing = Timeline::new("medium");
    missing.push_lines([
        boottrace::ConsoleLine::new(0.88, "snapboot: @init"),
        boottrace::ConsoleLine::new(1.25, "snapboot: @poweroff"),
    ]);
    missing.finalize();
    let err = crate::check_medium_baseline(&missing).unwrap_err();
    assert_eq!(
        err.to_string(),
        "expected the medium-baseline marker (snapboot.baseline=medium): the console has none"
    );
    let mut fell_back = missing.clone();
    fell_back.push_line(boottrace::ConsoleLine::new(
        1.0,
        "snapboot: @fallback unknown boot parameter \"snapboot.baseline=medium\"",
    ));
    let err = crate::check_medium_baseline(&fell_back).unwrap_err();
    assert!(
        err.to_string().ends_with(
            "the device fell back to a cold boot: unknown boot parameter \
             \"snapboot.baseline=medium\""
        ),
        "{err}"
    );
    let restored = restore_console(2.0, 1.0);
    let err = crate::check_medium_baseline(&restored).unwrap_err();
    assert!(
        err.to_string().contains("restored the image instead"),
        "{err}"
    );
    let mut garbled = missing;
    garbled.push_line(boottrace::ConsoleLine::new(
        1.2,
        "snapboot: @medium-baseline 40 MB",
    ));
    let err = crate::check_medium_baseline(&garbled).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("its detail does not read as a throughput line: \"40 MB\""),
        "{err}"
    );
    let failed = BenchError::Boot {
        what: "medium baseline read".into(),
        source: err,
    };
    assert!(format!("{:#}", boottrace::error_chain(&failed))
        .starts_with("medium baseline read: expected the medium-baseline marker"));
}

/// The medium reads 40 MB in 0.25, 0.2 and 0.5 s (160 MB/s median); the restore kernel's
/// load phase reads its 40 MB in 1 s of wall time (40 MB/s): 25 % of the medium.
#[test]
fn the_report_sets_every_load_phase_against_the_medium_baseline() {
    let compared = Compared {
        methods: vec![
            MethodRuns {
                method: "cold",
                timelines: vec![boot(30.0, None)],
                image_bytes: None,
                stored_bytes: None,
            },
            MethodRuns {
                method: "restore-kernel",
                timelines: vec![restore_console(2.0, 1.0)],
                image_bytes: Some(120_000_000),
                stored_bytes: Some(40_000_000),
            },
        ],
        medium: vec![
            medium_console(0.25),
            medium_console(0.2),
            medium_console(0.5),
        ],
    };
    let b = compared.medium_baseline().expect("three reads");
    assert_eq!(
        (b.image.as_str(), b.mbps.median, b.mbps.n),
        ("snapboot", 160.0, 3)
    );
    let mut o = opts();
    o.smp = 4;
    let methods = compared.methods.iter().map(MethodRuns::summary).collect();
    let r = report_at("compare", &bundle(), &o, 1, methods, 1_795_400_000)
        .with_medium_baseline(Some(b));
    assert_eq!(r.smp, Some(4));
    let t = r.methods[1].throughput.as_ref().expect("load phase");
    assert_eq!(t.of_medium, Some(0.25));
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["smp"], 4);
    assert_eq!(v["medium_baseline"]["mbps"]["median"], 160.0);
    assert_eq!(v["methods"][1]["throughput"]["of_medium"], 0.25);
    assert!(v["methods"][0].get("throughput").is_none());
    let table = r.table();
    assert!(table.contains(", 4 CPUs, 1 runs each)"), "{table}");
    assert!(table.contains("medium baseline: 160.0 MB/s"), "{table}");
    let row = table
        .lines()
        .find(|l| l.trim_start().starts_with("restore-kernel "))
        .unwrap_or_default();
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        [
            "restore-kernel",
            "120.0",
            "80.0",
            "100.0",
            "95%",
            "2",
            "cpu",
            "25%"
        ],
        "{table}"
    );

    // Without a baseline boot: no baseline, and no share.
    let none = Compared {
        medium: Vec::new(),
        ..compared
    };
    assert!(none.medium_baseline().is_none());
}

#[test]
fn the_medium_baseline_boots_the_restore_kernel_on_the_full_image_s_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("snapboot.store");
    let mut rk = opts();
    rk.kernel = KernelImage::Restore("/rk/vmlinux".into());
    let err = medium_options(&rk, &store).unwrap_err();
    assert!(
        err.to_string().contains("snapboot.store"),
        "no store, no baseline: {err}"
    );
    std::fs::write(&store, b"").unwrap();
    let o = medium_options(&rk, &store).unwrap();
    assert!(matches!(o.kernel, KernelImage::Restore(_)));
    assert_eq!(o.disks[0].path, store);
    assert_eq!(
        o.params.render(),
        ["snapboot.store=/dev/vdb", "snapboot.baseline=medium"]
    );
}
