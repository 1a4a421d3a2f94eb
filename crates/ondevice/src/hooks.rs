//! The integrator's hook directories: executables snapboot runs in name order at two moments
//! of a restored system's life, each told which moment it is (`SNAPBOOT_EVENT`).
//!
//! ```text
//! /etc/snapboot/restore.d/*     SNAPBOOT_EVENT=restored    after every restore, before the
//!                                                          `restored` marker (clock stepped,
//!                                                          RNG reseeded): mount data, resync
//! /etc/snapboot/confirmed.d/*   SNAPBOOT_EVENT=confirmed   once the restore is confirmed
//!                               SNAPBOOT_IMAGE, SNAPBOOT_GENERATION, SNAPBOOT_CONFIRMED_BY
//!                                                          (the store's count already reset):
//!                                                          tell the boot loader the boot is
//!                                                          good (`rauc status mark-good`,
//!                                                          `fw_setenv upgrade_available 0`)
//! ```
//!
//! A hook that fails is named on the console (`@hook-failed NAME exited with N`); what it
//! follows stands (the restore, the confirmation). A cold boot runs neither: the
//! distribution's own units do its work there, before any capture.

use crate::guest::print_marker;
use crate::status::BootStatus;
use boottrace::Marker;
use std::path::Path;
use std::process::Command;

/// Executables run in name order after every restore.
pub const RESTORE_DIR: &str = "/etc/snapboot/restore.d";
/// Executables run in name order once a restore is confirmed.
pub const CONFIRMED_DIR: &str = "/etc/snapboot/confirmed.d";

/// The moment a hook runs at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Right after a restore.
    Restored,
    /// The restore was confirmed.
    Confirmed,
}

impl Event {
    /// `SNAPBOOT_EVENT`'s value.
    pub fn word(self) -> &'static str {
        match self {
            Event::Restored => "restored",
            Event::Confirmed => "confirmed",
        }
    }
}

/// Runs the executables in `dir` in name order with `SNAPBOOT_EVENT` and `env`; returns
/// (name, exit status) of each. A missing directory runs nothing.
pub fn run(dir: &Path, event: Event, env: &[(&str, String)]) -> Vec<(String, i32)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<_> = rd.filter_map(Result::ok).map(|e| e.path()).collect();
    paths.sort();
    let mut out = Vec::new();
    for p in paths {
        use std::os::unix::fs::PermissionsExt;
        let exec =
            std::fs::metadata(&p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        if !exec {
            continue;
        }
        let name = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let code = Command::new(&p)
            .env("SNAPBOOT_EVENT", event.word())
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .status()
            .map(|s| s.code().unwrap_or(128))
            .unwrap_or(127);
        if code != 0 {
            print_marker(
                Marker::HookFailed,
                Some(&format!("{name} exited with {code}")),
            );
        }
        out.push((name, code));
    }
    out
}

/// What a confirmed.d hook is told of the confirmed restore `status`, confirmed by `by`.
pub fn confirmed_env(status: &BootStatus, by: &str) -> Vec<(&'static str, String)> {
    let mut env = vec![("SNAPBOOT_CONFIRMED_BY", by.to_string())];
    if let Some(i) = &status.image {
        env.push(("SNAPBOOT_IMAGE", i.name.clone()));
        env.push(("SNAPBOOT_GENERATION", i.generation.to_string()));
    }
    env
}

/// Runs [`CONFIRMED_DIR`] for the confirmed restore `status`; returns how many ran.
pub fn after_confirmation(status: &BootStatus, by: &str) -> usize {
    run(
        Path::new(CONFIRMED_DIR),
        Event::Confirmed,
        &confirmed_env(status, by),
    )
    .len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{ImageRef, Outcome};
    use std::os::unix::fs::PermissionsExt;

    fn hook(dir: &Path, name: &str, body: &str) {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        let mode = if name.contains("not") { 0o644 } else { 0o755 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn hooks_run_in_name_order_and_report_failures() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("log");
        hook(
            d.path(),
            "20-second",
            &format!("echo second >> {}\nexit 3", log.display()),
        );
        hook(
            d.path(),
            "10-first",
            &format!("echo first-$SNAPBOOT_EVENT >> {}", log.display()),
        );
        hook(d.path(), "30-not-executable", "exit 9");
        let ran = run(d.path(), Event::Restored, &[]);
        assert_eq!(
            ran,
            vec![("10-first".to_string(), 0), ("20-second".to_string(), 3)]
        );
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "first-restored\nsecond\n"
        );
        assert!(run(&d.path().join("missing"), Event::Restored, &[]).is_empty());
    }

    #[test]
    fn a_confirmed_hook_is_told_the_image_and_what_confirmed_it() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("log");
        hook(
            d.path(),
            "50-mark-good",
            &format!(
                "echo \"$SNAPBOOT_EVENT $SNAPBOOT_IMAGE $SNAPBOOT_GENERATION \
                 $SNAPBOOT_CONFIRMED_BY\" > {}",
                log.display()
            ),
        );
        let mut s = BootStatus::new(Outcome::Restored, 2, "boot-complete", "6.1.0".into());
        s.image = Some(ImageRef {
            name: "slot-b".into(),
            generation: 7,
        });
        let env = confirmed_env(&s, "boot-complete");
        assert_eq!(run(d.path(), Event::Confirmed, &env).len(), 1);
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "confirmed slot-b 7 boot-complete\n"
        );
    }
}
