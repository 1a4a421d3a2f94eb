//! Shared set-up of the end-to-end tests: the real board, booted through the real CLI.
//!
//! Bundles are built once per test binary into a shared home directory
//! (`$SNAPBOOT_HOME`, default `<workspace>/.snapboot`) and reused by every test.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, OnceLock};

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

/// Values made once per key for the whole test binary (bundles, captured stores): a test
/// asking for a key another test is making waits for that one result, while other keys are
/// made at the same time. One lock over every key would leave a core idle whenever two
/// tests need different things (a Debian root built by mmdebstrap held up the `shell`
/// bundle; an `app` capture held up `shell`'s). A maker that panics leaves its key unmade,
/// and the next test to ask makes it again.
pub struct OnceByKey<T> {
    cells: OnceLock<Mutex<HashMap<String, Arc<OnceLock<T>>>>>,
}

impl<T: Clone> OnceByKey<T> {
    pub const fn new() -> Self {
        Self {
            cells: OnceLock::new(),
        }
    }

    /// The value of `key`, made by `make` if no test has made it yet.
    pub fn get(&self, key: &str, make: impl FnOnce() -> T) -> T {
        let cell = {
            let mut cells = self
                .cells
                .get_or_init(Default::default)
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            cells.entry(key.to_string()).or_default().clone()
        };
        cell.get_or_init(make).clone()
    }
}

/// The kernel of `arch` ("x86_64" or "arm64") fetched by `board fetch-kernel`, once per test
/// binary and only if `record` (its kernel.json) is missing: two bundle builds must not
/// unpack it at the same time.
pub fn kernel_fetched(arch: &str, record: &str) {
    static FETCHED: OnceByKey<()> = OnceByKey::new();
    FETCHED.get(arch, || {
        if home().join(record).exists() {
            return;
        }
        let mut c = snapboot();
        c.args(["board", "fetch-kernel", "--arch", arch]);
        let (out, so, se) = run(c);
        assert!(
            out.status.success(),
            "fetch-kernel --arch {arch} failed:\n{so}\n{se}"
        );
    })
}

/// Builds `snapboot-device` (the binary the board puts on the device, another package) in
/// this test binary's profile, once: `cargo test` builds only the tested package's binaries,
/// and a stale device binary would test old device code. It is built as part of every
/// target of the workspace, as `cargo test --workspace` builds them (and `make test` before
/// it): the dev-dependencies' test features are on in both, so under `make test` this finds
/// everything built, where `-p snapboot-device` alone would compile its crates once more
/// without those features.
pub fn device_binary_built() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        c.args([
            "build",
            "--workspace",
            "--all-targets",
            "--profile",
            &profile(),
        ]);
        let (out, so, se) = run(c);
        assert!(
            out.status.success(),
            "building snapboot-device:\n{so}\n{se}"
        );
    });
}

/// The cargo profile this test binary was built in (`release`, or `ci` under `make test`):
/// the name of the directory above its `deps/`, `target/TRIPLE/PROFILE/deps/e2e-HASH`; a
/// debug build's directory is `debug` and its profile `dev`.
fn profile() -> String {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .expect("the test binary lies in target/TRIPLE/PROFILE/deps");
    if dir == "debug" {
        "dev".into()
    } else {
        dir
    }
}

/// The `app` program's scale in the tests' `app` bundles (`board build --env APP_SCALE=…`):
/// a tenth of the demo's. Every `app` capture boots the program cold, and at full scale its
/// start was most of that boot (40 s of a quiet x86 cold boot, a minute and more on the
/// arm64 board). At a tenth the x86 start is 10.0 s against 13.8 s at a quarter (most of it
/// now the interpreter's imports, 4.8 s, which do not scale), its state 47 MiB resident, the
/// image 144 MiB of pages: still tens of batches of chunks (2026-11-30).
pub const APP_SCALE: &str = "0.1";

/// `n` (pages or bytes) of the `app` program's state at full scale, at [`APP_SCALE`]: what
/// the tests expect a lazy image to page out, or to save, grows with the state.
pub fn at_test_scale(n: u64) -> u64 {
    let scale: f64 = APP_SCALE.parse().expect("APP_SCALE is a number");
    (n as f64 * scale) as u64
}

/// The `board build` words that give the tests' bundle of `workload` its settings: the
/// `app` program at [`APP_SCALE`].
pub fn test_settings(workload: &str) -> Vec<String> {
    match workload {
        "app" => vec!["--env".into(), format!("APP_SCALE={APP_SCALE}")],
        _ => vec![],
    }
}

/// Where the tests' bundle of `workload` goes instead of `dir`, its usual directory: the
/// `app` bundle (at [`APP_SCALE`]) in `app-e2e` beside it, so the demo's and the
/// benchmarks' full-scale `app` bundle in a shared home is neither replaced nor used by the
/// tests.
pub fn test_bundle_dir(workload: &str, dir: PathBuf) -> PathBuf {
    match workload {
        "app" => dir.with_file_name("app-e2e"),
        _ => dir,
    }
}

/// Makes sure the kernel is fetched and the workload's bundle is built by *this* binary
/// (so the initramfs carries the snapboot under test). Returns the bundle directory.
pub fn bundle(workload: &str) -> PathBuf {
    static BUILT: OnceByKey<PathBuf> = OnceByKey::new();
    BUILT.get(workload, || {
        device_binary_built();
        kernel_fetched("x86_64", "kernel.json");
        let dir = test_bundle_dir(workload, home().join("bundles").join(workload));
        let mut c = snapboot();
        c.args(["board", "build", "--workload", workload])
            .args(test_settings(workload))
            .arg("--out")
            .arg(&dir);
        let (out, so, se) = run(c);
        assert!(out.status.success(), "build {workload} failed:\n{so}\n{se}");
        dir
    })
}

/// Run options for bundle `b` with `store` as `/dev/vdb` (`snapboot.store=/dev/vdb`).
pub fn store_options(b: &bundle::Bundle, store: &Path) -> board::RunOptions {
    let mut o = board::RunOptions::for_bundle(b);
    o.timeout = std::time::Duration::from_secs(300);
    o.disks.push(board::run_options::Disk {
        path: store.to_path_buf(),
        readonly: false,
        sd: false,
    });
    o.params.store = Some(bootparams::StoreAddress::path("/dev/vdb"));
    o
}

/// Powers on the bundle in `dir` with `store` as `/dev/vdb` and `extra_cmdline`, for a test
/// to follow its console.
pub fn store_session(dir: &Path, store: &Path, extra_cmdline: &[&str]) -> board::qemu::Session {
    let b = bundle::Bundle::load(dir).unwrap();
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
