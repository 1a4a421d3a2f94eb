//! Exit statuses of every snapboot command, host and device, in one table so that no two
//! mean different things. `--help` lists them: the device binary's ([`DEVICE_EXIT_HELP`])
//! only the statuses of its own commands, the host tool's ([`HOST_EXIT_HELP`]) all.

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
    /// Host: `board run`, `trace`: the board ran but did not come up usable; `bench
    /// endurance`: a restore failed (fell back, hung, or answered wrong).
    NotUsable,
    /// `check`: something this device needs for snapshot boot is missing; host
    /// `check-kernel`: the kernel config lacks something.
    Blocked,
}

/// Which binary's `--help` a status is listed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// The device binary (`snapboot` on the device, the package's /usr/sbin/snapboot).
    Device,
    /// The host tool, which has the device's commands and the board's, benches, analysis.
    Host,
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

    /// One line for `tool`'s `--help`, or `None` when none of its commands exits so.
    pub fn meaning(self, tool: Tool) -> Option<&'static str> {
        Some(match (self, tool) {
            (Exit::Success, _) => "done",
            (Exit::Failed, _) => "failed; the reason is on stderr",
            (Exit::Usage, _) => "bad arguments",
            (Exit::AfterUdev, _) => "resume --before-udev: restore after udev instead",
            (Exit::NotRestored, _) => {
                "resume, status: nothing restored, the boot is cold (see the fallback marker)"
            }
            (Exit::Damaged, _) => {
                "image inspect, store fsck: damage found; memory add: memory missing"
            }
            (Exit::NotUsable, Tool::Device) => return None,
            (Exit::NotUsable, Tool::Host) => {
                "board run, trace: the board did not come up usable; bench endurance: a \
                 restore failed"
            }
            (Exit::Blocked, Tool::Device) => {
                "check: something snapshot boot needs is missing here (see the BLOCKER lines)"
            }
            (Exit::Blocked, Tool::Host) => {
                "check: something snapshot boot needs is missing on the device; check-kernel: \
                 the kernel cannot snapshot-boot (see the BLOCKER lines)"
            }
        })
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

/// The exit statuses as the device binary's `--help` lists them.
pub const DEVICE_EXIT_HELP: &str = "\
Exit status:
  0  done
  1  failed; the reason is on stderr
  2  bad arguments
  3  resume --before-udev: restore after udev instead
  4  resume, status: nothing restored, the boot is cold (see the fallback marker)
  5  image inspect, store fsck: damage found; memory add: memory missing
  7  check: something snapshot boot needs is missing here (see the BLOCKER lines)";

/// The exit statuses as the host tool's `--help` lists them.
pub const HOST_EXIT_HELP: &str = "\
Exit status:
  0  done
  1  failed; the reason is on stderr
  2  bad arguments
  3  resume --before-udev: restore after udev instead
  4  resume, status: nothing restored, the boot is cold (see the fallback marker)
  5  image inspect, store fsck: damage found; memory add: memory missing
  6  board run, trace: the board did not come up usable; bench endurance: a restore failed
  7  check: something snapshot boot needs is missing on the device; check-kernel: the kernel cannot snapshot-boot (see the BLOCKER lines)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_its_own_number_and_each_help_lists_its_own() {
        let mut codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), Exit::ALL.len(), "two statuses share a number");
        for (tool, help) in [
            (Tool::Device, DEVICE_EXIT_HELP),
            (Tool::Host, HOST_EXIT_HELP),
        ] {
            let want: Vec<String> = Exit::ALL
                .iter()
                .filter_map(|e| Some(format!("  {}  {}", e.code(), e.meaning(tool)?)))
                .collect();
            let lines: Vec<&str> = help.lines().skip(1).collect();
            assert_eq!(lines, want, "{tool:?}");
        }
        assert_eq!(HOST_EXIT_HELP.lines().count(), Exit::ALL.len() + 1);
    }

    /// The device binary has none of the host's commands, so its help names none.
    #[test]
    fn the_device_help_names_no_host_command() {
        for host_only in ["board", "bench", "trace", "check-kernel", "analyze"] {
            assert!(!DEVICE_EXIT_HELP.contains(host_only), "{host_only}");
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
