//! The config file `/etc/snapboot/snapboot.conf` on the real board (`board build --config`):
//! its store serves a capture and a restore whose command lines name none, and a file that
//! does not parse restores nothing and boots cold, naming its line.

use crate::common::{bundle, home, run, snapboot};
use regex::Regex;
use std::path::PathBuf;
use std::time::Duration;

/// Builds the `shell` workload into bundles/`name` with a config file holding `text`.
fn configured_bundle(name: &str, text: &str) -> bundle::Bundle {
    bundle("shell"); // the kernel fetched and the device binary built by this test binary
    let conf = home().join(format!("{name}.conf"));
    std::fs::write(&conf, text).unwrap();
    let out = home().join("bundles").join(name);
    let mut c = snapboot();
    c.args(["board", "build", "--workload", "shell", "--config"])
        .arg(&conf)
        .arg("--out")
        .arg(&out);
    let (o, so, se) = run(c);
    assert!(o.status.success(), "build {name}:\n{so}\n{se}");
    bundle::Bundle::load(&out).unwrap()
}

/// `store = /dev/vdb` in the file and no `snapboot.store=` on either command line: the
/// capture writes its image to the file's store and the next power-on restores it.
#[test]
fn the_config_files_store_captures_and_restores_without_a_kernel_word() {
    let b = configured_bundle("shell-conf", "# the board's store\nstore = /dev/vdb\n");
    let store: PathBuf = home().join("test-config.store");
    let _ = std::fs::remove_file(&store);
    let mut o = board::RunOptions::for_bundle(&b);
    o.timeout = Duration::from_secs(300);
    board::capture::attach_store(&mut o, &store, true).unwrap();
    o.params.store = None;
    board::capture::capture_boot_attached(&b, &o).unwrap();

    o.params.capture = false;
    let mut s = board::qemu::Session::start(&b, &o).unwrap();
    let restored = Regex::new(r"snapboot: @restored").unwrap();
    s.wait_for(&restored, "restored marker", Duration::from_secs(180))
        .unwrap();
    s.finish(boottrace::Outcome::Ready);
}

/// A misspelt key in the file: the store the command line names is not even looked at,
/// the `fallback` reason names the file, its line and the key, and the boot goes on cold.
#[test]
fn a_config_file_that_does_not_parse_restores_nothing_and_names_its_line() {
    let b = configured_bundle("shell-badconf", "store = /dev/vdb\nstroe = /dev/vdc\n");
    let mut o = board::RunOptions::for_bundle(&b);
    o.timeout = Duration::from_secs(300);
    o.params.store = Some(bootparams::StoreAddress::path("/dev/vdb"));
    let mut s = board::qemu::Session::start(&b, &o).unwrap();
    let fb = Regex::new(r"snapboot: @fallback").unwrap();
    let (line, _) = s
        .wait_for(&fb, "fallback marker", Duration::from_secs(120))
        .unwrap();
    assert!(
        line.contains(
            "/etc/snapboot/snapboot.conf:2: unknown key \"stroe\" (did you mean store?): a \
             config file that does not parse is not acted on"
        ),
        "{line}"
    );
    let ready = Regex::new(r"snapboot: @ready").unwrap();
    s.wait_for(
        &ready,
        "the cold boot reaching ready",
        Duration::from_secs(180),
    )
    .unwrap();
    s.finish(boottrace::Outcome::Ready);
}
