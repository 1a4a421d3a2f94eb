//! A restore kernel's `.config` compared with the fragment it was made from: what the
//! restore kernel's build checks (`crate::restore_kernel`). The lines are read by
//! [`kernelpack::kconfig`], the one reading of a kernel configuration.

use kernelpack::kconfig::{self, Value};
use std::collections::HashMap;

/// The fragment's settings that `config` does not have, as `CONFIG_X=want (got …)`, in the
/// fragment's order (an option `config` does not name is `n`).
pub fn missing(fragment: &str, config: &str) -> Vec<String> {
    let have: HashMap<&str, Value> = kconfig::settings(config)
        .map(|s| (s.name, s.value))
        .collect();
    kconfig::settings(fragment)
        .filter_map(|want| {
            let got = have.get(want.name).copied().unwrap_or(Value::NotSet);
            (got != want.value).then(|| format!("CONFIG_{}={} (got {got})", want.name, want.value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_names_each_setting_the_config_lacks() {
        let fragment = "CONFIG_A=y\nCONFIG_B=n\nCONFIG_C=0x8000000\nCONFIG_D=y\nCONFIG_E=\"x y\"\n";
        let config = "CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C=0x1000000\nCONFIG_E=\"x\"\n";
        assert_eq!(
            missing(fragment, config),
            [
                "CONFIG_C=0x8000000 (got 0x1000000)",
                "CONFIG_D=y (got n)",
                "CONFIG_E=\"x y\" (got \"x\")"
            ]
        );
        assert!(missing("CONFIG_B=n\n", "").is_empty());
        assert!(
            missing("CONFIG_A=y\n", "CONFIG_A=m\nCONFIG_A=y\n").is_empty(),
            "the last counts"
        );
    }
}
