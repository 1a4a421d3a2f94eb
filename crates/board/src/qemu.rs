//! Powering the board on: the QEMU command line (the x86_64 PC's here, the arm64 board's in
//! `crate::virt`, both from the run's `crate::run_options`), a console session with host
//! timestamps from power-on (grabserial-style), the usability probe and time-to-interactive.

use crate::run_options::{kernel_cmdline, virtio_disks, KernelImage, RunOptions};
use crate::tpm::Swtpm;
use boottrace::{LineRecorder, Marker, MilestoneKind, Outcome, Timeline};
use bundle::bundle::Bundle;
use bundle::workload::Probe;
use regex::Regex;
use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The board's kernel command line: serial console, reboot (and so QEMU exit) on panic.
///
/// Not `init_on_free=1`: measured on the `app` image it changed nothing (the kernel never
/// saves free pages, and memory freed inside an application's allocator is not returned to
/// the kernel), while zeroing every page released at boot and after a restore cost
/// 0.25-1.7 s per boot (`deferred pages initialised in 292ms` instead of 24-52 ms) and
/// ~0.4 s per restore. Add it with `--cmdline init_on_free=1` to see for yourself.
pub const BASE_CMDLINE: &str = "console=ttyS0,115200 panic=-1 printk.time=1";

/// The kernel file QEMU boots on the PC: the image the options name, but a bzImage
/// whenever the board has a TPM, the stock kernel's or the restore kernel's
/// ([`hostkernel::restore_kernel::bzimage_beside`]).
///
/// Measured with QEMU 7.2 and SeaBIOS 1.16.2: QEMU's PVH path (`-kernel vmlinux`) loads the
/// initramfs at the top of the RAM below 4 GiB less the 160 KiB (0x28000) it assumes the
/// firmware's ACPI data takes, without asking the firmware. A TPM adds its 64 KiB event log
/// (`etc/tpm/log`) to what SeaBIOS allocates there, which pushes the ACPI tables below that
/// line (512 MiB board: tables at 0x1ffd0000-0x1ffd2570, initramfs up to 0x1ffd6fff), so the
/// initramfs overwrites them: the kernel finds the RSDP but reads a zeroed RSDT ("Invalid
/// table length 0x0 in RSDT/XSDT"), and no ACPI, no TPM. Without an initramfs the same PVH
/// boot sees the TPM. The bzImage's loader (`linuxboot_dma.bin`) moves the initramfs below
/// the top of memory the firmware reports (E801), clear of the tables.
pub fn kernel_file(bundle: &Bundle, opts: &RunOptions) -> std::path::PathBuf {
    let tpm = opts.tpm.is_some();
    match &opts.kernel {
        KernelImage::Vmlinux if !tpm => bundle.vmlinux(),
        KernelImage::Vmlinux | KernelImage::BzImage => bundle.bzimage(),
        KernelImage::Restore(vmlinux) if !tpm => vmlinux.clone(),
        KernelImage::Restore(vmlinux) => hostkernel::restore_kernel::bzimage_beside(vmlinux),
        KernelImage::Restorer { elf } => elf.clone(),
    }
}

/// The QEMU program and arguments for a run. The bundle's kernel pack must exist
/// ([`Bundle::ensure_kernel_pack`]; [`Session::start`] makes sure of it).
pub fn qemu_command(bundle: &Bundle, opts: &RunOptions) -> Command {
    let mut c = crate::run_options::pc_machine(opts);
    c.arg("-kernel").arg(kernel_file(bundle, opts));
    if !matches!(opts.kernel, KernelImage::Restorer { .. }) {
        c.arg("-initrd").arg(bundle.initramfs());
    }
    let letter = (b'b' + opts.disks.len() as u8) as char;
    let cmdline = kernel_cmdline(bundle, opts, BASE_CMDLINE, &format!("/dev/vd{letter}"));
    c.args(["-append", &cmdline]);
    virtio_disks(&mut c, &bundle.rootfs(), false, opts);
    // The board's boot partition, last: the kernel pack a restore kernel hands a cold boot
    // to. It is attached on every boot, whichever kernel runs: the firmware's memory map
    // depends on the devices, and an image only restores onto the map it was captured on.
    c.arg("-drive").arg(format!(
        "file={},if=virtio,format=raw,readonly=on",
        bundle.kernel_pack().display()
    ));
    c
}

/// What lives exactly as long as one run of the board, dropped after its QEMU: the arm64
/// board's U-Boot environment, the board's TPM (`crate::tpm`).
#[derive(Debug, Default)]
pub struct RunFiles {
    _dir: Option<tempfile::TempDir>,
    _tpm: Option<Swtpm>,
}

/// The QEMU command of a run on the bundle's board, with what lives as long as the run (the
/// arm64 board's U-Boot environment; with [`RunOptions::tpm`], the TPM emulator, started
/// here and stopped when the [`RunFiles`] are dropped).
pub fn board_command(bundle: &Bundle, opts: &RunOptions) -> Result<(Command, RunFiles), RunError> {
    let arch = bundle.kernel.arch;
    if arch != guestarch::Arch::Arm64 && opts.disks.iter().any(|d| d.sd) {
        return Err(RunError::SdOnPc);
    }
    bundle.ensure_kernel_pack().map_err(RunError::KernelPack)?;
    let (mut cmd, dir) = match arch {
        guestarch::Arch::X86_64 if opts.firmware == crate::run_options::Firmware::Uefi => (
            crate::uefi::command(bundle, opts, BASE_CMDLINE)
                .map_err(|e| RunError::Uefi(Box::new(e)))?,
            None,
        ),
        guestarch::Arch::X86_64 => (qemu_command(bundle, opts), None),
        guestarch::Arch::Arm64 => {
            let (cmd, dir) = crate::virt::command(bundle, opts).map_err(RunError::Arm64Board)?;
            (cmd, Some(dir))
        }
    };
    let tpm = match &opts.tpm {
        None => None,
        Some(state) => {
            if arch == guestarch::Arch::X86_64 {
                let kernel = kernel_file(bundle, opts);
                if !kernel.is_file() {
                    return Err(RunError::Tpm(crate::tpm::TpmError::NoBzImage(kernel)));
                }
            }
            let tpm = Swtpm::start(state).map_err(RunError::Tpm)?;
            cmd.args(crate::tpm::qemu_args(arch, tpm.socket()));
            Some(tpm)
        }
    };
    Ok((
        cmd,
        RunFiles {
            _dir: dir,
            _tpm: tpm,
        },
    ))
}

/// Errors of a board run. Each ends the run with a one-line reason.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// QEMU could not be started.
    #[error("cannot start QEMU (package qemu-system-x86 or qemu-system-arm): {0}")]
    Spawn(std::io::Error),
    /// The guest kernel panicked.
    #[error("guest kernel panic: {0}")]
    Panic(String),
    /// Nothing matched in time.
    #[error("timed out after {secs:.1} s waiting for {what}; last console line: {last:?}")]
    Timeout {
        secs: f64,
        what: String,
        last: String,
    },
    /// QEMU exited before the expected output.
    #[error("qemu exited ({status}) while waiting for {what}; {detail}")]
    Exited {
        status: String,
        what: String,
        detail: String,
    },
    /// The probe's regex is invalid.
    #[error("invalid probe regex {0:?}: {1}")]
    BadRegex(String, regex::Error),
    /// Writing to the console failed.
    #[error("console write failed: {0}")]
    Console(std::io::Error),
    /// The kernel pack (the board's boot partition) could not be made.
    #[error("cannot prepare the board's kernel pack")]
    KernelPack(#[source] bundle::bundle::BundleError),
    /// The arm64 board's boot disk or boot loader environment could not be made.
    #[error("cannot prepare the arm64 board")]
    Arm64Board(#[source] crate::virt::VirtError),
    /// The UEFI PC's disk or firmware could not be prepared.
    #[error("cannot prepare the UEFI board")]
    Uefi(#[source] Box<crate::uefi::UefiError>),
    /// An SD card on the PC, whose restorer and firmware read virtio disks.
    #[error("--store-on sd: the arm64 board only (its U-Boot reads SD cards)")]
    SdOnPc,
    /// The board's TPM could not be started.
    #[error("cannot start the board's TPM")]
    Tpm(#[source] crate::tpm::TpmError),
}

enum Chunk {
    Out(Instant, Vec<u8>),
    Eof,
}

/// A running board: its console, timeline and QEMU process.
pub struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<Chunk>,
    stderr: Option<std::thread::JoinHandle<String>>,
    t0: Instant,
    recorder: LineRecorder,
    timeline: Timeline,
    /// Index of the first console line not yet consumed by `wait_for`.
    cursor: usize,
    exited: bool,
    echo: bool,
    /// What lives as long as this run (files, the TPM), dropped after QEMU is stopped.
    _run_files: RunFiles,
}

impl Session {
    /// Powers the board on.
    pub fn start(bundle: &Bundle, opts: &RunOptions) -> Result<Self, RunError> {
        let (mut cmd, run_files) = board_command(bundle, opts)?;
        cmd.args(["-serial", "stdio", "-monitor", "none"]);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let t0 = Instant::now();
        let mut child = cmd.spawn().map_err(RunError::Spawn)?;
        let mut stdout = child
            .stdout
            .take()
            .ok_or_else(|| RunError::Spawn(std::io::Error::other("no stdout pipe")))?;
        let mut stderr_pipe = child.stderr.take();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            loop {
                match stdout.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        let _ = tx.send(Chunk::Eof);
                        break;
                    }
                    Ok(n) => {
                        if tx
                            .send(Chunk::Out(Instant::now(), buf[..n].to_vec()))
                            .is_err()
                        {
                            break;
                        }
                    }
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(e) = stderr_pipe.as_mut() {
                let _ = e.read_to_string(&mut s);
            }
            s
        });
        Ok(Self {
            stdin: child.stdin.take(),
            child,
            rx,
            stderr: Some(stderr),
            t0,
            recorder: LineRecorder::new(),
            timeline: Timeline::new(&bundle.workload.name),
            cursor: 0,
            exited: false,
            echo: opts.echo,
            _run_files: run_files,
        })
    }

    /// Seconds since power-on.
    pub fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// The timeline so far.
    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    fn ingest(&mut self, t: f64, bytes: &[u8]) {
        if self.echo {
            let mut out = std::io::stdout();
            let _ = out.write_all(bytes);
            let _ = out.flush();
        }
        for line in self.recorder.feed(t, bytes) {
            self.timeline.push_line(line);
        }
    }

    /// Types `text` and a newline on the console.
    pub fn send(&mut self, text: &str) -> Result<(), RunError> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| RunError::Console(std::io::Error::other("console closed")))?;
        stdin
            .write_all(format!("{text}\n").as_bytes())
            .and_then(|_| stdin.flush())
            .map_err(RunError::Console)
    }

    /// Records an event (probe sent, ...) at the current time.
    pub fn event(&mut self, kind: MilestoneKind, detail: Option<String>) {
        let t = self.now();
        self.timeline.push_event(kind, t, detail);
    }

    /// Types the probe `send` and waits for its answer (`expect`): both are recorded, and
    /// the answer's time is the run's TTI. Returns the answer and its time.
    pub fn probe(
        &mut self,
        send: &str,
        expect: &Regex,
        timeout: Duration,
    ) -> Result<(String, f64), RunError> {
        self.event(MilestoneKind::ProbeSent, Some(send.to_string()));
        self.send(send)?;
        let (text, t) = self.wait_for(expect, "the probe's answer", timeout)?;
        self.timeline
            .push_event(MilestoneKind::ProbeAnswered, t, Some(text.clone()));
        self.timeline.tti = Some(t);
        Ok((text, t))
    }

    /// Waits until a new console line matches `re` and returns its text and time. A kernel
    /// panic, QEMU exiting or `timeout` end the wait with the reason.
    pub fn wait_for(
        &mut self,
        re: &Regex,
        what: &str,
        timeout: Duration,
    ) -> Result<(String, f64), RunError> {
        self.wait_until(&|l| re.is_match(l), what, timeout)
    }

    /// Waits for the first console line that carries one of `markers` (see
    /// [`Session::wait_for`]); returns which, the line and its time.
    pub fn wait_for_marker(
        &mut self,
        markers: &[Marker],
        what: &str,
        timeout: Duration,
    ) -> Result<(Marker, String, f64), RunError> {
        let found = |l: &str| Marker::parse(l).is_some_and(|(m, _)| markers.contains(&m));
        let (line, t) = self.wait_until(&found, what, timeout)?;
        let marker = Marker::parse(&line).map_or(markers[0], |(m, _)| m);
        Ok((marker, line, t))
    }

    /// Waits for the first console line (after those already seen) for which `matches`
    /// holds; see [`Session::wait_for`].
    fn wait_until(
        &mut self,
        matches: &dyn Fn(&str) -> bool,
        what: &str,
        timeout: Duration,
    ) -> Result<(String, f64), RunError> {
        let deadline = Instant::now() + timeout;
        loop {
            while self.cursor < self.timeline.lines.len() {
                let line = &self.timeline.lines[self.cursor];
                self.cursor += 1;
                if matches(&line.text) {
                    return Ok((line.text.clone(), line.t));
                }
                if line.text.contains("Kernel panic - not syncing") {
                    let reason = line.text.clone();
                    self.drain(Duration::from_millis(300));
                    return Err(RunError::Panic(reason));
                }
            }
            if self.exited {
                let status = self
                    .child
                    .try_wait()
                    .ok()
                    .flatten()
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "no status".into());
                let last = self.last_line();
                let qemu = self
                    .stderr
                    .take()
                    .and_then(|h| h.join().ok())
                    .unwrap_or_default();
                let detail = match qemu.lines().rev().find(|l| !l.trim().is_empty()) {
                    Some(err) => format!("qemu said: {}; last console line: {last:?}", err.trim()),
                    None => format!("last console line: {last:?}"),
                };
                return Err(RunError::Exited {
                    status,
                    what: what.into(),
                    detail,
                });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(RunError::Timeout {
                    secs: timeout.as_secs_f64(),
                    what: what.into(),
                    last: self.last_line(),
                });
            }
            self.pump(left);
        }
    }

    fn pump(&mut self, wait: Duration) {
        match self.rx.recv_timeout(wait) {
            Ok(Chunk::Out(at, bytes)) => {
                let t = at.duration_since(self.t0).as_secs_f64();
                self.ingest(t, &bytes);
            }
            Ok(Chunk::Eof) | Err(RecvTimeoutError::Disconnected) => {
                let t = self.now();
                if let Some(line) = self.recorder.finish(t) {
                    self.timeline.push_line(line);
                }
                let _ = self.child.wait();
                self.exited = true;
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
    }

    fn drain(&mut self, wait: Duration) {
        let end = Instant::now() + wait;
        while !self.exited && Instant::now() < end {
            self.pump(end.saturating_duration_since(Instant::now()));
        }
    }

    fn last_line(&self) -> String {
        self.timeline
            .lines
            .iter()
            .rev()
            .find(|l| !l.text.trim().is_empty())
            .map(|l| l.text.clone())
            .unwrap_or_default()
    }

    /// Waits for QEMU to exit by itself (e.g. guest power-off) for up to `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<(), RunError> {
        self.drain(timeout);
        if self.exited {
            Ok(())
        } else {
            Err(RunError::Timeout {
                secs: timeout.as_secs_f64(),
                what: "the board to power off".into(),
                last: self.last_line(),
            })
        }
    }

    /// Powers the board off (kills QEMU if still running) and returns the timeline. A
    /// restore whose confirmation snapboot was still proving (a status marker `unconfirmed
    /// until …`) is given up to [`CONFIRM_WAIT`] to be confirmed or refused first, as a
    /// device left running would be: a run cut short there would count as a restore that
    /// never came up, and the crash-loop guard would skip the image after a few of them.
    pub fn finish(mut self, outcome: Outcome) -> Timeline {
        if !self.exited && confirmation_pending(self.timeline.lines.iter().map(|l| l.text.as_str()))
        {
            let settled = |l: &str| {
                Marker::parse(l).is_some_and(|(m, _)| {
                    matches!(
                        m,
                        Marker::Confirmed | Marker::ConfirmFailed | Marker::Poweroff
                    )
                })
            };
            let _ = self.wait_until(&settled, "the restore's confirmation", CONFIRM_WAIT);
        }
        if !self.exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
            self.drain(Duration::from_millis(200));
        }
        let t = self.now();
        if let Some(line) = self.recorder.finish(t) {
            self.timeline.push_line(line);
        }
        self.stdin.take();
        self.exited = true;
        self.timeline.outcome = outcome;
        self.timeline.finalize();
        std::mem::replace(&mut self.timeline, Timeline::new(""))
    }
}

/// How long [`Session::finish`] waits for a pending confirmation: the Debian board's
/// health check and `systemctl` calls take a few seconds under TCG.
pub const CONFIRM_WAIT: Duration = Duration::from_secs(60);

/// Whether the console `lines` end in a restore that snapboot is still confirming: the last
/// restored status marker says `unconfirmed until …`, and no `confirmed`, `confirm-failed`
/// or `poweroff` marker follows it.
pub fn confirmation_pending<'a>(lines: impl Iterator<Item = &'a str>) -> bool {
    let mut pending = false;
    for l in lines {
        match Marker::parse(l) {
            Some((Marker::Status, Some(d))) => {
                pending = d.starts_with("restored ") && d.contains(" unconfirmed until ");
            }
            Some((Marker::Confirmed | Marker::ConfirmFailed | Marker::Poweroff, _)) => {
                pending = false;
            }
            _ => {}
        }
    }
    pending
}

impl Drop for Session {
    /// A session dropped without `finish` (an error path, a failing test) must not leave
    /// QEMU running and holding its disk images locked.
    fn drop(&mut self) {
        if !self.exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Result of a scripted run: the timeline, whether it succeeded and the reason if not.
#[derive(Debug)]
pub struct RunResult {
    /// Everything recorded.
    pub timeline: Timeline,
    /// The failure, if the run did not reach the probe's answer.
    pub error: Option<RunError>,
}

/// Boots the board, waits for the ready marker, types the probe, waits for its answer and
/// powers off. TTI is the host time from QEMU start to the answer.
pub fn run_probe(bundle: &Bundle, opts: &RunOptions, probe: &Probe) -> Result<RunResult, RunError> {
    run_probe_then(bundle, opts, probe, None)
}

/// [`run_probe`], and after the answer also waits for `then` (a console line, e.g. the
/// `memory` marker of deferred memory) before powering off; its milestone is recorded.
pub fn run_probe_then(
    bundle: &Bundle,
    opts: &RunOptions,
    probe: &Probe,
    then: Option<(Marker, &str)>,
) -> Result<RunResult, RunError> {
    let expect =
        Regex::new(&probe.expect).map_err(|e| RunError::BadRegex(probe.expect.clone(), e))?;
    // A cold boot reaches `ready`; a snapshot boot comes back at `restored`.
    let mut s = Session::start(bundle, opts)?;
    let deadline = Instant::now() + opts.timeout;
    let left = || deadline.saturating_duration_since(Instant::now());
    let res = s
        .wait_for_marker(
            &[Marker::Ready, Marker::Restored],
            "the application's ready (or restored) marker",
            left(),
        )
        .and_then(|_| s.probe(&probe.send, &expect, left()));
    let res = match (res, then) {
        (Ok(_), Some((marker, what))) => s.wait_for_marker(&[marker], what, left()).map(|_| ()),
        (Ok(_), None) => Ok(()),
        (Err(e), _) => Err(e),
    };
    Ok(match res {
        Ok(()) => RunResult {
            timeline: s.finish(Outcome::Answered),
            error: None,
        },
        Err(e) => RunResult {
            timeline: s.finish(e.outcome()),
            error: Some(e),
        },
    })
}

impl RunError {
    /// How a run that ended with this error ended, for its timeline.
    pub fn outcome(&self) -> Outcome {
        match self {
            RunError::Panic(r) => Outcome::Panic { reason: r.clone() },
            RunError::Timeout { .. } => Outcome::Timeout {
                reason: self.to_string(),
            },
            _ => Outcome::Exited {
                reason: self.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_options::Disk;
    use std::path::PathBuf;

    fn args(c: &Command) -> Vec<String> {
        c.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn a_restore_snapboot_is_still_confirming_is_waited_for_and_nothing_else() {
        let status = |d: &str| Marker::Status.line(Some(d));
        let pending =
            status("restored current generation 2 restore 1 of 2 unconfirmed until up 3 s");
        let cases: [(&[String], bool); 6] = [
            (&[], false),
            (std::slice::from_ref(&pending), true),
            (
                &[
                    pending.clone(),
                    Marker::Confirmed.line(Some("current generation 2: up 3 s")),
                ],
                false,
            ),
            (
                &[pending.clone(), Marker::ConfirmFailed.line(Some("why"))],
                false,
            ),
            (
                &[
                    pending.clone(),
                    Marker::Poweroff.line(Some("application exited with 70")),
                ],
                false,
            ),
            // The application confirms, or the restore was confirmed at once: nothing to wait for.
            (
                &[
                    pending.clone(),
                    status("restored current generation 2 restore 1 of 2 unconfirmed"),
                    status("restored current generation 2 restore 1 of 2 confirmed"),
                ],
                false,
            ),
        ];
        for (lines, want) in cases {
            assert_eq!(
                confirmation_pending(lines.iter().map(String::as_str)),
                want,
                "{lines:?}"
            );
        }
    }

    /// The PC has no SD card: a run that asks for one is refused by name, before anything
    /// is made or started.
    #[test]
    fn an_sd_card_on_the_pc_is_refused_by_name() {
        let b = crate::testutil::bundle();
        assert_eq!(b.kernel.arch, guestarch::Arch::X86_64);
        let mut o = crate::testutil::opts();
        o.disks.push(Disk {
            path: PathBuf::from("/s.store"),
            readonly: false,
            sd: true,
        });
        let Err(e) = board_command(&b, &o) else {
            panic!("an SD card on the PC was not refused");
        };
        assert!(matches!(e, RunError::SdOnPc), "{e}");
        assert!(e.to_string().contains("arm64 board only"), "{e}");
    }

    /// The kernel pack is the last disk on every boot (the memory map depends on the
    /// devices), and only a restore kernel is told where it is.
    #[test]
    fn the_kernel_pack_is_always_the_last_disk_and_named_only_to_a_restore_kernel() {
        let b = crate::testutil::bundle();
        let mut o = crate::testutil::opts();
        o.disks.push(Disk {
            path: PathBuf::from("/s.store"),
            readonly: false,
            sd: false,
        });
        for kernel in [
            KernelImage::Vmlinux,
            KernelImage::Restore(PathBuf::from("/rk/vmlinux")),
        ] {
            o.kernel = kernel.clone();
            let a = args(&qemu_command(&b, &o));
            let drives: Vec<_> = a
                .iter()
                .filter(|x| x.starts_with("file="))
                .cloned()
                .collect();
            assert_eq!(drives.len(), 3, "{drives:?}");
            assert!(drives[1].starts_with("file=/s.store,"), "{drives:?}");
            assert!(
                drives[2].starts_with("file=/nonexistent/bundle/coldkernel.pack,")
                    && drives[2].ends_with("readonly=on"),
                "{drives:?}"
            );
            let append = &a[a.iter().position(|x| x == "-append").unwrap() + 1];
            let restore = matches!(kernel, KernelImage::Restore(_));
            assert_eq!(
                append.contains("snapboot.coldkernel=/dev/vdc"),
                restore,
                "{append}"
            );
            assert_eq!(append.contains("rdinit=/bin/snapboot"), restore, "{append}");
        }
    }

    /// With a TPM the PC boots bzImages (QEMU's PVH loader would put the initramfs over the
    /// ACPI tables), whichever kernel; without one, the image the options name.
    #[test]
    fn a_board_with_a_tpm_boots_bzimages() {
        let b = crate::testutil::bundle();
        let mut o = crate::testutil::opts();
        let rk = PathBuf::from("/rk/restore-1/vmlinux");
        let cases = [
            (KernelImage::Vmlinux, b.vmlinux(), b.bzimage()),
            (KernelImage::BzImage, b.bzimage(), b.bzimage()),
            (
                KernelImage::Restore(rk.clone()),
                rk.clone(),
                PathBuf::from("/rk/restore-1/bzImage"),
            ),
        ];
        for (kernel, without, with) in cases {
            o.kernel = kernel.clone();
            o.tpm = None;
            assert_eq!(kernel_file(&b, &o), without, "{kernel:?}");
            o.tpm = Some(PathBuf::from("/tpm/a"));
            assert_eq!(kernel_file(&b, &o), with, "{kernel:?} with a TPM");
            let a = args(&qemu_command(&b, &o));
            let k = &a[a.iter().position(|x| x == "-kernel").unwrap() + 1];
            assert_eq!(PathBuf::from(k), with);
        }
    }

    /// The restorer boots in place of the kernel with no initramfs, the board's disks and a
    /// restore kernel's command line (the kernel pack named for its fallback).
    #[test]
    fn the_restorer_boots_with_the_disks_and_no_initramfs() {
        let b = crate::testutil::bundle();
        let mut o = crate::testutil::opts();
        o.kernel = KernelImage::Restorer {
            elf: PathBuf::from("/r/restorer"),
        };
        let a = args(&qemu_command(&b, &o));
        let after = |flag: &str| a[a.iter().position(|x| x == flag).unwrap() + 1].clone();
        assert_eq!(after("-kernel"), "/r/restorer");
        assert!(!a.iter().any(|x| x == "-initrd"), "{a:?}");
        assert!(a.iter().any(|x| x.contains("coldkernel.pack")), "{a:?}");
        assert!(
            after("-append").contains("snapboot.coldkernel=/dev/vd"),
            "{a:?}"
        );
    }
}
