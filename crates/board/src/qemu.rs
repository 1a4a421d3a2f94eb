//! Powering the board on: the QEMU command line, a console session with host timestamps
//! from power-on (grabserial-style), the usability probe and time-to-interactive.

use crate::bundle::Bundle;
use crate::workload::Probe;
use boottrace::{LineRecorder, Marker, MilestoneKind, Outcome, Timeline};
use regex::Regex;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};
use thiserror::Error;

/// How QEMU executes guest code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    /// Software emulation: slow, but runs everywhere.
    Tcg,
    /// Hardware virtualisation.
    Kvm,
}

impl Accel {
    /// KVM only when `/dev/kvm` exists *and* the host CPU shows real vmx/svm flags: a nested,
    /// software-emulated `/dev/kvm` without them does not run stock kernels.
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        Self::decide(std::path::Path::new("/dev/kvm").exists(), &cpuinfo)
    }

    fn decide(dev_kvm: bool, cpuinfo: &str) -> Self {
        let hw = cpuinfo
            .lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"));
        if dev_kvm && hw {
            Accel::Kvm
        } else {
            Accel::Tcg
        }
    }
}

/// Which kernel image QEMU boots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelImage {
    /// The uncompressed ELF through its PVH entry (default).
    Vmlinux,
    /// The compressed bzImage as shipped (baseline).
    BzImage,
    /// A restore kernel (ELF, PVH; `crate::restore_kernel`) with the bundle's initramfs: it
    /// restores the bundle kernel's images, and cannot boot the root filesystem cold.
    Restore(PathBuf),
}

/// An extra disk.
#[derive(Debug, Clone, PartialEq)]
pub struct Disk {
    /// Backing file.
    pub path: PathBuf,
    /// Attach read-only.
    pub readonly: bool,
}

/// How to run the board.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Guest RAM in MiB: what the board boots with.
    pub mem_mib: u32,
    /// Deferred memory: the board's total RAM in MiB when it is more than `mem_mib`. The
    /// rest is a virtio-mem device that the guest plugs after ready or restored
    /// (`snapboot.defermem`).
    pub max_mem_mib: Option<u32>,
    /// Virtual CPUs.
    pub smp: u32,
    /// Accelerator.
    pub accel: Accel,
    /// Kernel image to boot.
    pub kernel: KernelImage,
    /// What snapboot on the device is asked to do (`snapboot.*` words, rendered after the
    /// board's own command line).
    pub params: bootparams::BootParams,
    /// Extra kernel command-line words, appended last.
    pub cmdline: Vec<String>,
    /// Extra virtio disks after the root disk (`/dev/vdb`, ...).
    pub disks: Vec<Disk>,
    /// Give up after this long.
    pub timeout: Duration,
    /// Copy console output to our stdout as it arrives.
    pub echo: bool,
}

impl RunOptions {
    /// Defaults for a bundle: its workload's memory, one CPU, detected accelerator.
    pub fn for_bundle(bundle: &Bundle) -> Self {
        Self {
            mem_mib: bundle.workload.mem_mib,
            max_mem_mib: None,
            smp: 1,
            accel: Accel::detect(),
            kernel: KernelImage::Vmlinux,
            params: bootparams::BootParams::default(),
            cmdline: Vec::new(),
            disks: Vec::new(),
            timeout: Duration::from_secs(300),
            echo: false,
        }
    }
}

/// Deferred memory is plugged in blocks of this many MiB (Linux memory blocks on x86_64).
pub const DEFER_BLOCK_MIB: u32 = 128;

/// MiB of deferred memory (the virtio-mem device's size), if the options defer any.
pub fn deferred_mib(opts: &RunOptions) -> Option<u32> {
    opts.max_mem_mib
        .filter(|&m| m > opts.mem_mib)
        .map(|m| m - opts.mem_mib)
}

/// Checks a `--max-mem` against the boot memory: more than it, and the difference whole
/// memory blocks (virtio-mem plugs them whole).
pub fn check_max_mem(mem_mib: u32, max_mib: u32) -> Result<(), MemSizeError> {
    let rest = max_mib.checked_sub(mem_mib).filter(|&r| r > 0);
    match rest {
        Some(r) if r.is_multiple_of(DEFER_BLOCK_MIB) => Ok(()),
        _ => Err(MemSizeError::Deferred {
            mem: mem_mib,
            max: max_mib,
        }),
    }
}

/// Smallest guest memory the board boots (Debian's kernel and initramfs need about this).
pub const MIN_MEM_MIB: u32 = 128;

/// A guest memory size that is not one.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum MemSizeError {
    /// Not a number with a unit, M or G.
    #[error("memory size {0:?}: expected a number with a unit, e.g. 512M or 1G")]
    Syntax(String),
    /// Too small to boot, or too large to count.
    #[error("memory size {0:?}: the board needs at least {MIN_MEM_MIB}M (and at most 4095G)")]
    Range(String),
    /// `--max-mem` is not the boot memory plus whole memory blocks.
    #[error(
        "--max-mem {max}M with --mem {mem}M: the deferred part must be more than 0 and a \
         multiple of {DEFER_BLOCK_MIB}M"
    )]
    Deferred { mem: u32, max: u32 },
}

/// Parses a guest memory size (`512M`, `1G`, MiB without a unit) into MiB.
pub fn parse_mem_mib(s: &str) -> Result<u32, MemSizeError> {
    let s = s.trim();
    let (num, mul) = match s.chars().last() {
        Some('G' | 'g') => (&s[..s.len() - 1], 1024),
        Some('M' | 'm') => (&s[..s.len() - 1], 1),
        _ => return Err(MemSizeError::Syntax(s.into())),
    };
    let n: u32 = num.parse().map_err(|_| MemSizeError::Syntax(s.into()))?;
    match n.checked_mul(mul) {
        Some(mib) if mib >= MIN_MEM_MIB => Ok(mib),
        _ => Err(MemSizeError::Range(s.into())),
    }
}

/// The board's kernel command line: serial console, reboot (and so QEMU exit) on panic.
///
/// Not `init_on_free=1`: measured on the `app` image it changed nothing (the kernel never
/// saves free pages, and memory freed inside an application's allocator is not returned to
/// the kernel), while zeroing every page released at boot and after a restore cost
/// 0.25-1.7 s per boot (`deferred pages initialised in 292ms` instead of 24-52 ms) and
/// ~0.4 s per restore. Add it with `--cmdline init_on_free=1` to see for yourself.
pub const BASE_CMDLINE: &str = "console=ttyS0,115200 panic=-1 printk.time=1";

/// The QEMU program and arguments for a run. The bundle's kernel pack must exist
/// ([`Bundle::ensure_kernel_pack`]; [`Session::start`] makes sure of it).
pub fn qemu_command(bundle: &Bundle, opts: &RunOptions) -> Command {
    let mut c = Command::new("qemu-system-x86_64");
    let accel = match opts.accel {
        Accel::Tcg => "tcg",
        Accel::Kvm => "kvm",
    };
    c.args([
        "-M",
        "q35",
        "-accel",
        accel,
        "-nodefaults",
        "-no-user-config",
    ]);
    if opts.accel == Accel::Kvm {
        c.args(["-cpu", "host"]);
    }
    memory_args(&mut c, opts);
    c.args(["-display", "none", "-no-reboot"]);
    let kernel = match &opts.kernel {
        KernelImage::Vmlinux => bundle.vmlinux(),
        KernelImage::BzImage => bundle.bzimage(),
        KernelImage::Restore(vmlinux) => vmlinux.clone(),
    };
    c.arg("-kernel").arg(kernel);
    c.arg("-initrd").arg(bundle.initramfs());
    let letter = (b'b' + opts.disks.len() as u8) as char;
    let cmdline = kernel_cmdline(bundle, opts, &format!("/dev/vd{letter}"));
    c.args(["-append", &cmdline]);
    c.arg("-drive").arg(format!(
        "file={},if=virtio,format=raw,readonly=on",
        bundle.rootfs().display()
    ));
    // A hardware RNG, so a restored image can reseed the kernel's generator.
    c.args(["-device", "virtio-rng-pci"]);
    for d in &opts.disks {
        let ro = if d.readonly { ",readonly=on" } else { "" };
        c.arg("-drive").arg(format!(
            "file={},if=virtio,format=raw,cache=unsafe{ro}",
            d.path.display()
        ));
    }
    // The board's boot partition, last: the kernel pack a restore kernel hands a cold boot
    // to. It is attached on every boot, whichever kernel runs: the firmware's memory map
    // depends on the devices, and an image only restores onto the map it was captured on.
    c.arg("-drive").arg(format!(
        "file={},if=virtio,format=raw,readonly=on",
        bundle.kernel_pack().display()
    ));
    c
}

/// `-m`, `-smp` and, with deferred memory, the virtio-mem device holding the rest of the
/// RAM: the same on both boards.
pub(crate) fn memory_args(c: &mut Command, opts: &RunOptions) {
    let deferred = deferred_mib(opts);
    let mem = match deferred {
        Some(_) => format!(
            "{}M,maxmem={}M",
            opts.mem_mib,
            opts.max_mem_mib.unwrap_or(0)
        ),
        None => format!("{}M", opts.mem_mib),
    };
    c.args(["-m", &mem, "-smp", &opts.smp.to_string()]);
    if let Some(rest) = deferred {
        // The rest of the RAM: a virtio-mem device that asks for all of it from power-on.
        // The guest takes it when it loads the driver (after ready or restored); until then
        // the kernel, the image and the restore see only the boot memory.
        c.args([
            "-object",
            &format!("memory-backend-ram,id=deferred,size={rest}M"),
            "-device",
            &format!("virtio-mem-pci,id=deferred-mem,memdev=deferred,requested-size={rest}M"),
        ]);
    }
}

/// The kernel command line of a run: the board's console words, the workload's, a restore
/// kernel's, snapboot's `snapboot.*` words, then the caller's. `cold_kernel` is the device
/// holding the kernel pack a restore kernel hands a cold boot to.
pub fn kernel_cmdline(bundle: &Bundle, opts: &RunOptions, cold_kernel: &str) -> String {
    let deferred = deferred_mib(opts);
    let mut params = opts.params.clone();
    if deferred.is_some() {
        params.defer_mem = opts.max_mem_mib.map(|m| u64::from(m) << 20);
    }
    if matches!(opts.kernel, KernelImage::Restore(_)) {
        params.cold_kernel = Some(cold_kernel.to_string());
    }
    let mut cmdline = match bundle.kernel.arch {
        crate::Arch::X86_64 => BASE_CMDLINE,
        crate::Arch::Arm64 => crate::virt::BASE_CMDLINE,
    }
    .to_string();
    for w in bundle.workload.init.kernel_args() {
        cmdline.push(' ');
        cmdline.push_str(w);
    }
    if matches!(opts.kernel, KernelImage::Restore(_)) {
        // snapboot itself is the restore kernel's first process: no shell before resume.
        cmdline.push_str(" rdinit=/bin/snapboot");
    }
    if deferred.is_some() {
        // With memory possible above 4 GiB the kernel sets up a 64 MiB bounce buffer for
        // devices that cannot reach it (swiotlb): measured on the board, +0.2 s of kernel
        // boot and +64 MiB in every image, for nothing, since every device here is virtio
        // and reaches all memory. A board whose devices have 32-bit DMA keeps it.
        cmdline.push_str(" swiotlb=noforce");
    }
    for w in params.render().iter().chain(&opts.cmdline) {
        cmdline.push(' ');
        cmdline.push_str(w);
    }
    cmdline
}

/// The QEMU command of a run on the bundle's board, with the files that live as long as
/// the run (the arm64 board's U-Boot environment).
pub fn board_command(
    bundle: &Bundle,
    opts: &RunOptions,
) -> Result<(Command, Option<tempfile::TempDir>), RunError> {
    bundle.ensure_kernel_pack().map_err(RunError::KernelPack)?;
    match bundle.kernel.arch {
        crate::Arch::X86_64 => Ok((qemu_command(bundle, opts), None)),
        crate::Arch::Arm64 => {
            let (cmd, dir) = crate::virt::command(bundle, opts)?;
            Ok((cmd, Some(dir)))
        }
    }
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
    KernelPack(#[source] crate::bundle::BundleError),
    /// The arm64 board's boot disk or boot loader environment could not be made.
    #[error("cannot prepare the arm64 board")]
    Arm64Board(#[source] crate::virt::VirtError),
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
    /// Files of this run only, removed with the session.
    _run_files: Option<tempfile::TempDir>,
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

    /// Powers the board off (kills QEMU if still running) and returns the timeline.
    pub fn finish(mut self, outcome: Outcome) -> Timeline {
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
        .and_then(|_| {
            s.event(MilestoneKind::ProbeSent, Some(probe.send.clone()));
            s.send(&probe.send)?;
            s.wait_for(&expect, "the probe's answer", left())
        });
    let res = match (res, then) {
        (Ok((text, t)), Some((marker, what))) => {
            s.timeline
                .push_event(MilestoneKind::ProbeAnswered, t, Some(text));
            s.timeline.tti = Some(t);
            s.wait_for_marker(&[marker], what, left()).map(|_| None)
        }
        (Ok(answer), None) => Ok(Some(answer)),
        (Err(e), _) => Err(e),
    };
    Ok(match res {
        Ok(answer) => {
            if let Some((text, t)) = answer {
                s.timeline
                    .push_event(MilestoneKind::ProbeAnswered, t, Some(text));
                s.timeline.tti = Some(t);
            }
            RunResult {
                timeline: s.finish(Outcome::Answered),
                error: None,
            }
        }
        Err(e) => {
            let outcome = match &e {
                RunError::Panic(r) => Outcome::Panic { reason: r.clone() },
                RunError::Timeout { .. } => Outcome::Timeout {
                    reason: e.to_string(),
                },
                _ => Outcome::Exited {
                    reason: e.to_string(),
                },
            };
            RunResult {
                timeline: s.finish(outcome),
                error: Some(e),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes() {
        assert_eq!(parse_mem_mib("512M"), Ok(512));
        assert_eq!(check_max_mem(512, 16384), Ok(()));
        assert!(check_max_mem(512, 512).is_err() && check_max_mem(512, 600).is_err());
        assert!(check_max_mem(1024, 512).is_err());
        assert_eq!(parse_mem_mib("1G"), Ok(1024));
        assert!(
            matches!(parse_mem_mib("256"), Err(MemSizeError::Syntax(_))),
            "a size without a unit is refused"
        );
        assert_eq!(
            parse_mem_mib("lots").unwrap_err().to_string(),
            "memory size \"lots\": expected a number with a unit, e.g. 512M or 1G"
        );
        for small in ["0M", "127M", "9999999G"] {
            assert!(
                matches!(parse_mem_mib(small), Err(MemSizeError::Range(_))),
                "{small}"
            );
        }
    }

    fn args(c: &Command) -> Vec<String> {
        c.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
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

    #[test]
    fn kvm_needs_device_and_cpu_flags() {
        let vmx = "flags\t\t: fpu vme vmx sse\n";
        let none = "flags\t\t: fpu vme sse hypervisor\n";
        assert_eq!(Accel::decide(true, vmx), Accel::Kvm);
        assert_eq!(Accel::decide(true, none), Accel::Tcg);
        assert_eq!(Accel::decide(false, vmx), Accel::Tcg);
    }
}
