//! Seal and unseal against a real software TPM: each test starts its own `swtpm socket`
//! (TCP data and control ports, its own state directory) and stops it when done. swtpm must
//! be installed (`make` installs it with the other APT packages); without it these tests fail.

use sha2::{Digest, Sha256};
use std::io::Read;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};
use tpm2::{HandleKind, NvCounter, SealedBlob, TcpTransport, Tpm, TpmError};

const KEY: [u8; 32] = *b"snapboot device key, 32 bytes!!!";

/// Port pairs handed out by this process: a window of 40 ports chosen by the process id, below
/// the kernel's ephemeral range so outgoing connections do not take them.
fn next_ports() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 20_000 + (std::process::id() % 250) as u16 * 40;
    base + (NEXT.fetch_add(2, Ordering::Relaxed) % 40)
}

fn bindable(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
}

/// A running `swtpm socket`; stopped (SIGTERM, then SIGKILL) when dropped.
struct Swtpm {
    child: Child,
    port: u16,
    state: PathBuf,
}

impl Swtpm {
    /// Starts swtpm on `state` (created by the caller) and waits until it accepts.
    fn start(state: &Path) -> Swtpm {
        let mut last_error = String::new();
        for _ in 0..10 {
            let port = next_ports();
            if !bindable(port) || !bindable(port + 1) {
                continue;
            }
            let spawned = Command::new("swtpm")
                .arg("socket")
                .arg("--tpm2")
                .arg("--tpmstate")
                .arg(format!("dir={}", state.display()))
                .arg("--server")
                .arg(format!("type=tcp,port={port},bindaddr=127.0.0.1"))
                .arg("--ctrl")
                .arg(format!("type=tcp,port={},bindaddr=127.0.0.1", port + 1))
                .arg("--flags")
                .arg("not-need-init,startup-clear")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn();
            let child = match spawned {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                    "swtpm is not installed: these tests need a software TPM. Install it with \
                     `apt-get install -y swtpm swtpm-tools` (`make` installs the project's \
                     APT_PACKAGES, swtpm among them)"
                ),
                Err(e) => panic!("cannot run swtpm: {e}"),
            };
            let mut tpm = Swtpm {
                child,
                port,
                state: state.to_owned(),
            };
            match tpm.wait_ready() {
                Ok(()) => return tpm,
                Err(why) => last_error = why,
            }
        }
        panic!("swtpm did not start on {}: {last_error}", state.display());
    }

    /// Waits until the data port accepts while the process is alive; on exit, its stderr.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                let mut err = String::new();
                if let Some(mut s) = self.child.stderr.take() {
                    let _ = s.read_to_string(&mut err);
                }
                return Err(format!("swtpm exited with {status}: {err}"));
            }
            if TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).is_ok() {
                // The port may belong to another process if ours lost a race for it: only
                // ours being alive a moment later makes it ours.
                std::thread::sleep(Duration::from_millis(20));
                if self.child.try_wait().map_err(|e| e.to_string())?.is_none() {
                    return Ok(());
                }
                continue;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err("timed out after 10 s waiting for the data port".into())
    }

    /// A client on the data port. swtpm serves one connection at a time: drop it before
    /// making another.
    fn tpm(&self) -> Tpm<TcpTransport> {
        Tpm::new(TcpTransport::connect((Ipv4Addr::LOCALHOST, self.port)).unwrap())
    }

    /// Stops swtpm the way a shutdown does (SIGTERM: it saves its state) and waits for it.
    fn stop(mut self) -> PathBuf {
        self.terminate();
        self.state.clone()
    }

    fn terminate(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let pid = rustix::process::Pid::from_child(&self.child);
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::Term);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Swtpm {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// Asserts the TPM holds no transient object and no session.
fn assert_nothing_loaded(tpm: &mut Tpm<TcpTransport>, after: &str) {
    assert_eq!(
        tpm.handles(HandleKind::Transient).unwrap(),
        [] as [u32; 0],
        "transient objects left after {after}"
    );
    assert_eq!(
        tpm.handles(HandleKind::Session).unwrap(),
        [] as [u32; 0],
        "sessions left after {after}"
    );
}

/// The blob as it would be stored and read back from flash.
fn stored(blob: &SealedBlob) -> SealedBlob {
    SealedBlob::from_bytes(&blob.to_bytes()).unwrap()
}

#[test]
fn seal_unseal_round_trip_without_pcrs() {
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path());
    let mut tpm = sw.tpm();
    let blob = stored(&tpm.seal(&KEY, &[]).unwrap());
    assert!(blob.pcrs().is_empty());
    assert_nothing_loaded(&mut tpm, "seal");
    assert_eq!(tpm.unseal(&blob).unwrap().as_slice(), KEY);
    assert_nothing_loaded(&mut tpm, "unseal");
    // Twice: unsealing does not consume the blob.
    assert_eq!(tpm.unseal(&blob).unwrap().as_slice(), KEY);
}

#[test]
fn blob_from_another_tpm_is_refused_as_foreign() {
    let dir_a = tempfile::tempdir().unwrap();
    let dir_b = tempfile::tempdir().unwrap();
    let blob = {
        let a = Swtpm::start(dir_a.path());
        let blob = a.tpm().seal(&KEY, &[]).unwrap();
        stored(&blob)
    };
    let b = Swtpm::start(dir_b.path());
    let mut tpm = b.tpm();
    let e = tpm.unseal(&blob).unwrap_err();
    assert!(
        matches!(
            e,
            TpmError::ForeignBlob {
                command: tpm2::CommandCode::Load,
                ..
            }
        ),
        "{e}"
    );
    let text = e.to_string();
    assert!(text.contains("sealed by another TPM"), "{text}");
    assert!(text.contains("this TPM was cleared"), "{text}");
    assert!(
        text.contains("TPM_RC_INTEGRITY") || text.contains("TPM_RC_BINDING"),
        "{text}"
    );
    assert_nothing_loaded(&mut tpm, "a refused load");
}

#[test]
fn sealed_blob_survives_a_tpm_restart() {
    let dir = tempfile::tempdir().unwrap();
    let first = Swtpm::start(dir.path());
    let blob = stored(&first.tpm().seal(&KEY, &[]).unwrap());
    let state = first.stop();
    let again = Swtpm::start(&state);
    assert_eq!(again.tpm().unseal(&blob).unwrap().as_slice(), KEY);
}

#[test]
fn pcr16_policy_unseals_until_pcr16_is_extended() {
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path());
    let mut tpm = sw.tpm();
    let before = tpm.pcr_read(&[16]).unwrap()[0];
    let blob = stored(&tpm.seal(&KEY, &[16]).unwrap());
    assert_eq!(blob.pcrs(), [16]);
    assert_nothing_loaded(&mut tpm, "a PCR seal");
    assert_eq!(tpm.unseal(&blob).unwrap().as_slice(), KEY);
    assert_nothing_loaded(&mut tpm, "a PCR unseal");

    let measurement: [u8; 32] = Sha256::digest(b"another kernel").into();
    tpm.pcr_extend(16, &measurement).unwrap();
    let after = tpm.pcr_read(&[16]).unwrap()[0];
    let expect: [u8; 32] = Sha256::new()
        .chain_update(before)
        .chain_update(measurement)
        .finalize()
        .into();
    assert_eq!(after, expect, "PCR_Extend: new = SHA256(old || digest)");

    let e = tpm.unseal(&blob).unwrap_err();
    match &e {
        TpmError::PcrMismatch { pcrs, rc, .. } => {
            assert_eq!(pcrs, &[16]);
            assert!(rc.to_string().contains("TPM_RC_POLICY_FAIL"), "{rc}");
        }
        other => panic!("expected a PCR mismatch, got: {other}"),
    }
    assert!(e.to_string().contains("PCR values differ"), "{e}");
    assert_nothing_loaded(&mut tpm, "a policy failure");
}

#[test]
fn policy_over_twelve_pcrs_needs_every_one_of_them() {
    // More than the 8 values one TPM2_PCR_Read returns, in a non-trivial order.
    let pcrs = [23, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16];
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path());
    let mut tpm = sw.tpm();
    // Make PCR 16 and 23 differ from each other and from zero first.
    tpm.pcr_extend(16, &[0x16; 32]).unwrap();
    tpm.pcr_extend(23, &[0x23; 32]).unwrap();
    let values = tpm.pcr_read(&pcrs).unwrap();
    assert_ne!(values[0], values[11]);
    assert_eq!(values[0], tpm.pcr_read(&[23]).unwrap()[0]);

    let blob = stored(&tpm.seal(&KEY, &pcrs).unwrap());
    assert_eq!(blob.pcrs(), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 23]);
    assert_eq!(tpm.unseal(&blob).unwrap().as_slice(), KEY);
    tpm.pcr_extend(23, &[0; 32]).unwrap();
    assert!(matches!(
        tpm.unseal(&blob),
        Err(TpmError::PcrMismatch { .. })
    ));
    assert_nothing_loaded(&mut tpm, "a policy failure on PCR 23");
}

#[test]
fn tampered_blob_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path());
    let mut tpm = sw.tpm();
    let blob = tpm.seal(&KEY, &[]).unwrap();

    // Damage on flash: the container's CRC catches it before the TPM sees it.
    let mut bytes = blob.to_bytes();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    assert!(matches!(
        SealedBlob::from_bytes(&bytes),
        Err(tpm2::BlobError::Checksum { .. })
    ));

    // Deliberate edits behind a valid container: TPM2_Load refuses them.
    let mut private = blob.private().to_vec();
    let last = private.len() - 1;
    private[last] ^= 0x01;
    let edited = SealedBlob::from_parts(&[], blob.public().to_vec(), private).unwrap();
    let e = tpm.unseal(&stored(&edited)).unwrap_err();
    assert!(matches!(e, TpmError::ForeignBlob { .. }), "{e}");
    assert!(e.to_string().contains("the blob was altered"), "{e}");
    assert_nothing_loaded(&mut tpm, "a load of an edited private part");

    // The public part with userWithAuth cleared: its name no longer matches the private part.
    let mut public = blob.public().to_vec();
    public[2 + 4 + 3] &= !0x40;
    let edited = SealedBlob::from_parts(&[], public, blob.private().to_vec()).unwrap();
    let e = tpm.unseal(&stored(&edited)).unwrap_err();
    assert!(
        matches!(
            e,
            TpmError::ForeignBlob {
                command: tpm2::CommandCode::Load,
                ..
            }
        ),
        "{e}"
    );
    assert_nothing_loaded(&mut tpm, "a load of an edited public part");
    // The original still unseals.
    assert_eq!(tpm.unseal(&blob).unwrap().as_slice(), KEY);
}

/// Median of a few runs of seal and unseal on swtpm, with and without a PCR policy, printed
/// for the record (`--nocapture`); every run must return the secret.
#[test]
fn seal_and_unseal_timings() {
    const RUNS: usize = 9;
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path());
    let mut tpm = sw.tpm();
    let median = |mut v: Vec<Duration>| {
        v.sort();
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    for pcrs in [&[][..], &[16][..]] {
        let mut seals = Vec::new();
        let mut unseals = Vec::new();
        for _ in 0..RUNS {
            let t = Instant::now();
            let blob = tpm.seal(&KEY, pcrs).unwrap();
            seals.push(t.elapsed());
            let t = Instant::now();
            let secret = tpm.unseal(&blob).unwrap();
            unseals.push(t.elapsed());
            assert_eq!(secret.as_slice(), KEY);
        }
        let (s, s_min, s_max) = median(seals);
        let (u, u_min, u_max) = median(unseals);
        eprintln!(
            "swtpm, PCRs {pcrs:?}, {RUNS} runs: seal median {s:.2?} (min {s_min:.2?}, max \
             {s_max:.2?}); unseal median {u:.2?} (min {u_min:.2?}, max {u_max:.2?})"
        );
        // A boot waits on unseal: seconds would mean RSA keys or a retry loop crept in.
        assert!(u < Duration::from_secs(2), "unseal median {u:?}");
    }
    assert_nothing_loaded(&mut tpm, "the timing runs");
}

#[test]
fn a_counter_starts_undefined_only_goes_up_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let first = Swtpm::start(dir.path());
    let a = NvCounter::new(0x0181_0001).unwrap();
    let b = NvCounter::new(0x0181_0002).unwrap();
    let (after_two, b_value) = {
        let mut tpm = first.tpm();
        assert_eq!(
            tpm.counter_read(a).unwrap(),
            None,
            "a new TPM has no counter"
        );
        let one = tpm.counter_increment(a).unwrap();
        assert_eq!(tpm.counter_read(a).unwrap(), Some(one));
        let two = tpm.counter_increment(a).unwrap();
        assert_eq!(two, one + 1);
        // Another index is another counter.
        assert_eq!(tpm.counter_read(b).unwrap(), None);
        let b_value = tpm.counter_increment(b).unwrap();
        assert_eq!(tpm.counter_read(a).unwrap(), Some(two));
        assert_nothing_loaded(&mut tpm, "counters");
        (two, b_value)
    };
    let again = Swtpm::start(&first.stop());
    let mut tpm = again.tpm();
    assert_eq!(tpm.counter_read(a).unwrap(), Some(after_two));
    assert_eq!(tpm.counter_read(b).unwrap(), Some(b_value));
    assert_eq!(tpm.counter_increment(a).unwrap(), after_two + 1);
}

#[test]
fn another_tpm_has_none_of_this_ones_counters() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let c = NvCounter::new(0x0181_0003).unwrap();
    Swtpm::start(dir_a.path())
        .tpm()
        .counter_increment(c)
        .unwrap();
    assert_eq!(
        Swtpm::start(dir_b.path()).tpm().counter_read(c).unwrap(),
        None
    );
}
