//! One boot, analysed: [`Analysis::from_timeline`] takes a [`Timeline`] (snapboot JSON, a
//! stamped grabserial-like log or a raw console/dmesg capture) and works out the boot's
//! phases (firmware, kernel, initcalls, initramfs unpack, initramfs, resume, user space, app),
//! every initcall that `initcall_debug` measured, the silent gaps where nothing was printed,
//! and what the console cost at its baud rate. All times share one axis, seconds since power-on
//! when the log has host stamps and since kernel start otherwise: a kernel line is placed at
//! `kernel start + printk time` (its true print time; early lines reach the host late because
//! the console registers late), other lines at their host arrival time. Logs without
//! printk timestamps, without `initcall_debug` or without host stamps give what they can.

use boottrace::{MilestoneKind, Timeline};
use serde::Serialize;

use crate::console::{Cmdline, ConsoleCost, SerialConsole};
use crate::initcall::{Initcall, InitcallParser};

/// Silent stretches at least this long (seconds) are reported as gaps by default.
pub const DEFAULT_GAP_THRESHOLD: f64 = 0.1;

/// A kernel line is placed at `kernel start + printk time` unless that is later than its host
/// arrival (plus this slack, seconds): then the printk clock is another kernel's.
const ARRIVAL_SLACK: f64 = 0.005;

/// ... or earlier than arrival by more than this (seconds): no console buffers that long.
const MAX_CONSOLE_LAG: f64 = 3.0;

/// The printk clock must run this far (seconds) ahead of a real UART to call it emulated.
const VIRTUAL_UART_AHEAD_S: f64 = 0.1;

/// How an analysis is computed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AnalysisOptions {
    /// Minimum length (seconds) of a silent stretch reported in [`Analysis::gaps`].
    pub gap_threshold: f64,
}

impl Default for AnalysisOptions {
    fn default() -> Self {
        Self {
            gap_threshold: DEFAULT_GAP_THRESHOLD,
        }
    }
}

/// The kinds of phase, in boot order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseKind {
    /// Power-on to kernel start, or to the restorer's start: firmware and boot loader
    /// (host-stamped logs only).
    Firmware,
    /// The restorer reading and checking the image: `snapboot-restorer: started` to `image
    /// checked` (or to its refusal).
    RestorerCheck,
    /// The restorer putting every page in place: `image checked` to `entering the image`
    /// (or to a refusal).
    RestorerPlace,
    /// The restorer refused the image and boots the stock kernel cold: the refusal to the
    /// stock kernel's start.
    RestorerFallback,
    /// Kernel start to the kernel executing init (or resuming, or panicking).
    Kernel,
    /// First initcall called to last initcall returned (`initcall_debug` logs only).
    Initcalls,
    /// `Trying to unpack rootfs image as initramfs` to `Freeing initrd memory`.
    Unpack,
    /// Init executed to the real root mounted (or to resume starting).
    Initramfs,
    /// Resume start (or the restorer entering the image) to the snapshotted system
    /// restored: the restoring kernel's work, or the image kernel's own resume.
    Resume,
    /// Root mounted (or init executed) to the app starting, else to the end of the log.
    Userspace,
    /// App start to app ready; after a restore, restored to ready (the TTI).
    App,
}

impl PhaseKind {
    /// Every kind, in boot order.
    pub const ALL: [PhaseKind; 11] = [
        Self::Firmware,
        Self::RestorerCheck,
        Self::RestorerPlace,
        Self::RestorerFallback,
        Self::Kernel,
        Self::Initcalls,
        Self::Unpack,
        Self::Initramfs,
        Self::Resume,
        Self::Userspace,
        Self::App,
    ];

    /// The snake_case name, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Firmware => "firmware",
            Self::RestorerCheck => "restorer_check",
            Self::RestorerPlace => "restorer_place",
            Self::RestorerFallback => "restorer_fallback",
            Self::Kernel => "kernel",
            Self::Initcalls => "initcalls",
            Self::Unpack => "unpack",
            Self::Initramfs => "initramfs",
            Self::Resume => "resume",
            Self::Userspace => "userspace",
            Self::App => "app",
        }
    }

    /// Whether the phase details another (drawn on a second band row): initcalls and unpack
    /// happen inside the kernel phase.
    pub fn is_detail(self) -> bool {
        matches!(self, Self::Initcalls | Self::Unpack)
    }
}

/// A stretch of the boot between two events.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Phase {
    /// Which phase.
    pub kind: PhaseKind,
    /// Start, seconds.
    pub start: f64,
    /// End, seconds.
    pub end: f64,
}

impl Phase {
    /// Its length, seconds.
    pub fn duration(&self) -> f64 {
        self.end - self.start
    }
}

/// A milestone placed on the analysis time axis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mark {
    /// What happened.
    pub kind: MilestoneKind,
    /// When, seconds.
    pub t: f64,
    /// Extra information (kernel version, panic message, ...).
    pub detail: Option<String>,
}

/// A silent stretch: nothing was printed from `start` to `end`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gap {
    /// Time of the last line before the silence.
    pub start: f64,
    /// Time of the first line after it.
    pub end: f64,
    /// The line before (message, printk prefix removed).
    pub before: String,
    /// The line after.
    pub after: String,
}

impl Gap {
    /// Its length, seconds.
    pub fn duration(&self) -> f64 {
        self.end - self.start
    }
}

/// One console line on the analysis axis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Line {
    /// Time, seconds.
    pub t: f64,
    /// The printk timestamp, for kernel lines.
    pub kernel_ts: Option<f64>,
    /// The message, printk prefix removed.
    pub message: String,
    /// Bytes the full line took on the console, `\r\n` included.
    pub bytes: u64,
}

/// One boot, analysed. See the module documentation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    /// Where the log came from (file name or the timeline's source).
    pub source: String,
    /// How the boot ended, in words.
    pub outcome: String,
    /// Time to interactive, seconds, if reached.
    pub tti: Option<f64>,
    /// Latest time in the log, seconds.
    pub end: f64,
    /// When the kernel started, seconds (0 without host stamps).
    pub kernel_start: Option<f64>,
    /// Whether the lines carry host arrival stamps (grabserial-like); otherwise printk time
    /// stands in for host time and the firmware phase is unknown.
    pub has_host_stamps: bool,
    /// Whether kernel lines carry printk timestamps (`printk.time=1`).
    pub has_printk_time: bool,
    /// Whether the log has `initcall_debug` output.
    pub has_initcall_debug: bool,
    /// The `Linux version` of the (first) kernel.
    pub kernel_version: Option<String>,
    /// The kernel command line.
    pub cmdline: Option<Cmdline>,
    /// Milestones, sorted by time.
    pub milestones: Vec<Mark>,
    /// When the kernel handed over to init (`Run /init as init process` and the like).
    pub init_exec: Option<f64>,
    /// Phases, sorted by start.
    pub phases: Vec<Phase>,
    /// Initcalls, sorted by start.
    pub initcalls: Vec<Initcall>,
    /// Device PM callbacks the kernel timed (`pm_print_times`), in log order.
    pub device_pm: Vec<crate::devpm::DeviceCallback>,
    /// The load phase's throughput lines of a restore and the medium baseline's
    /// (`throughput`, `medium-baseline` markers), in log order.
    pub throughput: Vec<crate::throughput::ThroughputLine>,
    /// Silent stretches of at least the gap threshold, sorted by time.
    pub gaps: Vec<Gap>,
    /// The gap threshold used, seconds.
    pub gap_threshold: f64,
    /// Console cost, when the command line names a serial console.
    pub console: Option<ConsoleCost>,
    /// Every console line, in log order (not in the JSON form).
    #[serde(skip)]
    pub lines: Vec<Line>,
}

/// Whether a message announces the kernel executing init.
fn is_init_exec(msg: &str) -> bool {
    (msg.starts_with("Run ") && msg.ends_with(" as init process"))
        || msg.starts_with("Freeing init memory")
}

/// Whether a message starts the initramfs unpack.
fn is_unpack_start(msg: &str) -> bool {
    msg.starts_with("Trying to unpack rootfs image as initramfs")
        || msg.starts_with("Unpacking initramfs")
}

impl Analysis {
    /// Analyses a timeline with the default options.
    pub fn from_timeline(tl: &Timeline) -> Self {
        Self::from_timeline_with(tl, &AnalysisOptions::default())
    }

    /// Analyses a timeline.
    pub fn from_timeline_with(tl: &Timeline, opts: &AnalysisOptions) -> Self {
        let has_printk_time = tl.lines.iter().any(|l| l.kernel_ts.is_some());
        let has_host_stamps = if has_printk_time {
            tl.lines
                .iter()
                .any(|l| l.kernel_ts.is_some_and(|k| (l.t - k).abs() > 1e-9))
        } else {
            tl.lines.iter().any(|l| l.t != 0.0)
        };
        let ks = tl.first(MilestoneKind::KernelStart);
        let offset = if has_host_stamps {
            ks.unwrap_or(0.0)
        } else {
            0.0
        };
        let place = |l: &boottrace::ConsoleLine| match l.kernel_ts {
            Some(k) if has_host_stamps => {
                let at = offset + k;
                if at <= l.t + ARRIVAL_SLACK && l.t - at < MAX_CONSOLE_LAG {
                    at.min(l.t)
                } else {
                    l.t
                }
            }
            _ => l.t,
        };
        let lines: Vec<Line> = tl
            .lines
            .iter()
            .map(|l| Line {
                t: place(l),
                kernel_ts: l.kernel_ts,
                message: l.message().to_string(),
                bytes: ConsoleCost::line_bytes(&l.text),
            })
            .collect();

        // Milestones announced by a line move with it; the others (probes, inferred kernel
        // start) keep their host time.
        let mut milestones: Vec<Mark> = tl
            .milestones
            .iter()
            .map(|m| {
                let announced = tl.lines.iter().zip(&lines).find(|(raw, _)| {
                    raw.t == m.t && boottrace::detect(&raw.text).is_some_and(|(k, _)| k == m.kind)
                });
                Mark {
                    kind: m.kind,
                    t: announced.map_or(m.t, |(_, l)| l.t),
                    detail: m.detail.clone(),
                }
            })
            .collect();
        milestones.sort_by(|a, b| a.t.total_cmp(&b.t).then(a.kind.cmp(&b.kind)));

        let mut parser = InitcallParser::new();
        for l in &lines {
            parser.feed(l.t, &l.message);
        }
        let initcalls = parser.finish();
        let device_pm = lines
            .iter()
            .filter_map(|l| crate::devpm::parse(l.t, l.kernel_ts, &l.message))
            .collect();

        let end = lines
            .iter()
            .map(|l| l.t)
            .chain(milestones.iter().map(|m| m.t))
            .fold(0.0, f64::max);
        let cmdline = Cmdline::find(lines.iter().map(|l| l.message.as_str()));
        let init_exec = lines.iter().find(|l| is_init_exec(&l.message)).map(|l| l.t);
        let throughput = crate::throughput::find(lines.iter().map(|l| (l.t, l.message.as_str())));
        let mut a = Analysis {
            source: tl.source.clone(),
            outcome: tl.outcome.to_string(),
            tti: tl.tti,
            end,
            kernel_start: if has_host_stamps {
                ks
            } else {
                has_printk_time.then_some(0.0)
            },
            has_host_stamps,
            has_printk_time,
            has_initcall_debug: !initcalls.is_empty(),
            kernel_version: tl
                .milestone(MilestoneKind::LinuxVersion)
                .and_then(|m| m.detail.clone()),
            cmdline,
            milestones,
            init_exec,
            phases: Vec::new(),
            initcalls,
            device_pm,
            throughput,
            gaps: Vec::new(),
            gap_threshold: opts.gap_threshold,
            console: None,
            lines,
        };
        a.phases = a.compute_phases();
        a.gaps = a.compute_gaps(opts.gap_threshold);
        a.console = a.compute_console_cost();
        a
    }

    /// The time of the first milestone of `kind`.
    pub fn at(&self, kind: MilestoneKind) -> Option<f64> {
        self.milestones.iter().find(|m| m.kind == kind).map(|m| m.t)
    }

    /// The phase of `kind`, if the log shows it.
    pub fn phase(&self, kind: PhaseKind) -> Option<&Phase> {
        self.phases.iter().find(|p| p.kind == kind)
    }

    /// The index of the first line whose message contains `needle`.
    pub fn find_line(&self, needle: &str) -> Option<usize> {
        self.lines.iter().position(|l| l.message.contains(needle))
    }

    /// The time the boot is done: the TTI, else the app's ready marker, else the restore.
    pub fn ready_time(&self) -> Option<f64> {
        self.tti
            .or_else(|| self.at(MilestoneKind::AppReady))
            .or_else(|| self.at(MilestoneKind::Restored))
    }

    /// Where the kernel phase ends: init executed, else resume, panic or the last kernel line.
    fn kernel_end(&self) -> Option<f64> {
        use MilestoneKind as K;
        self.init_exec
            .or_else(|| self.at(K::InitStart))
            .or_else(|| self.at(K::ResumeStart))
            .or_else(|| self.at(K::KernelPanic))
            .or_else(|| {
                self.lines
                    .iter()
                    .filter(|l| l.kernel_ts.is_some())
                    .map(|l| l.t)
                    .reduce(f64::max)
            })
    }

    fn compute_phases(&self) -> Vec<Phase> {
        use MilestoneKind as K;
        let mut out = Vec::new();
        let mut push = |kind, start: Option<f64>, end: Option<f64>| {
            if let (Some(start), Some(end)) = (start, end) {
                if end > start {
                    out.push(Phase { kind, start, end });
                }
            }
        };
        let ks = self.kernel_start;
        // The restorer, when the firmware started it in place of a kernel: it checks the
        // image, places its pages and enters it, or refuses and boots the stock kernel.
        let restorer = self.at(K::RestorerStart);
        let checked = self.at(K::RestorerChecked);
        let refused = self.at(K::RestorerRefused);
        let entered = self.at(K::RestorerEntered);
        if self.has_host_stamps {
            push(PhaseKind::Firmware, Some(0.0), restorer.or(ks));
        }
        push(PhaseKind::RestorerCheck, restorer, checked.or(refused));
        push(PhaseKind::RestorerPlace, checked, entered.or(refused));
        let stock_start = ks.or(self.at(K::LinuxVersion));
        push(PhaseKind::RestorerFallback, refused, stock_start);
        let kernel_end = self.kernel_end();
        push(PhaseKind::Kernel, ks, kernel_end);
        // The kernel's own initcalls; modules loaded by user space come later.
        let boot_calls = || {
            self.initcalls
                .iter()
                .filter(|c| self.init_exec.is_none_or(|t| c.start < t))
        };
        let first_call = boot_calls().map(|c| c.start).reduce(f64::min);
        let last_ret = boot_calls().map(Initcall::end).reduce(f64::max);
        push(PhaseKind::Initcalls, first_call, last_ret);
        let unpack = self.find_line_where(is_unpack_start);
        let freed = unpack.and_then(|i| {
            self.lines[i..]
                .iter()
                .find(|l| l.message.starts_with("Freeing initrd memory"))
                .map(|l| l.t)
        });
        push(PhaseKind::Unpack, unpack.map(|i| self.lines[i].t), freed);
        let resume_start = self.at(K::ResumeStart).or(entered);
        let root = self.at(K::RootMounted);
        let init = self.init_exec.or_else(|| self.at(K::InitStart));
        push(PhaseKind::Initramfs, init, root.or(resume_start));
        let restored = self.at(K::Restored);
        push(
            PhaseKind::Resume,
            resume_start,
            restored.or(self.at(K::ResumeLoaded)),
        );
        if resume_start.is_some() {
            // The restored application answering.
            push(PhaseKind::App, restored, self.tti);
        } else if self.at(K::KernelPanic).is_none() {
            let app_start = self.at(K::AppStart);
            let user_end = app_start.or(self.ready_time()).or(Some(self.end));
            push(PhaseKind::Userspace, root.or(init), user_end);
            push(PhaseKind::App, app_start, self.at(K::AppReady));
        }
        out.sort_by(|a, b| a.start.total_cmp(&b.start).then(a.kind.cmp(&b.kind)));
        out
    }

    fn find_line_where(&self, pred: impl Fn(&str) -> bool) -> Option<usize> {
        self.lines.iter().position(|l| pred(&l.message))
    }

    fn compute_gaps(&self, threshold: f64) -> Vec<Gap> {
        let mut sorted: Vec<&Line> = self.lines.iter().collect();
        sorted.sort_by(|a, b| a.t.total_cmp(&b.t));
        sorted
            .windows(2)
            .filter(|w| w[1].t - w[0].t >= threshold)
            .map(|w| Gap {
                start: w[0].t,
                end: w[1].t,
                before: w[0].message.clone(),
                after: w[1].message.clone(),
            })
            .collect()
    }

    /// How far the printk clock ran ahead of a UART at the console's baud rate (see
    /// [`ConsoleCost::ahead_s`]), over the kernel lines from the console's registration to
    /// `until` (a line index).
    fn uart_ahead(&self, console: &SerialConsole, until: usize) -> Option<f64> {
        let reg = self.find_line_where(|m| m.contains("console [") && m.contains("] enabled"))?;
        let t_reg = self.lines[reg].kernel_ts?;
        // The kernel's backlog is replayed when the console registers (firmware lines are not
        // the kernel's to print).
        let mut printed: u64 = self.lines[..=reg]
            .iter()
            .filter(|l| l.kernel_ts.is_some())
            .map(|l| l.bytes)
            .sum();
        let mut ahead = f64::NEG_INFINITY;
        for l in self.lines.iter().take(until).skip(reg + 1) {
            let Some(ts) = l.kernel_ts else { continue };
            ahead = ahead.max(t_reg + console.seconds_for(printed) - ts);
            printed += l.bytes;
        }
        ahead.is_finite().then_some(ahead)
    }

    fn compute_console_cost(&self) -> Option<ConsoleCost> {
        let cmdline = self.cmdline.as_ref()?;
        let console = cmdline.serial_console()?;
        let init_index = self
            .find_line_where(is_init_exec)
            .unwrap_or(self.lines.len());
        // Firmware output before the kernel's banner is no kernel line; without printk time,
        // everything from the banner to init is.
        let banner = self
            .find_line_where(|m| m.starts_with("Linux version "))
            .unwrap_or(0);
        let mut kernel: Vec<&Line> = Vec::new();
        let mut user: Vec<&Line> = Vec::new();
        for (i, l) in self.lines.iter().enumerate().skip(banner) {
            if l.kernel_ts.is_some() || (!self.has_printk_time && i <= init_index) {
                kernel.push(l);
            } else {
                user.push(l);
            }
        }
        let kernel_bytes: u64 = kernel.iter().map(|l| l.bytes).sum();
        let user_bytes: u64 = user.iter().map(|l| l.bytes).sum();
        let ahead_s = if cmdline.has_flag("quiet") {
            None
        } else {
            self.uart_ahead(&console, init_index)
        };
        let virtual_uart = ahead_s.is_some_and(|s| s > VIRTUAL_UART_AHEAD_S);
        Some(ConsoleCost {
            quiet: cmdline.has_flag("quiet"),
            kernel_lines: kernel.len(),
            kernel_bytes,
            kernel_seconds: console.seconds_for(kernel_bytes),
            user_lines: user.len(),
            user_bytes,
            user_seconds: console.seconds_for(user_bytes),
            ahead_s,
            virtual_uart,
            console,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use boottrace::ConsoleLine;

    const RAW: &str = "\
[    0.000000] Linux version 5.10.0 (x)
[    0.000000] Command line: console=ttyS0,115200 initcall_debug
[    0.100000] calling  a_init+0x0/0x10 @ 1
[    0.150000] initcall a_init+0x0/0x10 returned 0 after 50000 usecs
[    0.200000] Trying to unpack rootfs image as initramfs...
[    0.500000] Freeing initrd memory: 1024K
[    0.700000] Run /init as init process
userspace says hi
[    0.900000] random: crng init done
";

    #[test]
    fn raw_log_phases_initcalls_and_gaps() {
        let a = Analysis::from_timeline(&Timeline::from_console_log(RAW));
        assert!(a.has_printk_time && !a.has_host_stamps && a.has_initcall_debug);
        assert_eq!(a.kernel_start, Some(0.0));
        assert_eq!(a.init_exec, Some(0.7));
        let kinds: Vec<_> = a.phases.iter().map(|p| p.kind).collect();
        assert_eq!(
            kinds,
            [
                PhaseKind::Kernel,
                PhaseKind::Initcalls,
                PhaseKind::Unpack,
                PhaseKind::Userspace
            ]
        );
        let unpack = a.phase(PhaseKind::Unpack).map(Phase::duration);
        assert!(unpack.is_some_and(|d| (d - 0.3).abs() < 1e-9));
        assert_eq!(a.initcalls.len(), 1);
        // 0.0 -> 0.1, 0.2 -> 0.5, 0.5 -> 0.7, 0.7 -> 0.9 (0.15 -> 0.2 is too short)
        assert_eq!(a.gaps.len(), 4, "{:?}", a.gaps);
        assert_eq!(a.gaps[1].after, "Freeing initrd memory: 1024K");
        let c = a.console.as_ref().expect("console cost");
        assert_eq!((c.kernel_lines, c.user_lines), (8, 1));
        assert!(!c.quiet && !c.virtual_uart && c.ahead_s.is_none());
        assert!((c.kernel_seconds - c.kernel_bytes as f64 / 11520.0).abs() < 1e-9);
    }

    #[test]
    fn host_stamps_place_kernel_lines_at_print_time() {
        let mut tl = Timeline::new("board");
        tl.push_lines([
            ConsoleLine::new(0.5, "SeaBIOS"),
            ConsoleLine::new(1.0, "[    0.000000] Linux version 6.1.0 (x)"),
            ConsoleLine::new(1.0, "[    0.400000] console [ttyS0] enabled"),
            ConsoleLine::new(1.2, "[    0.700000] Run /init as init process"),
            ConsoleLine::new(1.3, "snapboot: @init"),
            ConsoleLine::new(1.5, "snapboot: @root-mounted"),
            ConsoleLine::new(1.6, "snapboot: @app-start /bin/app"),
            ConsoleLine::new(2.6, "snapboot: @ready"),
        ]);
        tl.finalize();
        let a = Analysis::from_timeline(&tl);
        assert!(a.has_host_stamps);
        assert_eq!(a.kernel_start, Some(0.5));
        assert_eq!(a.at(MilestoneKind::LinuxVersion), Some(0.5));
        assert_eq!(a.init_exec, Some(1.2));
        let kinds: Vec<_> = a.phases.iter().map(|p| p.kind).collect();
        assert_eq!(
            kinds,
            [
                PhaseKind::Firmware,
                PhaseKind::Kernel,
                PhaseKind::Initramfs,
                PhaseKind::Userspace,
                PhaseKind::App
            ]
        );
        let longest = a.gaps.iter().map(Gap::duration).fold(0.0, f64::max);
        assert!((longest - 1.0).abs() < 1e-9, "{:?}", a.gaps);
        assert_eq!(a.ready_time(), Some(2.6));
        assert!(a.console.is_none());
    }

    fn board_log(text: &str) -> Analysis {
        Analysis::from_timeline(&Timeline::parse(text).expect("a stamped log"))
    }

    fn kinds(a: &Analysis) -> Vec<PhaseKind> {
        a.phases.iter().map(|p| p.kind).collect()
    }

    /// The main row's phases follow each other with no overlap and no hole between them.
    fn assert_back_to_back(a: &Analysis) {
        let main: Vec<_> = a.phases.iter().filter(|p| !p.kind.is_detail()).collect();
        for w in main.windows(2) {
            assert!((w[0].end - w[1].start).abs() < 1e-9, "{main:?}");
        }
    }

    /// A restore by the restorer on the board (`shell`, 2026-11-26): firmware until the
    /// restorer starts, its check and its placing of the pages, the image kernel's resume
    /// until `@restored`, then the application's answer; no kernel boots before the image.
    #[test]
    fn a_restorer_restore_has_the_restorer_s_phases_and_no_kernel_boot() {
        let a = board_log(include_str!("../tests/data/shell-restorer.log"));
        assert_eq!(
            kinds(&a),
            [
                PhaseKind::Firmware,
                PhaseKind::RestorerCheck,
                PhaseKind::RestorerPlace,
                PhaseKind::Resume,
                PhaseKind::App
            ]
        );
        assert_back_to_back(&a);
        assert_eq!(
            a.kernel_start, None,
            "the image kernel's clock is not a boot"
        );
        let at = |k| a.phase(k).map(|p| (p.start, p.end));
        assert_eq!(at(PhaseKind::Firmware), Some((0.0, 0.172328)));
        assert_eq!(at(PhaseKind::RestorerCheck), Some((0.172328, 0.251496)));
        assert_eq!(at(PhaseKind::RestorerPlace), Some((0.251496, 0.404334)));
        assert_eq!(at(PhaseKind::Resume), Some((0.404334, 0.694171)));
        assert_eq!(at(PhaseKind::App), Some((0.694171, 0.833164)));
        // The image kernel's replayed lines stay where they arrived.
        let line = &a.lines[a.find_line("Disabling non-boot CPUs").unwrap()];
        assert_eq!(line.t, 0.553705);
    }

    /// A refusal as the restorer prints it today: the reason, then power-off.
    #[test]
    fn a_refusal_ends_the_restorer_s_check_with_its_reason() {
        let a = board_log(include_str!("../tests/data/shell-restorer-refused.log"));
        assert_eq!(kinds(&a), [PhaseKind::Firmware, PhaseKind::RestorerCheck]);
        let refused = a
            .milestones
            .iter()
            .find(|m| m.kind == MilestoneKind::RestorerRefused);
        assert_eq!(
            refused.and_then(|m| m.detail.as_deref()),
            Some("memory map: image's e820 checksum 0xb9b0357f, this machine's 0x33aa71bf")
        );
        assert_eq!(a.tti, None);
    }

    /// The restorer's fallback: refused, then the stock kernel boots cold. The fallback is
    /// a phase from the refusal to the stock kernel's start, and the cold boot's phases
    /// follow it.
    #[test]
    fn a_refused_restore_that_boots_cold_reads_as_restorer_then_cold_boot() {
        let a = board_log(include_str!("../tests/data/shell-restorer-fallback.log"));
        assert_eq!(
            kinds(&a),
            [
                PhaseKind::Firmware,
                PhaseKind::RestorerCheck,
                PhaseKind::RestorerFallback,
                PhaseKind::Kernel,
                PhaseKind::Unpack,
                PhaseKind::Initramfs,
                PhaseKind::Userspace,
                PhaseKind::App
            ]
        );
        assert_back_to_back(&a);
        let fallback = a.phase(PhaseKind::RestorerFallback).unwrap();
        assert_eq!(fallback.start, 0.219629);
        assert_eq!(Some(fallback.end), a.kernel_start);
        assert!(
            (0.35..0.45).contains(&fallback.duration()),
            "{fallback:?}: the stock kernel starts about 0.4 s after the refusal"
        );
        assert!(a.phase(PhaseKind::Resume).is_none());
        assert!(a.kernel_version.as_deref() == Some("6.1.0-56-amd64"));
    }

    #[test]
    fn no_printk_time_at_all() {
        let a = Analysis::from_timeline(&Timeline::from_console_log(
            "Linux version 2.6.32 (x)\nCommand line: console=ttyO2,115200 quiet\nhello\n",
        ));
        assert!(!a.has_printk_time && !a.has_host_stamps);
        assert_eq!(a.kernel_start, None);
        assert!(a.phases.is_empty() && a.gaps.is_empty());
        assert!(a.console.as_ref().is_some_and(|c| c.quiet));
        let json = serde_json::to_string(&a).unwrap_or_default();
        assert!(json.contains("\"has_printk_time\":false"), "{json}");
        assert!(!json.contains("\"lines\""));
    }
}
