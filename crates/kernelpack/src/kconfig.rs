//! A kernel configuration's lines (a whole `.config` or a fragment given to
//! `KCONFIG_ALLCONFIG`), without `std`: the one reading of them for every crate. The device
//! checks its kernel's `.config` with it (`kernelcheck::config`), the board checks a
//! restore kernel's `.config` against its fragment and reads the uts version's words.
//!
//! ```text
//! CONFIG_HIBERNATION=y                 Yes
//! CONFIG_SQUASHFS=m                    Module
//! # CONFIG_MODULES is not set          NotSet
//! CONFIG_MODULES=n                     NotSet (how a fragment says it; Kconfig reads it so)
//! CONFIG_LOCALVERSION="-snap"          Str("-snap"): quotes removed, escapes kept
//! CONFIG_LOG_BUF_SHIFT=17              Number("17"), as written (decimal or 0x hex)
//! ```
//!
//! Every other line (comments, blank lines, names without `CONFIG_`) is not a setting.
//! Lines are trimmed first. Names are given without their `CONFIG_` prefix.

use core::fmt;

/// One option's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// Built in (`=y`).
    Yes,
    /// Built as a module (`=m`).
    Module,
    /// Off (`# CONFIG_X is not set`, or `=n` in a fragment).
    NotSet,
    /// A quoted string, without its quotes.
    Str(&'a str),
    /// Anything else unquoted: a decimal or hex number, as written.
    Number(&'a str),
}

impl fmt::Display for Value<'_> {
    /// The value as a fragment writes it: `y`, `m`, `n`, `"string"`, `17`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Yes => f.write_str("y"),
            Value::Module => f.write_str("m"),
            Value::NotSet => f.write_str("n"),
            Value::Str(s) => write!(f, "\"{s}\""),
            Value::Number(n) => f.write_str(n),
        }
    }
}

/// One setting: an option's name (without `CONFIG_`) and value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting<'a> {
    /// The name without `CONFIG_` (`HIBERNATION`).
    pub name: &'a str,
    /// Its value.
    pub value: Value<'a>,
}

/// The setting on one line, if it holds one (see the module's table).
pub fn setting(line: &str) -> Option<Setting<'_>> {
    let line = line.trim();
    if let Some(rest) = line.strip_prefix("# CONFIG_") {
        let name = rest.strip_suffix(" is not set")?;
        return Some(Setting {
            name,
            value: Value::NotSet,
        });
    }
    let (name, value) = line.strip_prefix("CONFIG_")?.split_once('=')?;
    let value = match value {
        "y" => Value::Yes,
        "m" => Value::Module,
        "n" => Value::NotSet,
        v => match v.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
            Some(s) => Value::Str(s),
            None => Value::Number(v),
        },
    };
    Some(Setting { name, value })
}

/// The settings of a `.config` or fragment, in order (a name set twice: the last counts,
/// as with Kconfig).
pub fn settings(text: &str) -> impl Iterator<Item = Setting<'_>> {
    text.lines().filter_map(setting)
}

/// The value `text` gives `name` (without `CONFIG_`): its last setting.
pub fn value<'a>(text: &'a str, name: &str) -> Option<Value<'a>> {
    settings(text)
        .filter(|s| s.name == name)
        .last()
        .map(|s| s.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "\
# Automatically generated file; DO NOT EDIT.
CONFIG_LOCALVERSION=\"-snap\"
CONFIG_LOG_BUF_SHIFT=17
CONFIG_PHYSICAL_START=0x1000000
  CONFIG_HIBERNATION=y
# CONFIG_SECURITY_LOCKDOWN_LSM is not set
CONFIG_SQUASHFS=m
CONFIG_MODULES=n
CONFIG_CMDLINE=\"a \\\"b\\\" c\"
# CONFIG_FOO is set somehow
# a comment
X=1
CONFIG_NO_VALUE

CONFIG_SQUASHFS=y
";

    #[test]
    fn every_kind_of_line_reads_as_its_value() {
        let s: Vec<_> = settings(CONFIG).map(|s| (s.name, s.value)).collect();
        assert_eq!(
            s,
            [
                ("LOCALVERSION", Value::Str("-snap")),
                ("LOG_BUF_SHIFT", Value::Number("17")),
                ("PHYSICAL_START", Value::Number("0x1000000")),
                ("HIBERNATION", Value::Yes),
                ("SECURITY_LOCKDOWN_LSM", Value::NotSet),
                ("SQUASHFS", Value::Module),
                ("MODULES", Value::NotSet),
                ("CMDLINE", Value::Str("a \\\"b\\\" c")),
                ("SQUASHFS", Value::Yes),
            ]
        );
    }

    #[test]
    fn the_last_setting_of_a_name_counts() {
        assert_eq!(value(CONFIG, "SQUASHFS"), Some(Value::Yes));
        assert_eq!(value(CONFIG, "MODULES"), Some(Value::NotSet));
        assert_eq!(value(CONFIG, "NOPE"), None);
        assert_eq!(
            value(CONFIG, "CONFIG_HIBERNATION"),
            None,
            "names without CONFIG_"
        );
    }

    #[test]
    fn values_show_as_a_fragment_writes_them() {
        let shown: Vec<_> = settings(CONFIG).map(|s| s.value.to_string()).collect();
        assert_eq!(
            shown,
            [
                "\"-snap\"",
                "17",
                "0x1000000",
                "y",
                "n",
                "m",
                "n",
                "\"a \\\"b\\\" c\"",
                "y"
            ]
        );
    }
}
