//! `snapboot analyze` and `snapboot check-kernel` through the CLI, on real board logs and
//! the board's real kernel config.

use crate::common::{run, snapboot};

fn data(name: &str) -> String {
    format!(
        "{}/../boottrace/tests/data/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn analyze_reports_the_snapshot_gain_of_the_app_boot() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("r.html");
    let mut c = snapboot();
    c.arg("analyze")
        .arg(data("app-cold.log"))
        .arg(data("shell-cold.log"));
    c.arg("--json").arg("--html").arg(&html);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "{se}");
    let v: serde_json::Value = serde_json::from_str(&so).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    let rules: Vec<&str> = runs[0]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap())
        .collect();
    assert!(rules.contains(&"snapshot_gain"), "{rules:?}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("id=\"bootgraph\"") && page.matches("class=\"run\"").count() == 2);
}

#[test]
fn check_kernel_accepts_the_board_kernel_and_names_blockers() {
    crate::common::bundle("shell");
    let kernel: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(crate::common::home().join("kernel.json")).unwrap(),
    )
    .unwrap();
    let config = kernel["config"]
        .as_str()
        .expect("the Debian package ships its config");
    let mut c = snapboot();
    c.args(["check-kernel", config]);
    let (out, so, _) = run(c);
    assert!(out.status.success(), "{so}");
    assert!(so.contains("CONFIG_HIBERNATION_SNAPSHOT_DEV"), "{so}");
    assert!(so.contains("snapshot boot can work"), "{so}");

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config");
    std::fs::write(&cfg, "CONFIG_PM_SLEEP=y\n# CONFIG_HIBERNATION is not set\n").unwrap();
    let mut c = snapboot();
    c.arg("check-kernel").arg(&cfg);
    let (out, so, _) = run(c);
    assert_eq!(
        out.status.code(),
        Some(snapboot_device::Exit::Blocked.code().into()),
        "{so}"
    );
    assert!(
        so.contains("BLOCKER") && so.contains("CONFIG_HIBERNATION"),
        "{so}"
    );
}
