//! Whether the system's block devices are still appearing, for a search that has found
//! nothing yet: what each look saw ([`Look`]) and, over the looks so far, whether to look
//! again or to say the address names no device ([`absent`]). A pure function of the looks,
//! so the rule is tested without a kernel; `locate` takes the looks.
//!
//! The rule: the search waits only while devices may still come, and never past its limit:
//!
//! ```text
//! no block device listed yet .................................. look again (a driver probes)
//! the list, or the kernel's uevent count, changed < SETTLED ago  look again (disks appearing)
//! udev has events queued (/run/udev/queue) .................... look again
//! the same devices, no uevent, udev idle for SETTLED ........... absent now: the disks are
//!                                                                 there and none has it
//! the limit reached ........................................... absent, waited the limit
//! ```
//!
//! A driver that registers its disk long after it was loaded, with nothing in between (USB
//! storage waits a second before it scans; a disk whose controller resets), cannot be told
//! from no disk: its store is reported absent, and the boot goes on cold. Such a store is
//! restored after udev (`snapboot.afterudev`).

use std::time::Duration;

/// How long the block devices must stay as they are (the same list, no uevent, udev idle)
/// before an address none of them has is reported absent.
pub const SETTLED: Duration = Duration::from_millis(100);

/// What one look at the block devices saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Look {
    /// When, from the start of the search.
    pub at: Duration,
    /// Every block device listed (`/sys/class/block`), sorted.
    pub devices: Vec<String>,
    /// The kernel's uevent count (`/sys/kernel/uevent_seqnum`): it moves whenever a device
    /// is added. `None` where it cannot be read.
    pub uevents: Option<u64>,
    /// Whether udev has events it has not handled yet (`/run/udev/queue` exists).
    pub udev_busy: bool,
}

/// Why an address names no device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absence {
    /// The block devices are there and stopped changing: none has it.
    Settled {
        /// How many block devices were listed.
        devices: usize,
        /// How long they had been as they are.
        quiet: Duration,
    },
    /// Devices were still appearing (or none was listed) until the limit.
    Waited {
        /// The limit.
        waited: Duration,
    },
}

/// How long the last look's devices have been as they are: the same list and uevent count
/// at every look since, udev idle at each. Zero with fewer than two such looks.
pub fn quiet_for(looks: &[Look]) -> Duration {
    let Some(last) = looks.last() else {
        return Duration::ZERO;
    };
    let same = |l: &Look| !l.udev_busy && l.devices == last.devices && l.uevents == last.uevents;
    let since = looks
        .iter()
        .rev()
        .take_while(|l| same(l))
        .last()
        .map_or(last.at, |l| l.at);
    last.at.saturating_sub(since)
}

/// After `looks` (oldest first) found no device with the address: `None` to look again,
/// or why it is absent. `limit` bounds the wait.
pub fn absent(looks: &[Look], limit: Duration) -> Option<Absence> {
    let last = looks.last()?;
    let quiet = quiet_for(looks);
    if !last.devices.is_empty() && quiet >= SETTLED {
        return Some(Absence::Settled {
            devices: last.devices.len(),
            quiet,
        });
    }
    (last.at >= limit).then_some(Absence::Waited { waited: limit })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(2);

    fn look(ms: u64, devices: &[&str], uevents: u64) -> Look {
        Look {
            at: Duration::from_millis(ms),
            devices: devices.iter().map(|d| d.to_string()).collect(),
            uevents: Some(uevents),
            udev_busy: false,
        }
    }

    /// Looks every 20 ms from `from` to `to` with the same devices and uevent count.
    fn steady(from: u64, to: u64, devices: &[&str], uevents: u64) -> Vec<Look> {
        (from..=to)
            .step_by(20)
            .map(|ms| look(ms, devices, uevents))
            .collect()
    }

    #[test]
    fn disks_that_are_there_and_stay_as_they_are_are_searched_once_settled() {
        let looks = steady(0, 80, &["vda", "vdb"], 7);
        assert_eq!(
            absent(&looks, LIMIT),
            None,
            "80 ms quiet is not yet settled"
        );
        let looks = steady(0, 100, &["vda", "vdb"], 7);
        assert_eq!(
            absent(&looks, LIMIT),
            Some(Absence::Settled {
                devices: 2,
                quiet: SETTLED
            })
        );
    }

    #[test]
    fn a_disk_appearing_or_a_uevent_starts_the_quiet_time_again() {
        let mut looks = steady(0, 60, &["vda"], 7);
        looks.extend(steady(80, 160, &["vda", "vdb"], 9));
        assert_eq!(quiet_for(&looks), Duration::from_millis(80));
        assert_eq!(absent(&looks, LIMIT), None);
        // The same list, but the kernel added something (a partition table being read).
        let mut looks = steady(0, 60, &["vda"], 7);
        looks.extend(steady(80, 160, &["vda"], 8));
        assert_eq!(absent(&looks, LIMIT), None);
        looks.extend(steady(180, 180, &["vda"], 8));
        assert!(matches!(
            absent(&looks, LIMIT),
            Some(Absence::Settled { devices: 1, .. })
        ));
    }

    #[test]
    fn udev_with_events_queued_is_waited_for() {
        let mut looks = steady(0, 500, &["vda"], 7);
        for l in &mut looks[..20] {
            l.udev_busy = true;
        }
        // Busy until 380 ms: quiet from 400 ms only.
        assert_eq!(quiet_for(&looks), Duration::from_millis(100));
        looks.last_mut().unwrap().udev_busy = true;
        assert_eq!(quiet_for(&looks), Duration::ZERO);
        assert_eq!(absent(&looks, LIMIT), None);
    }

    #[test]
    fn no_disk_at_all_is_waited_for_up_to_the_limit() {
        let looks = steady(0, 1980, &[], 3);
        assert_eq!(absent(&looks, LIMIT), None, "a driver may still probe");
        let looks = steady(0, 2000, &[], 3);
        assert_eq!(
            absent(&looks, LIMIT),
            Some(Absence::Waited { waited: LIMIT })
        );
    }

    #[test]
    fn devices_that_keep_changing_are_waited_for_up_to_the_limit() {
        let looks: Vec<Look> = (0..=100).map(|i| look(i * 20, &["vda"], i)).collect();
        assert_eq!(
            absent(&looks, LIMIT),
            Some(Absence::Waited { waited: LIMIT })
        );
        // A zero limit (a command that does not wait) answers at the first look.
        assert_eq!(
            absent(&[look(0, &["vda"], 1)], Duration::ZERO),
            Some(Absence::Waited {
                waited: Duration::ZERO
            })
        );
    }

    #[test]
    fn an_unreadable_uevent_count_leaves_the_device_list_to_decide() {
        let mut looks = steady(0, 100, &["vda"], 0);
        for l in &mut looks {
            l.uevents = None;
        }
        assert!(matches!(
            absent(&looks, LIMIT),
            Some(Absence::Settled { .. })
        ));
    }
}
