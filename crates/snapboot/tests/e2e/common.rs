//! Shared set-up of the end-to-end tests: the real board, booted through the real CLI.
//!
//! Bundles are built once per test binary into a shared home directory
//! (`$SNAPBOOT_HOME`, default `<workspace>/.snapboot`) and reused by every test.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

/// The snapboot binary under test (static, so it also goes into the initramfs).
pub fn snapboot() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_snapboot"));
    c.env("SNAPBOOT_HOME", home());
    c
}

/// The home directory holding the fetched kernel and the bundles.
pub fn home() -> PathBuf {
    std::env::var_os("SNAPBOOT_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.snapboot"))
}

/// Runs a command, returning its output with stdout and stderr as text.
pub fn run(mut c: Command) -> (Output, String, String) {
    let out = c.output().expect("spawn snapboot");
    let so = String::from_utf8_lossy(&out.stdout).into_owned();
    let se = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, so, se)
}

fn build_lock() -> &'static Mutex<()> {
    static L: OnceLock<Mutex<()>> = OnceLock::new();
    L.get_or_init(|| Mutex::new(()))
}

/// Builds `snapboot-device` (the binary the board puts on the device, another package) in
/// this test binary's profile, once: `cargo test` builds only the tested package's binaries,
/// and a stale device binary would test old device code.
fn device_binary_built() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        c.args(["build", "-p", "snapboot-device"]);
        if !cfg!(debug_assertions) {
            c.arg("--release");
        }
        let (out, so, se) = run(c);
        assert!(
            out.status.success(),
            "building snapboot-device:\n{so}\n{se}"
        );
    });
}

/// Makes sure the kernel is fetched and the workload's bundle is built by *this* binary
/// (so the initramfs carries the snapboot under test). Returns the bundle directory.
pub fn bundle(workload: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    let built = BUILT.get_or_init(|| Mutex::new(Vec::new()));
    let _g = build_lock().lock().unwrap_or_else(|e| e.into_inner());
    let dir = home().join("bundles").join(workload);
    if built.lock().unwrap().iter().any(|w| w == workload) {
        return dir;
    }
    device_binary_built();
    if !home().join("kernel.json").exists() {
        let mut c = snapboot();
        c.args(["board", "fetch-kernel"]);
        let (out, so, se) = run(c);
        assert!(out.status.success(), "fetch-kernel failed:\n{so}\n{se}");
    }
    let mut c = snapboot();
    c.args(["board", "build", "--workload", workload]);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "build failed:\n{so}\n{se}");
    built.lock().unwrap().push(workload.to_string());
    dir
}

/// Run options for bundle `b` with `store` as `/dev/vdb` (`snapboot.store=/dev/vdb`).
pub fn store_options(b: &board::Bundle, store: &Path) -> board::RunOptions {
    let mut o = board::RunOptions::for_bundle(b);
    o.timeout = std::time::Duration::from_secs(300);
    o.disks.push(board::run_options::Disk {
        path: store.to_path_buf(),
        readonly: false,
    });
    o.params.store = Some(bootparams::StoreAddress::path("/dev/vdb"));
    o
}

/// Powers on the bundle in `dir` with `store` as `/dev/vdb` and `extra_cmdline`, for a test
/// to follow its console.
pub fn store_session(dir: &Path, store: &Path, extra_cmdline: &[&str]) -> board::qemu::Session {
    let b = board::Bundle::load(dir).unwrap();
    let mut o = store_options(&b, store);
    o.cmdline
        .extend(extra_cmdline.iter().map(|s| s.to_string()));
    board::qemu::Session::start(&b, &o).unwrap()
}

/// `board capture BUNDLE --store STORE` with `args`; asserts success, returns stdout.
pub fn board_capture(bundle: &Path, store: &Path, args: &[&str]) -> String {
    let mut c = snapboot();
    c.args(["board", "capture"])
        .arg(bundle)
        .arg("--store")
        .arg(store)
        .args(args);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "capture {args:?} failed:\n{so}\n{se}");
    so
}
