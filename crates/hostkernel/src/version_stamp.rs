//! The uts version (`uname -v`) a kernel build stamps into itself, taken apart so that a
//! restore kernel can be built with a stock kernel's. arm64 refuses to restore an image whose
//! header's uts version differs from the restoring kernel's (arch/arm64/kernel/hibernate.c
//! copies `init_utsname()->version` into the header and compares it byte for byte); x86_64
//! has no such check.
//!
//! Linux 6.1's init/Makefile writes `UTS_VERSION` as
//!
//! ```text
//! #<build> [SMP] [PREEMPT | PREEMPT_DYNAMIC | PREEMPT_RT] <timestamp>      (cut to 64 bytes)
//! ```
//!
//! `<build>` is `KBUILD_BUILD_VERSION` (else a counter), `<timestamp>` is
//! `KBUILD_BUILD_VERSION_TIMESTAMP`, else `KBUILD_BUILD_TIMESTAMP`, else `date`, and the words
//! between come from the configuration: `SMP` from `CONFIG_SMP`, then one preemption word,
//! the last of `CONFIG_PREEMPT_BUILD`, `CONFIG_PREEMPT_DYNAMIC`, `CONFIG_PREEMPT_RT` that is set.
//! The two values a build can be given are therefore read off a stock kernel's version, and
//! the words are checked against the restore kernel's configuration before it is compiled.

use kernelpack::kconfig::{self, Value};
use thiserror::Error;

/// The longest `UTS_VERSION` init/Makefile writes (it cuts the rest).
pub const MAX_UTS_VERSION: usize = 64;

/// The configuration words a uts version can carry, in the order they appear.
const WORDS: [&str; 4] = ["SMP", "PREEMPT", "PREEMPT_DYNAMIC", "PREEMPT_RT"];

/// A uts version taken apart: `#1 SMP Debian 6.1.192-2 (2026-11-16)` is build `1`, words
/// `SMP`, timestamp `Debian 6.1.192-2 (2026-11-16)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionStamp {
    /// `KBUILD_BUILD_VERSION`.
    pub build: String,
    /// The configuration's words (`SMP`, a preemption word), space-separated; may be empty.
    pub words: String,
    /// `KBUILD_BUILD_TIMESTAMP`.
    pub timestamp: String,
}

/// A uts version that no build can reproduce.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StampError {
    /// It does not start with `#<build> `.
    #[error("uts version {0:?} does not start with `#<build number> `")]
    NoBuild(String),
    /// Nothing follows the words.
    #[error("uts version {0:?} has no timestamp after its build number and words")]
    NoTimestamp(String),
    /// It is as long as init/Makefile's cut: the original may have been longer.
    #[error("uts version {version:?} is {len} bytes, the kernel's limit ({MAX_UTS_VERSION}): it may be cut")]
    MaybeCut {
        /// The version.
        version: String,
        /// Its length.
        len: usize,
    },
}

/// The configuration gives other words than the stock kernel's uts version has.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "the restore kernel's configuration gives the uts version words {config:?}, the stock \
     kernel's version has {stock:?} (set CONFIG_SMP / the preemption model to match)"
)]
pub struct WordsMismatch {
    /// Words of the restore kernel's configuration.
    pub config: String,
    /// Words of the stock kernel's uts version.
    pub stock: String,
}

/// A built kernel's uts version is not the stock kernel's.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("the restore kernel's uts version is {built:?}, the stock kernel's {stock:?}: an arm64 kernel refuses to restore images across different versions")]
pub struct VersionMismatch {
    /// The built kernel's (empty when its banner could not be read).
    pub built: String,
    /// The stock kernel's.
    pub stock: String,
}

impl VersionStamp {
    /// Takes a uts version apart.
    pub fn parse(version: &str) -> Result<Self, StampError> {
        if version.len() >= MAX_UTS_VERSION {
            return Err(StampError::MaybeCut {
                version: version.into(),
                len: version.len(),
            });
        }
        let rest = version
            .strip_prefix('#')
            .ok_or_else(|| StampError::NoBuild(version.into()))?;
        let (build, mut rest) = rest
            .split_once(' ')
            .filter(|(b, _)| !b.is_empty())
            .ok_or_else(|| StampError::NoBuild(version.into()))?;
        let mut words = Vec::new();
        while let Some((word, after)) = rest.split_once(' ') {
            if !WORDS.contains(&word) {
                break;
            }
            words.push(word);
            rest = after;
        }
        if rest.is_empty() || WORDS.contains(&rest) {
            return Err(StampError::NoTimestamp(version.into()));
        }
        Ok(Self {
            build: build.into(),
            words: words.join(" "),
            timestamp: rest.into(),
        })
    }

    /// The words a kernel configuration (`.config` text) puts in its uts version.
    pub fn config_words(config: &str) -> String {
        let set = |name: &str| kconfig::value(config, name) == Some(Value::Yes);
        let preempt = [
            ("PREEMPT_RT", "PREEMPT_RT"),
            ("PREEMPT_DYNAMIC", "PREEMPT_DYNAMIC"),
            ("PREEMPT_BUILD", "PREEMPT"),
        ]
        .into_iter()
        .find(|(name, _)| set(name))
        .map(|(_, word)| word);
        set("SMP")
            .then_some("SMP")
            .into_iter()
            .chain(preempt)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Checks that a kernel built with `config` gets this stamp's words.
    pub fn check_config(&self, config: &str) -> Result<(), WordsMismatch> {
        let words = Self::config_words(config);
        if words == self.words {
            Ok(())
        } else {
            Err(WordsMismatch {
                config: words,
                stock: self.words.clone(),
            })
        }
    }

    /// The `make` variables that stamp a build with this version (the words come from the
    /// configuration; `KBUILD_BUILD_VERSION_TIMESTAMP`, which would win, is to be unset).
    pub fn make_vars(&self) -> [(&'static str, &str); 2] {
        [
            ("KBUILD_BUILD_VERSION", &self.build),
            ("KBUILD_BUILD_TIMESTAMP", &self.timestamp),
        ]
    }
}

/// Checks that the built kernel's uts version (`None`: its banner could not be read) is the
/// stock kernel's.
pub fn check_built(built: Option<&str>, stock: &str) -> Result<(), VersionMismatch> {
    if built == Some(stock) {
        Ok(())
    } else {
        Err(VersionMismatch {
            built: built.unwrap_or_default().into(),
            stock: stock.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_debian_version_gives_the_build_number_and_the_timestamp() {
        let s = VersionStamp::parse("#1 SMP Debian 6.1.192-2 (2026-11-16)").unwrap();
        assert_eq!(
            s,
            VersionStamp {
                build: "1".into(),
                words: "SMP".into(),
                timestamp: "Debian 6.1.192-2 (2026-11-16)".into()
            }
        );
        assert_eq!(
            s.make_vars(),
            [
                ("KBUILD_BUILD_VERSION", "1"),
                ("KBUILD_BUILD_TIMESTAMP", "Debian 6.1.192-2 (2026-11-16)")
            ]
        );
        let x86 = VersionStamp::parse("#1 SMP PREEMPT_DYNAMIC Debian 6.1.192-2 (2026-11-16)");
        assert_eq!(x86.unwrap().words, "SMP PREEMPT_DYNAMIC");
        let bare = VersionStamp::parse("#42 Tue Nov 25 15:00:00 UTC 2026").unwrap();
        assert_eq!((bare.build.as_str(), bare.words.as_str()), ("42", ""));
        assert_eq!(bare.timestamp, "Tue Nov 25 15:00:00 UTC 2026");
    }

    #[test]
    fn versions_no_build_can_reproduce_are_refused_with_the_reason() {
        for (v, want) in [
            ("1 SMP Debian", StampError::NoBuild("1 SMP Debian".into())),
            ("# SMP Debian", StampError::NoBuild("# SMP Debian".into())),
            ("#1 SMP", StampError::NoTimestamp("#1 SMP".into())),
            (
                "#1 SMP PREEMPT",
                StampError::NoTimestamp("#1 SMP PREEMPT".into()),
            ),
        ] {
            assert_eq!(VersionStamp::parse(v), Err(want), "{v}");
        }
        let long = format!("#1 SMP {}", "x".repeat(57));
        assert_eq!(
            VersionStamp::parse(&long).unwrap_err().to_string(),
            format!("uts version {long:?} is 64 bytes, the kernel's limit (64): it may be cut")
        );
    }

    #[test]
    fn the_configuration_words_follow_init_makefile() {
        let words = VersionStamp::config_words;
        assert_eq!(words("CONFIG_SMP=y\nCONFIG_PREEMPT_VOLUNTARY=y\n"), "SMP");
        assert_eq!(words("# CONFIG_SMP is not set\n"), "");
        assert_eq!(
            words("CONFIG_SMP=y\nCONFIG_PREEMPT_BUILD=y\nCONFIG_PREEMPT_DYNAMIC=y\n"),
            "SMP PREEMPT_DYNAMIC",
            "the later flag wins"
        );
        assert_eq!(words("CONFIG_PREEMPT_BUILD=y\n"), "PREEMPT");
        assert_eq!(
            words("CONFIG_PREEMPT_BUILD=y\nCONFIG_PREEMPT_RT=y\n"),
            "PREEMPT_RT"
        );
    }

    #[test]
    fn a_configuration_without_smp_is_refused_for_an_smp_stock_kernel() {
        let s = VersionStamp::parse("#1 SMP Debian 6.1.192-2 (2026-11-16)").unwrap();
        assert_eq!(s.check_config("CONFIG_SMP=y\n"), Ok(()));
        let err = s.check_config("# CONFIG_SMP is not set\n").unwrap_err();
        assert_eq!((err.config.as_str(), err.stock.as_str()), ("", "SMP"));
    }

    #[test]
    fn the_built_version_must_equal_the_stock_one() {
        let stock = "#1 SMP Debian 6.1.192-2 (2026-11-16)";
        assert_eq!(check_built(Some(stock), stock), Ok(()));
        let err = check_built(Some("#1 SMP Tue Nov 25 15:00:00 UTC 2026"), stock).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the restore kernel's uts version is \"#1 SMP Tue Nov 25 15:00:00 UTC 2026\", the \
             stock kernel's \"#1 SMP Debian 6.1.192-2 (2026-11-16)\": an arm64 kernel refuses \
             to restore images across different versions"
        );
        assert_eq!(check_built(None, stock).unwrap_err().built, "");
    }
}
