//! Exit statuses of every snapboot command, host and device, in one table so that no two
//! mean different things. `--help` lists them ([`EXIT_HELP`]).

use std::process::ExitCode;

/// What a command's exit status says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done.
    Success,
    /// The command could not do what was asked; the reason is on stderr.
    Failed,
    /// The arguments do not parse (clap's status).
    Usage,
    /// `resume --before-udev`: the restore waits for udev; the boot script tries again
    /// after it (initramfs-tools' scripts test for this value).
    AfterUdev,
    /// `resume`: nothing was restored; the cold boot continues (reason: the `fallback`
    /// marker).
    NotRestored,
    /// `image inspect`, `store fsck`: damage found; `memory add`: not all memory came online.
    Damaged,
    /// `board run`, `trace`: the board ran but did not come up usable; `bench endurance`: a
    /// restore failed (fell back, hung, or answered wrong).
    NotUsable,
    /// `check`, `check-kernel`: the kernel lacks something snapshot boot needs, or (`check`)
    /// its lockdown or the command line disables hibernation.
    Blocked,
}

impl Exit {
    /// Every status, in `--help` order.
    pub const ALL: [Exit; 8] = [
        Exit::Success,
        Exit::Failed,
        Exit::Usage,
        Exit::AfterUdev,
        Exit::NotRestored,
        Exit::Damaged,
        Exit::NotUsable,
        Exit::Blocked,
    ];

    /// The number.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::AfterUdev => ondevice::boot::EXIT_AFTER_UDEV,
            Exit::NotRestored => ondevice::boot::EXIT_NOT_RESTORED,
            Exit::Damaged => 5,
            Exit::NotUsable => 6,
            Exit::Blocked => 7,
        }
    }

    /// One line for `--help`.
    pub fn meaning(self) -> &'static str {
        match self {
            Exit::Success => "done",
            Exit::Failed => "failed; the reason is on stderr",
            Exit::Usage => "bad arguments",
            Exit::AfterUdev => "resume --before-udev: restore after udev instead",
            Exit::NotRestored => {
                "resume, status: nothing restored, the boot is cold (see the fallback marker)"
            }
            Exit::Damaged => "image inspect, store fsck: damage found; memory add: memory missing",
            Exit::NotUsable => {
                "board run, trace: the board did not come up usable; bench endurance: a \
                 restore failed"
            }
            Exit::Blocked => {
                "check, check-kernel: the kernel cannot snapshot-boot (see BLOCKER lines)"
            }
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

/// The exit statuses as `--help` lists them.
pub const EXIT_HELP: &str = "\
Exit status:
  0  done
  1  failed; the reason is on stderr
  2  bad arguments
  3  resume --before-udev: restore after udev instead
  4  resume, status: nothing restored, the boot is cold (see the fallback marker)
  5  image inspect, store fsck: damage found; memory add: memory missing
  6  board run, trace: the board did not come up usable; bench endurance: a restore failed
  7  check, check-kernel: the kernel cannot snapshot-boot (see BLOCKER lines)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_its_own_number_and_help_lists_each() {
        let mut codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), Exit::ALL.len(), "two statuses share a number");
        let lines: Vec<&str> = EXIT_HELP.lines().skip(1).collect();
        assert_eq!(lines.len(), Exit::ALL.len());
        for (e, line) in Exit::ALL.iter().zip(lines) {
            assert_eq!(line, format!("  {}  {}", e.code(), e.meaning()), "{e:?}");
        }
    }

    /// The initramfs script that runs `resume --before-udev` tries again after udev on
    /// exactly [`Exit::AfterUdev`]'s status.
    #[test]
    fn the_init_script_tests_for_the_after_udev_status() {
        let after_udev = Exit::AfterUdev.code();
        let test = format!("[ $? -eq {after_udev} ] || ");
        assert!(devinstall::install::INIT_MARKER.contains(&test));
    }
}
