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
