//! Initcalls from `initcall_debug` output. With `initcall_debug` on the command line the
//! kernel prints `calling  pci_subsys_init+0x0/0x6d @ 1` before each initcall and
//! `initcall pci_subsys_init+0x0/0x6d returned 0 after 1234 usecs` after it (module init
//! functions carry a `[module]` suffix, and the `@ N` is the pid that ran it, which the boot
//! graph uses as its row, as bootgraph.pl does). Older kernels printed `... ran for N msecs`.
//! [`InitcallParser`] pairs the two lines and measures each call.

use serde::Serialize;

/// One initcall as measured by `initcall_debug`. Times are on the analysis time axis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Initcall {
    /// Function name without its `+0x0/0x6d` offset, e.g. `pci_subsys_init`.
    pub name: String,
    /// The module it belongs to (`[virtio_blk]` suffix), `None` for built-in code.
    pub module: Option<String>,
    /// The pid that ran it (`@ N`); 0 when the `calling` line is missing.
    pub pid: u32,
    /// When it was called, seconds.
    pub start: f64,
    /// How long it ran, seconds (the kernel's own `after N usecs` measure when available).
    pub duration: f64,
    /// Its return value; `None` if it never returned within the log.
    pub ret: Option<i64>,
}

impl Initcall {
    /// When it returned, seconds.
    pub fn end(&self) -> f64 {
        self.start + self.duration
    }

    /// Whether it is built into the kernel image (not a module).
    pub fn is_builtin(&self) -> bool {
        self.module.is_none()
    }
}

/// The parts of a `calling` line.
#[derive(Debug, Clone, PartialEq)]
struct Calling {
    name: String,
    module: Option<String>,
    pid: u32,
}

/// Strips `+0x0/0x6d` from a symbol; an address-only symbol (`0xc0008000`) is kept.
fn symbol_name(sym: &str) -> String {
    sym.split('+').next().unwrap_or(sym).to_string()
}

/// Takes a leading `[module]` off `rest`.
fn module_suffix(rest: &str) -> (Option<String>, &str) {
    let rest = rest.trim_start();
    if let Some(inner) = rest.strip_prefix('[') {
        if let Some((module, after)) = inner.split_once(']') {
            return (Some(module.to_string()), after);
        }
    }
    (None, rest)
}

/// Parses `calling  NAME+off/len [module] @ PID`.
fn parse_calling(msg: &str) -> Option<Calling> {
    let rest = msg.strip_prefix("calling ")?.trim_start();
    let (sym, rest) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let (module, rest) = module_suffix(rest);
    let pid = rest
        .trim()
        .strip_prefix('@')
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or(0);
    Some(Calling {
        name: symbol_name(sym),
        module,
        pid,
    })
}

/// A parsed `initcall ... returned` line: name, module, return value, duration (seconds).
type Returned = (String, Option<String>, Option<i64>, f64);

/// Parses `initcall NAME+off/len [module] returned R after N usecs` (also `msecs`), and the
/// old `initcall 0xADDR ran for N msecs: NAME+off/len()` form.
fn parse_returned(msg: &str) -> Option<Returned> {
    let rest = msg.strip_prefix("initcall ")?.trim_start();
    let (sym, rest) = rest.split_once(char::is_whitespace)?;
    if let Some(ran) = rest.trim_start().strip_prefix("ran for ") {
        let (n, after) = ran.split_once(' ')?;
        let ms: f64 = n.parse().ok()?;
        let name = after
            .split_once(": ")
            .map_or_else(|| symbol_name(sym), |(_, s)| symbol_name(s));
        return Some((
            name.trim_end_matches("()").to_string(),
            None,
            None,
            ms / 1e3,
        ));
    }
    let (module, rest) = module_suffix(rest);
    let rest = rest.trim_start().strip_prefix("returned ")?;
    let (ret, rest) = rest.split_once(" after ")?;
    let (n, unit) = rest.trim().split_once(' ')?;
    let n: f64 = n.parse().ok()?;
    let scale = match unit.trim() {
        u if u.starts_with("usec") => 1e-6,
        u if u.starts_with("msec") => 1e-3,
        u if u.starts_with("nsec") => 1e-9,
        _ => return None,
    };
    Some((symbol_name(sym), module, ret.trim().parse().ok(), n * scale))
}

/// Pairs `calling` and `returned` lines into [`Initcall`]s. Feed it each line's message
/// (printk prefix removed) with its time, in order, then call [`finish`](Self::finish).
#[derive(Debug, Default)]
pub struct InitcallParser {
    open: Vec<(Calling, f64)>,
    done: Vec<Initcall>,
    last_t: f64,
}

impl InitcallParser {
    /// A parser with nothing seen.
    pub fn new() -> Self {
        Self::default()
    }

    /// Looks at one line; returns whether it was an initcall_debug line.
    pub fn feed(&mut self, t: f64, msg: &str) -> bool {
        self.last_t = self.last_t.max(t);
        if let Some(c) = parse_calling(msg) {
            self.open.push((c, t));
            return true;
        }
        let Some((name, module, ret, duration)) = parse_returned(msg) else {
            return false;
        };
        // The most recent open call of that name (async calls of one name nest rarely).
        let found = self.open.iter().rposition(|(c, _)| c.name == name);
        let call = match found {
            Some(i) => {
                let (c, start) = self.open.remove(i);
                Initcall {
                    module: c.module.or(module),
                    name,
                    pid: c.pid,
                    start,
                    duration,
                    ret,
                }
            }
            None => Initcall {
                name,
                module,
                pid: 0,
                start: (t - duration).max(0.0),
                duration,
                ret,
            },
        };
        self.done.push(call);
        true
    }

    /// The initcalls, sorted by start; calls that never returned run to the last line seen.
    pub fn finish(mut self) -> Vec<Initcall> {
        for (c, start) in self.open.drain(..) {
            self.done.push(Initcall {
                name: c.name,
                module: c.module,
                pid: c.pid,
                start,
                duration: (self.last_t - start).max(0.0),
                ret: None,
            });
        }
        self.done.sort_by(|a, b| a.start.total_cmp(&b.start));
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_calls_with_returns() {
        let mut p = InitcallParser::new();
        assert!(p.feed(0.10, "calling  pci_subsys_init+0x0/0x6d @ 1"));
        assert!(p.feed(
            0.11,
            "calling  virtio_blk_init+0x0/0x1000 [virtio_blk] @ 123"
        ));
        assert!(p.feed(
            0.12,
            "initcall pci_subsys_init+0x0/0x6d returned 0 after 1234 usecs"
        ));
        assert!(p.feed(
            0.20,
            "initcall virtio_blk_init+0x0/0x1000 [virtio_blk] returned -19 after 90 msecs"
        ));
        assert!(!p.feed(0.3, "random: crng init done"));
        assert!(p.feed(0.4, "calling  hangs_forever+0x0/0x10 @ 7"));
        let calls = p.finish();
        assert_eq!(calls.len(), 3);
        assert_eq!(calls[0].name, "pci_subsys_init");
        assert_eq!((calls[0].pid, calls[0].ret), (1, Some(0)));
        assert!((calls[0].duration - 0.001234).abs() < 1e-12);
        assert_eq!(calls[1].module.as_deref(), Some("virtio_blk"));
        assert_eq!((calls[1].pid, calls[1].ret), (123, Some(-19)));
        assert!(!calls[1].is_builtin());
        assert!((calls[1].end() - 0.20).abs() < 1e-9);
        assert_eq!(calls[2].ret, None);
    }

    #[test]
    fn return_without_call_and_old_format() {
        let mut p = InitcallParser::new();
        p.feed(
            1.0,
            "initcall inet_init+0x0/0x1e8 returned 0 after 500000 usecs",
        );
        p.feed(
            2.0,
            "initcall 0xc0012345 ran for 12 msecs: pty_init+0x0/0x1b4()",
        );
        let calls = p.finish();
        assert_eq!(calls[0].name, "inet_init");
        assert!((calls[0].start - 0.5).abs() < 1e-9);
        assert_eq!(calls[0].pid, 0);
        assert_eq!(calls[1].name, "pty_init");
        assert!((calls[1].duration - 0.012).abs() < 1e-12);
    }
}
