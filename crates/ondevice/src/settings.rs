//! The device's settings: the config file `/etc/snapboot/snapboot.conf` under the kernel
//! command line ([`bootparams::config`]). Every part of the device that acts on a setting
//! gets it here, so the file and the command line mean the same everywhere.
//!
//! A config file that does not parse is never acted on in part: at power-on nothing is
//! restored and the boot goes on cold with the file's error as the `fallback` reason; at
//! the ready point a capture the command line asks for fails with it (`capture-failed`),
//! and no re-capture or deferred memory follows; `snapboot confirm` and `invalidate`
//! fail with it unless given `--store`.

use bootparams::config::{self, SettingsError, CONFIG_PATH};
use bootparams::BootParams;
use boottrace::error_chain as chain;
use std::path::Path;

/// The settings of this boot, or why they cannot be known.
pub type Settings = Result<BootParams, SettingsError>;

/// The settings in effect now: the config file at [`CONFIG_PATH`] (none is fine) under
/// `/proc/cmdline`.
pub fn load() -> Settings {
    load_from(&devsys::system::kernel_cmdline(), Path::new(CONFIG_PATH))
}

/// The settings of `cmdline` with the config file at `path`.
pub fn load_from(cmdline: &str, path: &Path) -> Settings {
    config::load(cmdline, path).map(|e| e.params)
}

/// Why nothing is done with settings that cannot be known, for the console: a bad config
/// file says that it is not acted on.
pub fn refusal(e: &SettingsError) -> String {
    match e {
        SettingsError::File(_) => format!(
            "{}: a config file that does not parse is not acted on (snapboot config check)",
            chain(e)
        ),
        SettingsError::Cmdline(_) => e.to_string(),
    }
}

/// The settings to record a boot's status with: these, or when they cannot be known the
/// kernel command line's alone (what the status and the store's boot log need; never to
/// restore or capture with).
pub fn for_the_record(settings: &Settings, cmdline: &str) -> BootParams {
    match settings {
        Ok(p) => p.clone(),
        Err(_) => BootParams::parse(cmdline).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_file_is_refused_with_its_line_and_the_record_keeps_the_kernels_words() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("snapboot.conf");
        std::fs::write(&path, "store = /dev/vdb\nstroe = /dev/vdc\n").unwrap();
        let cmdline = "console=ttyS0 snapboot.attempts=4";
        let settings = load_from(cmdline, &path);
        let e = settings.as_ref().unwrap_err();
        assert_eq!(
            refusal(e),
            format!(
                "{}:2: unknown key \"stroe\" (did you mean store?): a config file that does not \
                 parse is not acted on (snapboot config check)",
                path.display()
            )
        );
        let record = for_the_record(&settings, cmdline);
        assert_eq!((record.store, record.attempts), (None, 4));
        // Fixed, the file's store is the device's.
        std::fs::write(&path, "store = /dev/vdb\n").unwrap();
        let p = load_from(cmdline, &path).unwrap();
        assert_eq!(p.store, Some(bootparams::StoreAddress::path("/dev/vdb")));
    }
}
