//! `snapboot status` as a user runs it: the built binary, its output and exit status, on
//! this machine (where no boot ran `snapboot resume`) and on a store file with a history.

use bootparams::{BootParams, StoreAddress};
use ondevice::status::{ImageRef, Outcome};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn snapboot(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_snapboot-device"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn a_boot_resume_did_not_run_on_is_cold_and_exits_4() {
    if std::path::Path::new(ondevice::status::STATUS_FILE).exists() {
        eprintln!("skipped: this machine has a boot status");
        return;
    }
    let o = snapboot(&["status"]);
    assert_eq!(o.status.code(), Some(4), "{o:?}");
    let text = stdout(&o);
    assert!(text.starts_with("outcome: cold\n"), "{text}");
    assert!(
        text.contains("reason: snapboot resume did not run on this boot (no /run/snapboot/status)"),
        "{text}"
    );
    // A reader that is gone (`snapboot status | head -n 1` after its line) changes
    // neither the exit status nor stderr.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = Command::new(env!("CARGO_BIN_EXE_snapboot-device"))
        .arg("status")
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stderr), "");
    let o = snapboot(&["status", "--json"]);
    assert_eq!(o.status.code(), Some(4), "{o:?}");
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["outcome"], "cold");
}

#[test]
fn the_history_shows_the_last_boots_newest_first_from_the_store_named() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("s.store");
    let p = path.to_str().unwrap();
    let o = snapboot(&["store", "init", p, "--size", "16M", "--cluster-kib", "64"]);
    assert!(o.status.success(), "{o:?}");
    let o = snapboot(&["status", "--history", "--store", p]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(stdout(&o), "no boot in the store's history yet\n");
    let store = StoreAddress::path(p);
    let params = BootParams::default();
    for i in 0..12u64 {
        let mut s = ondevice::status::new(Outcome::Restored, &params);
        s.image = Some(ImageRef {
            name: "current".into(),
            generation: i,
        });
        s.written_unix = 1_795_857_243 + i;
        ondevice::store::update_boot_log(&store, Duration::ZERO, |log| {
            ondevice::status::remember(log, &s)
        })
        .unwrap();
    }
    let mut f = ondevice::status::new(Outcome::Cold, &params);
    f.reason = Some(ondevice::boot::NORESUME_REASON.into());
    f.written_unix = 1_795_857_300;
    ondevice::store::update_boot_log(&store, Duration::ZERO, |log| {
        ondevice::status::remember(log, &f)
    })
    .unwrap();
    let o = snapboot(&["status", "--history", "--store", p]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 10, "{text}");
    assert_eq!(
        lines[0],
        "2026-11-28 09:15:00 UTC  cold      noresume on the kernel command line: nothing is \
         restored this boot"
    );
    assert_eq!(
        lines[1],
        "2026-11-28 09:14:14 UTC  restored  current generation 11"
    );
    assert_eq!(
        lines[9],
        "2026-11-28 09:14:06 UTC  restored  current generation 3"
    );
    let o = snapboot(&["status", "--history", "3", "--store", p, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let boots = json.as_array().unwrap();
    assert_eq!(boots.len(), 3);
    assert_eq!(boots[0]["outcome"], "cold");
    assert_eq!(boots[1]["image"]["generation"], 11);
    // A store that is not there fails with exit 1 and says which.
    let o = snapboot(&["status", "--history", "--store", "/nonexistent/store"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("/nonexistent/store"),
        "{o:?}"
    );
}
