//! Turning raw console bytes into timestamped lines. [`LineRecorder`] is fed the chunks read
//! from the board's serial console together with the host time at which each chunk arrived;
//! it splits them into lines, strips carriage returns, ANSI escape sequences and other control
//! characters, decodes UTF-8 lossily, and stamps every line with the host time at which its
//! *first* byte arrived (the semantics of grabserial). Each line's printk timestamp, if any,
//! is parsed into [`ConsoleLine::kernel_ts`].

use serde::{Deserialize, Serialize};

/// Longest line kept in one piece; a longer run of bytes without a newline is split here so
/// that a console spewing binary garbage cannot grow memory without bound.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// One line of console output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsoleLine {
    /// Host time, in seconds since QEMU was started, at which the line's first byte arrived.
    pub t: f64,
    /// The line's text, cleaned of control characters and escape sequences, printk prefix kept.
    pub text: String,
    /// The kernel's own timestamp from a printk prefix such as `[    1.234567] `, in seconds
    /// since the kernel started; `None` for lines without one (user space, firmware).
    #[serde(default)]
    pub kernel_ts: Option<f64>,
}

impl ConsoleLine {
    /// Makes a line stamped at host time `t`, parsing the printk timestamp out of `text`.
    pub fn new(t: f64, text: impl Into<String>) -> Self {
        let text = text.into();
        let kernel_ts = parse_printk_prefix(&text).map(|(ts, _)| ts);
        Self { t, text, kernel_ts }
    }

    /// The text without its printk prefix (the whole text when there is none).
    pub fn message(&self) -> &str {
        parse_printk_prefix(&self.text).map_or(self.text.as_str(), |(_, rest)| rest)
    }
}

/// Parses a printk prefix at the start of `text`: `[    1.234567] `, optionally preceded by a
/// syslog level as `dmesg -r` prints it (`<6>[    1.234567] `) and optionally followed by a
/// caller id (`[    T1] `, with `CONFIG_PRINTK_CALLER`). Returns the timestamp in seconds and
/// the rest of the line after the prefix.
pub fn parse_printk_prefix(text: &str) -> Option<(f64, &str)> {
    let mut s = text;
    if let Some(rest) = s.strip_prefix('<') {
        let (level, after) = rest.split_once('>')?;
        if level.is_empty() || !level.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s = after;
    }
    let rest = s.strip_prefix('[')?;
    let (stamp, mut after) = rest.split_once(']')?;
    let stamp = stamp.trim_start_matches(' ');
    let (secs, frac) = stamp.split_once('.')?;
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if !digits(secs) || !digits(frac) {
        return None;
    }
    let ts: f64 = stamp.parse().ok()?;
    if let Some(r) = after.strip_prefix('[') {
        if let Some((id, a)) = r.split_once(']') {
            let id = id.trim_start_matches(' ');
            let is_caller = id.len() > 1
                && (id.starts_with('T') || id.starts_with('C'))
                && id[1..].bytes().all(|b| b.is_ascii_digit());
            if is_caller {
                after = a;
            }
        }
    }
    Some((ts, after.strip_prefix(' ').unwrap_or(after)))
}

/// Where the recorder is inside an escape sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum EscState {
    /// Plain text.
    #[default]
    Ground,
    /// Just saw ESC.
    Escape,
    /// ESC followed by intermediate bytes (e.g. `ESC ( B`).
    Intermediate,
    /// Control sequence `ESC [ params final`.
    Csi,
    /// String sequence (OSC, DCS, ...) terminated by BEL or `ESC \`.
    Str,
    /// ESC seen inside a string sequence.
    StrEsc,
}

/// Splits a timestamped console byte stream into [`ConsoleLine`]s.
///
/// Blank lines (empty after cleaning) are dropped; trailing whitespace is trimmed.
#[derive(Debug, Default)]
pub struct LineRecorder {
    buf: Vec<u8>,
    start: Option<f64>,
    esc: EscState,
    last_t: Option<f64>,
}

impl LineRecorder {
    /// A recorder with nothing buffered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds a chunk of console bytes that arrived at host time `t` (seconds since QEMU
    /// started) and returns the lines it completed, in order.
    pub fn feed(&mut self, t: f64, bytes: &[u8]) -> Vec<ConsoleLine> {
        self.last_t = Some(t);
        let mut out = Vec::new();
        for &b in bytes {
            if b == b'\n' {
                // A newline ends the line and aborts any unterminated escape sequence.
                self.esc = EscState::Ground;
                out.extend(self.take_line());
                continue;
            }
            if self.start.is_none() {
                self.start = Some(t);
            }
            self.push_byte(b);
            if self.buf.len() >= MAX_LINE_BYTES {
                out.extend(self.take_line());
            }
        }
        out
    }

    /// Flushes a partial last line (one not ended by a newline) at host time `t`, when the
    /// console has closed. Its timestamp is still that of its first byte.
    pub fn finish(&mut self, t: f64) -> Option<ConsoleLine> {
        self.last_t = Some(t);
        self.esc = EscState::Ground;
        self.take_line()
    }

    /// Whether bytes of an unfinished line are buffered.
    pub fn has_partial(&self) -> bool {
        !self.buf.is_empty()
    }

    /// The host time of the latest [`feed`](Self::feed) or [`finish`](Self::finish) call.
    pub fn last_time(&self) -> Option<f64> {
        self.last_t
    }

    fn push_byte(&mut self, b: u8) {
        match self.esc {
            EscState::Ground => match b {
                0x1b => self.esc = EscState::Escape,
                b'\t' => self.buf.push(b),
                0x00..=0x1f | 0x7f => {}
                _ => self.buf.push(b),
            },
            EscState::Escape => {
                self.esc = match b {
                    b'[' => EscState::Csi,
                    b']' | b'P' | b'X' | b'^' | b'_' => EscState::Str,
                    0x20..=0x2f => EscState::Intermediate,
                    0x1b => EscState::Escape,
                    _ => EscState::Ground,
                }
            }
            EscState::Intermediate => match b {
                0x20..=0x2f => {}
                0x30..=0x7e => self.esc = EscState::Ground,
                _ => self.abort_and_reprocess(b),
            },
            EscState::Csi => match b {
                0x20..=0x3f => {}
                0x40..=0x7e => self.esc = EscState::Ground,
                _ => self.abort_and_reprocess(b),
            },
            EscState::Str => match b {
                0x07 => self.esc = EscState::Ground,
                0x1b => self.esc = EscState::StrEsc,
                _ => {}
            },
            EscState::StrEsc => {
                self.esc = if b == b'\\' {
                    EscState::Ground
                } else {
                    EscState::Str
                };
            }
        }
    }

    /// A malformed sequence ends at `b`, which is then handled as plain input.
    fn abort_and_reprocess(&mut self, b: u8) {
        self.esc = EscState::Ground;
        self.push_byte(b);
    }

    fn take_line(&mut self) -> Option<ConsoleLine> {
        let start = self.start.take();
        let raw = std::mem::take(&mut self.buf);
        let text: String = String::from_utf8_lossy(&raw)
            .chars()
            .filter(|c| *c == '\t' || !c.is_control())
            .collect();
        let text = text.trim_end();
        if text.trim_start().is_empty() {
            return None;
        }
        let t = start.or(self.last_t).unwrap_or(0.0);
        Some(ConsoleLine::new(t, text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(lines: &[ConsoleLine]) -> Vec<&str> {
        lines.iter().map(|l| l.text.as_str()).collect()
    }

    #[test]
    fn printk_prefix_variants() {
        assert_eq!(
            parse_printk_prefix("[    1.234567] Run /init as init process"),
            Some((1.234567, "Run /init as init process"))
        );
        assert_eq!(
            parse_printk_prefix("<6>[    1.523339] Run /init"),
            Some((1.523339, "Run /init"))
        );
        assert_eq!(
            parse_printk_prefix("[    2.1] Kernel panic"),
            Some((2.1, "Kernel panic"))
        );
        assert_eq!(
            parse_printk_prefix("[    0.000000][    T0] Linux version"),
            Some((0.0, "Linux version"))
        );
        assert_eq!(parse_printk_prefix("[  OK  ] Started foo"), None);
        assert_eq!(parse_printk_prefix("[1] x"), None);
        assert_eq!(parse_printk_prefix("<x>[ 1.0] y"), None);
        assert_eq!(parse_printk_prefix("plain text"), None);
        assert_eq!(
            parse_printk_prefix("[12345.000001]"),
            Some((12345.000001, ""))
        );
    }

    #[test]
    fn message_strips_prefix() {
        let l = ConsoleLine::new(3.0, "[    1.000000] snapboot: @init");
        assert_eq!(l.kernel_ts, Some(1.0));
        assert_eq!(l.message(), "snapboot: @init");
        let u = ConsoleLine::new(3.0, "hello");
        assert_eq!(u.kernel_ts, None);
        assert_eq!(u.message(), "hello");
    }

    #[test]
    fn line_stamped_with_first_byte_time() {
        let mut r = LineRecorder::new();
        assert!(r.feed(0.5, b"[    0.000000] Linux ver").is_empty());
        assert!(r.has_partial());
        let lines = r.feed(0.9, b"sion 6.1.0\r\n[    0.1");
        assert_eq!(texts(&lines), ["[    0.000000] Linux version 6.1.0"]);
        assert_eq!(lines[0].t, 0.5);
        assert_eq!(lines[0].kernel_ts, Some(0.0));
        let lines = r.feed(1.2, b"00000] next\r\n");
        assert_eq!(lines[0].t, 0.9);
        assert_eq!(lines[0].kernel_ts, Some(0.1));
        assert!(!r.has_partial());
    }

    #[test]
    fn newline_then_idle_stamps_next_line_on_arrival() {
        let mut r = LineRecorder::new();
        assert_eq!(r.feed(1.0, b"a\n").len(), 1);
        let lines = r.feed(5.0, b"b\n");
        assert_eq!(lines[0].t, 5.0);
    }

    #[test]
    fn strips_ansi_and_control() {
        let mut r = LineRecorder::new();
        let input = b"\x1b[0;32m  OK  \x1b[0m Started\x07 \x1b]0;title\x07thing\x1b(B\x08\r\n";
        let lines = r.feed(2.0, input);
        assert_eq!(texts(&lines), ["  OK   Started thing"]);
        // An escape sequence split across chunks.
        let mut r = LineRecorder::new();
        assert!(r.feed(0.0, b"red \x1b[3").is_empty());
        let lines = r.feed(0.1, b"1mtext\x1b[0m\n");
        assert_eq!(texts(&lines), ["red text"]);
        // OSC terminated by ESC backslash.
        let lines = r.feed(0.2, b"a\x1b]2;x\x1b\\b\n");
        assert_eq!(texts(&lines), ["ab"]);
    }

    #[test]
    fn newline_aborts_unterminated_escape() {
        let mut r = LineRecorder::new();
        let lines = r.feed(0.0, b"x\x1b[12\ny\n");
        assert_eq!(texts(&lines), ["x", "y"]);
    }

    #[test]
    fn lossy_utf8_and_split_multibyte() {
        let mut r = LineRecorder::new();
        let s = "Grüße ✓".as_bytes();
        assert!(r.feed(0.0, &s[..3]).is_empty());
        let lines = r.feed(0.1, &[&s[3..], b"\n\xff\xfeok\n"].concat());
        assert_eq!(texts(&lines), ["Grüße ✓", "\u{fffd}\u{fffd}ok"]);
    }

    #[test]
    fn blank_lines_dropped_and_tabs_kept() {
        let mut r = LineRecorder::new();
        let lines = r.feed(0.0, b"\r\n\n  \r\n\ta\tb  \n");
        assert_eq!(texts(&lines), ["\ta\tb"]);
    }

    #[test]
    fn finish_flushes_partial() {
        let mut r = LineRecorder::new();
        assert!(r.feed(3.0, b"login: ").is_empty());
        let l = r.finish(9.0);
        assert_eq!(l.as_ref().map(|l| l.text.as_str()), Some("login:"));
        assert_eq!(l.map(|l| l.t), Some(3.0));
        assert_eq!(r.finish(10.0), None);
        assert_eq!(r.last_time(), Some(10.0));
    }

    #[test]
    fn overlong_line_is_split() {
        let mut r = LineRecorder::new();
        let big = vec![b'x'; MAX_LINE_BYTES + 10];
        let lines = r.feed(0.0, &big);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].text.len(), MAX_LINE_BYTES);
        assert_eq!(r.finish(1.0).map(|l| l.text.len()), Some(10));
    }

    #[test]
    fn serde_roundtrip() {
        let l = ConsoleLine::new(1.5, "[    1.000000] x");
        let json = serde_json::to_string(&l).expect("serialize");
        assert_eq!(
            json,
            r#"{"t":1.5,"text":"[    1.000000] x","kernel_ts":1.0}"#
        );
        let back: ConsoleLine = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back, l);
        let no_ts: ConsoleLine = serde_json::from_str(r#"{"t":1,"text":"x"}"#).expect("default");
        assert_eq!(no_ts.kernel_ts, None);
    }
}
