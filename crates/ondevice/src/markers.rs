//! Where the device's timeline markers go: the kernel log (`/dev/kmsg`, so journald keeps
//! them) and the console, each marker on the console exactly once.
//!
//! ```text
//! marker ─► /dev/kmsg writable? ──no──────────────────────────► console write (as before)
//!             │ yes: "<5>snapboot: @name detail" (a fresh open per line)
//!             ├─ the kernel echoes it (notice < console_loglevel,
//!             │  or printk.ignore_loglevel) ─────────────────► nothing more
//!             └─ it does not (`quiet`), the level is unknown,
//!                or the write failed ─────────────────────────► console write too
//! console write: /dev/console when SNAPBOOT_MARKERS=console, else stdout
//! ```
//!
//! The board's timeline parser reads the kernel's echo (`[    1.6] snapboot: @x`) and a
//! plain console line alike; a marker on the console twice would count twice, so the
//! echo and the console write never both happen. `/dev/kmsg` is opened for each line: the
//! kernel rate-limits what one open file may write (10 lines in 5 s unless
//! `printk.devkmsg=on`), so a busy boot on one file would lose markers. A kernel log line
//! holds at most 1 KiB: a longer marker fails to write there and goes to the console.

use boottrace::Marker;
use std::io::Write;
use std::path::Path;

/// Environment variable `snapboot start` sets for the application: markers go straight to
/// `/dev/console`, because an application may pipe `snapboot ready`'s output and then be
/// frozen (during capture) before it could pass the marker on.
pub const MARKERS_ENV: &str = "SNAPBOOT_MARKERS";

/// The kernel log's priority of a marker: notice (`<5>`), as the kernel's own
/// `pr_notice` lines.
pub const MARKER_LEVEL: u32 = 5;

/// Where the kernel takes lines from userspace.
const KMSG: &str = "/dev/kmsg";
/// Its console log level is this file's first field.
const PRINTK: &str = "/proc/sys/kernel/printk";
/// `Y` when the kernel echoes every level (`ignore_loglevel`).
const IGNORE_LOGLEVEL: &str = "/sys/module/printk/parameters/ignore_loglevel";

/// What the kernel would do with a marker written to its log, as read before writing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelLog {
    /// `/dev/kmsg` opens for writing.
    pub writable: bool,
    /// The console log level (`None`: unknown).
    pub console_loglevel: Option<u32>,
    /// `printk.ignore_loglevel` is on: every line is echoed.
    pub ignore_loglevel: bool,
}

/// Where one marker line goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// Into the kernel log.
    pub kmsg: bool,
    /// Onto the console by snapboot itself (not the kernel's echo).
    pub console: bool,
}

/// Where a marker goes, given the kernel log: into it when it takes lines, and onto the
/// console only when the kernel will not echo it there (or may not: an unknown level).
pub fn route(log: KernelLog) -> Route {
    if !log.writable {
        return Route {
            kmsg: false,
            console: true,
        };
    }
    let echoed = log.ignore_loglevel
        || log
            .console_loglevel
            .is_some_and(|level| MARKER_LEVEL < level);
    Route {
        kmsg: echoed || log.console_loglevel.is_some(),
        console: !echoed,
    }
}

/// The files the printer reads and writes (the kernel's, or a test's).
struct Files<'a> {
    kmsg: &'a Path,
    printk: &'a Path,
    ignore_loglevel: &'a Path,
}

impl Files<'_> {
    /// The running kernel's (in this crate's unit tests, none: they print markers, and must
    /// not put them in the log of the machine that runs them).
    fn kernel() -> Files<'static> {
        Files {
            kmsg: Path::new(if cfg!(test) {
                "/nonexistent/kmsg"
            } else {
                KMSG
            }),
            printk: Path::new(PRINTK),
            ignore_loglevel: Path::new(IGNORE_LOGLEVEL),
        }
    }

    /// `/dev/kmsg` opened for one line, and what the kernel does with it.
    fn open(&self) -> (Option<std::fs::File>, KernelLog) {
        let file = std::fs::OpenOptions::new().write(true).open(self.kmsg).ok();
        let console_loglevel = std::fs::read_to_string(self.printk)
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse().ok());
        let ignore_loglevel = std::fs::read_to_string(self.ignore_loglevel)
            .is_ok_and(|t| t.trim_start().starts_with('Y'));
        let log = KernelLog {
            writable: file.is_some(),
            console_loglevel,
            ignore_loglevel,
        };
        (file, log)
    }

    /// Writes `line` (no newline) where [`route`] says; `console` writes it there.
    fn print(&self, line: &str, console: impl FnOnce(&str)) {
        let (file, log) = self.open();
        let r = route(log);
        let logged = match (r.kmsg, file) {
            (true, Some(mut f)) => f
                .write_all(format!("<{MARKER_LEVEL}>{line}\n").as_bytes())
                .is_ok(),
            _ => false,
        };
        if r.console || !logged {
            console(line);
        }
    }
}

/// Prints a timeline marker: into the kernel log, and on the console once (see the module
/// documentation): `/dev/console` when [`MARKERS_ENV`] says so, stdout otherwise.
pub fn print_marker(marker: Marker, detail: Option<&str>) {
    Files::kernel().print(&marker.line(detail), console_write);
}

/// Today's console write: `/dev/console` when [`MARKERS_ENV`] is `console` and it opens,
/// stdout otherwise.
fn console_write(line: &str) {
    let line = format!("{line}\n");
    if std::env::var(MARKERS_ENV).as_deref() == Ok("console") {
        if let Ok(mut c) = std::fs::OpenOptions::new().write(true).open("/dev/console") {
            if c.write_all(line.as_bytes()).is_ok() {
                return;
            }
        }
    }
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line.as_bytes());
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn log(writable: bool, level: Option<u32>, ignore: bool) -> KernelLog {
        KernelLog {
            writable,
            console_loglevel: level,
            ignore_loglevel: ignore,
        }
    }

    #[test]
    fn a_marker_the_kernel_echoes_is_not_written_to_the_console_again() {
        let both = Route {
            kmsg: true,
            console: true,
        };
        let kmsg_only = Route {
            kmsg: true,
            console: false,
        };
        let console_only = Route {
            kmsg: false,
            console: true,
        };
        // The kernel's default level (7) and a debug one echo a notice.
        assert_eq!(route(log(true, Some(7), false)), kmsg_only);
        assert_eq!(route(log(true, Some(6), false)), kmsg_only);
        // `quiet` (4) and a level of exactly notice (5) do not: snapboot writes it.
        assert_eq!(route(log(true, Some(4), false)), both);
        assert_eq!(route(log(true, Some(5), false)), both);
        assert_eq!(route(log(true, Some(1), true)), kmsg_only);
        // An unknown level might echo: the console alone, as before.
        assert_eq!(route(log(true, None, false)), console_only);
        // No kernel log (a container, a test, printk.devkmsg=off): as before.
        assert_eq!(route(log(false, Some(7), false)), console_only);
        assert_eq!(route(log(false, None, true)), console_only);
    }

    /// A kernel in a directory: its log (a plain file), printk and ignore_loglevel.
    fn printed(printk: Option<&str>, kmsg: bool, line: &str) -> (String, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let files = Files {
            kmsg: &dir.path().join("kmsg"),
            printk: &dir.path().join("printk"),
            ignore_loglevel: &dir.path().join("ignore_loglevel"),
        };
        if kmsg {
            std::fs::write(files.kmsg, "").unwrap();
        }
        if let Some(p) = printk {
            std::fs::write(files.printk, p).unwrap();
        }
        let console = RefCell::new(Vec::new());
        files.print(line, |l| console.borrow_mut().push(l.to_string()));
        let logged = std::fs::read_to_string(files.kmsg).unwrap_or_default();
        (logged, console.into_inner())
    }

    #[test]
    fn each_marker_reaches_the_log_and_the_console_once() {
        let line = Marker::ResumeLoaded.line(Some("12 MiB"));
        let (logged, console) = printed(Some("7\t4\t1\t7\n"), true, &line);
        assert_eq!(logged, "<5>snapboot: @resume-loaded 12 MiB\n");
        assert!(console.is_empty(), "{console:?}");
        let (logged, console) = printed(Some("4\t4\t1\t7\n"), true, &line);
        assert_eq!(logged, "<5>snapboot: @resume-loaded 12 MiB\n");
        assert_eq!(console, vec![line.clone()]);
        let (logged, console) = printed(Some("7 4 1 7"), false, &line);
        assert_eq!((logged.as_str(), console), ("", vec![line.clone()]));
        let (logged, console) = printed(None, true, &line);
        assert_eq!((logged.as_str(), console), ("", vec![line]));
    }
}
