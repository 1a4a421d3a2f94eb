//! The lines the restorer prints on COM1 (crates/restorer: the freestanding program the
//! PC's firmware starts in place of a kernel, which puts an image's pages in place and
//! enters the image kernel). It is `no_std` and a cargo workspace of its own, so it cannot
//! print through [`crate::Marker`]; its lines are recognised here by their fixed prefixes
//! instead, and a test in crate `board` checks that the restorer's source still prints
//! every one of them.
//!
//! | line starts with                       | when                                         |
//! |----------------------------------------|----------------------------------------------|
//! | `snapboot-restorer: started`           | the firmware entered it                      |
//! | `snapboot-restorer: image-refused `    | one image of the store refused; the next is tried (detail: name and reason) |
//! | `snapboot-restorer: image checked`     | every check passed; placing pages begins     |
//! | `snapboot-restorer: ` … `entering the image` | every page placed; the image kernel's resume begins |
//! | `snapboot-restorer: refused: `         | a check failed (detail: the reason)          |
//! | `snapboot-restorer: cold boot: `       | after a refusal, it boots the stock kernel   |

use std::fmt;

/// What every restorer line starts with.
pub const RESTORER_PREFIX: &str = "snapboot-restorer: ";

/// One of the restorer's milestone lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RestorerLine {
    /// `snapboot-restorer: started`: the firmware handed it the machine.
    Started,
    /// `snapboot-restorer: image-refused NAME: REASON`: one image of the store was refused
    /// and the next is tried, as resume does (the milestone of `@image-refused`).
    ImageRefused,
    /// `snapboot-restorer: image checked...`: the image passed every check.
    ImageChecked,
    /// `snapboot-restorer: ... entering the image ...`: every page is in place; it jumps to
    /// the image kernel's restore point.
    Entering,
    /// `snapboot-restorer: refused: REASON`.
    Refused,
    /// `snapboot-restorer: cold boot: ...`: after a refusal, the stock kernel boots cold.
    ColdBoot,
}

impl RestorerLine {
    /// Every line, in the order a boot prints them (after `Started`, any image refusals,
    /// then either the image checked and entered, or a refusal and its cold boot).
    pub const ALL: [RestorerLine; 6] = [
        Self::Started,
        Self::ImageRefused,
        Self::ImageChecked,
        Self::Entering,
        Self::Refused,
        Self::ColdBoot,
    ];

    /// The words that identify the line: after [`RESTORER_PREFIX`] for every line but
    /// [`Entering`](Self::Entering), which ends a longer message with them.
    pub fn words(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::ImageRefused => "image-refused",
            Self::ImageChecked => "image checked",
            Self::Entering => "entering the image",
            Self::Refused => "refused:",
            Self::ColdBoot => "cold boot:",
        }
    }

    /// The restorer line in one console line, and its detail: the reason of a refusal,
    /// the rest of the message of the others (`None` when empty). `None` for any other line.
    pub fn parse(line: &str) -> Option<(RestorerLine, Option<&str>)> {
        let pos = line.find(RESTORER_PREFIX)?;
        let msg = line[pos + RESTORER_PREFIX.len()..].trim_end();
        let kind = Self::ALL
            .into_iter()
            .find(|k| *k != Self::Entering && msg.starts_with(k.words()))
            .or_else(|| {
                msg.contains(Self::Entering.words())
                    .then_some(Self::Entering)
            })?;
        let detail = match kind {
            Self::Started => None,
            Self::Refused | Self::ColdBoot | Self::ImageRefused => {
                nonempty(&msg[kind.words().len()..])
            }
            Self::ImageChecked | Self::Entering => nonempty(msg),
        };
        Some((kind, detail))
    }
}

fn nonempty(s: &str) -> Option<&str> {
    Some(s.trim()).filter(|s| !s.is_empty())
}

impl fmt::Display for RestorerLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{RESTORER_PREFIX}{}", self.words())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines of a restore the restorer printed on the board (2026-11-26, `shell`).
    #[test]
    fn a_restore_s_lines_are_recognised_with_their_details() {
        assert_eq!(
            RestorerLine::parse("snapboot-restorer: started"),
            Some((RestorerLine::Started, None))
        );
        assert_eq!(
            RestorerLine::parse(
                "snapboot-restorer: image checked: 22240 pages (22240 data), e820 0xb9b0357f; \
                 restoring"
            ),
            Some((
                RestorerLine::ImageChecked,
                Some("image checked: 22240 pages (22240 data), e820 0xb9b0357f; restoring")
            ))
        );
        let entering = "snapboot-restorer: 4117 pages deferred, 4143 safe pages; entering the \
                        image at 0xffffffff819d5000";
        assert_eq!(
            RestorerLine::parse(entering).map(|(k, _)| k),
            Some(RestorerLine::Entering)
        );
    }

    #[test]
    fn a_refusal_carries_its_reason_and_the_cold_boot_its_words() {
        assert_eq!(
            RestorerLine::parse(
                "snapboot-restorer: refused: memory map: image's e820 checksum 0xb9b0357f, this \
                 machine's 0x33aa71bf"
            ),
            Some((
                RestorerLine::Refused,
                Some("memory map: image's e820 checksum 0xb9b0357f, this machine's 0x33aa71bf")
            ))
        );
        assert_eq!(
            RestorerLine::parse("snapboot-restorer: cold boot: vmlinuz from the kernel pack"),
            Some((RestorerLine::ColdBoot, Some("vmlinuz from the kernel pack")))
        );
    }

    #[test]
    fn an_image_refused_names_the_image_and_why() {
        assert_eq!(
            RestorerLine::parse("snapboot-restorer: image-refused current: kernel 6.1.0-55-amd64, this one 6.1.0-56-amd64"),
            Some((
                RestorerLine::ImageRefused,
                Some("current: kernel 6.1.0-55-amd64, this one 6.1.0-56-amd64")
            ))
        );
    }

    #[test]
    fn other_lines_and_other_restorer_messages_are_not_milestones() {
        assert_eq!(RestorerLine::parse("snapboot: @restored"), None);
        assert_eq!(
            RestorerLine::parse("[    3.9] PM: restore of devices"),
            None
        );
        assert_eq!(
            RestorerLine::parse("snapboot-restorer: reading the store on /dev/vdb"),
            None
        );
        assert_eq!(
            RestorerLine::parse("snapboot-restorer: cold boot failed: no kernel pack"),
            None
        );
        // A refusal that mentions entering is still a refusal.
        assert_eq!(
            RestorerLine::parse("snapboot-restorer: refused: bug: panicked entering the image")
                .map(|(k, _)| k),
            Some(RestorerLine::Refused)
        );
    }

    #[test]
    fn every_line_displays_as_what_it_recognises() {
        for k in RestorerLine::ALL {
            let shown = format!("{k} x");
            assert_eq!(
                RestorerLine::parse(&shown).map(|(p, _)| p),
                Some(k),
                "{shown}"
            );
        }
    }
}
