//! A kernel configuration's `CONFIG_X=value` lines, of a fragment or a whole `.config`: read
//! in order, and compared. The restore kernel's build checks its `.config` against its
//! fragment with them (`crate::restore_kernel`), and the uts version's words are read off a
//! configuration with them (`crate::version_stamp`).

/// One `CONFIG_X=value` line of a fragment (`n` for "is not set").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// `CONFIG_X`.
    pub name: String,
    /// `y`, a number, a quoted string, or `n`.
    pub value: String,
}

/// The settings of a fragment or `.config`, in order (`# CONFIG_X is not set` is `n`).
pub fn settings(text: &str) -> Vec<Setting> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            if let Some(name) = l
                .strip_prefix("# ")
                .and_then(|r| r.strip_suffix(" is not set"))
            {
                return Some((name, "n"));
            }
            if l.starts_with('#') {
                return None;
            }
            l.split_once('=')
        })
        .filter(|(name, _)| name.starts_with("CONFIG_"))
        .map(|(name, value)| Setting {
            name: name.to_string(),
            value: value.to_string(),
        })
        .collect()
}

/// The fragment's settings that `config` does not have, as `CONFIG_X=want (got …)`.
pub fn missing(fragment: &str, config: &str) -> Vec<String> {
    let have = settings(config);
    settings(fragment)
        .into_iter()
        .filter_map(|want| {
            let got = have
                .iter()
                .rev()
                .find(|s| s.name == want.name)
                .map(|s| s.value.as_str())
                .unwrap_or("n");
            (got != want.value).then(|| format!("{}={} (got {got})", want.name, want.value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragment_and_config_lines_parse() {
        let s = settings("# a comment\nCONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C=\"x y\"\nX=1\n");
        let names: Vec<_> = s
            .iter()
            .map(|s| (s.name.as_str(), s.value.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("CONFIG_A", "y"),
                ("CONFIG_B", "n"),
                ("CONFIG_C", "\"x y\"")
            ]
        );
    }

    #[test]
    fn missing_names_each_setting_the_config_lacks() {
        let fragment = "CONFIG_A=y\nCONFIG_B=n\nCONFIG_C=0x8000000\nCONFIG_D=y\n";
        let config = "CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C=0x1000000\n";
        assert_eq!(
            missing(fragment, config),
            ["CONFIG_C=0x8000000 (got 0x1000000)", "CONFIG_D=y (got n)"]
        );
        assert!(missing("CONFIG_B=n\n", "").is_empty());
    }
}
