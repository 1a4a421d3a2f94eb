//! Each rule against a log that triggers it and one that does not. The logs are the real
//! board captures of boottrace and the dmesg captures in tests/data.

use super::*;
use boottrace::Timeline;

macro_rules! log {
    ($path:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/", $path))
    };
}

const SHELL_COLD: &str = log!("../boottrace/tests/data/shell-cold.log");
const APP_COLD: &str = log!("../boottrace/tests/data/app-cold.log");
const BEAGLE: &str = log!("tests/data/beagle-initcall-debug.log");
const NFSROOT: &str = log!("tests/data/nfsroot-ipconfig.log");
const NO_TIME: &str = log!("tests/data/serial-no-printk-time.log");
const HOST: &str = log!("tests/data/host-dmesg.log");
const RESTORE_STOCK: &str = log!("tests/data/shell-restore-stock-kernel.log");
const RESTORE_RK: &str = log!("tests/data/shell-restore-restore-kernel.log");
const HANDOVER: &str = log!("tests/data/shell-handover.log");
const PM_TIMES: &str = log!("tests/data/shell-restore-pm-times.log");
const RESTORER: &str = log!("tests/data/shell-restorer.log");
const RESTORER_FALLBACK: &str = log!("tests/data/shell-restorer-fallback.log");

fn analyse(text: &str) -> Analysis {
    match Timeline::parse(text) {
        Ok(tl) => Analysis::from_timeline(&tl),
        Err(e) => panic!("unparsable test log: {e}"),
    }
}

fn fires(rule: &str, log: &str, cfg: Option<&KernelConfig>) -> Option<Finding> {
    run_rule(rule, &analyse(log), cfg)
}

fn saving(f: &Option<Finding>) -> f64 {
    f.as_ref().and_then(|f| f.saving_s).unwrap_or(f64::NAN)
}

fn near(x: f64, y: f64, tol: f64) -> bool {
    (x - y).abs() <= tol
}

#[test]
fn lpj_fires_on_calibration_without_preset() {
    let f = fires("lpj", BEAGLE, None);
    assert!(near(saving(&f), 0.2185, 1e-3), "{f:?}");
    assert!(f.as_ref().is_some_and(|f| f.fix.contains("lpj=1867776")));
    // Without printk times the saving is unknown, but the rule still fires.
    let untimed = fires("lpj", NO_TIME, None);
    assert!(untimed.is_some_and(|f| f.saving_s.is_none()));
}

#[test]
fn lpj_silent_when_calibration_is_skipped() {
    assert_eq!(fires("lpj", SHELL_COLD, None), None);
    assert_eq!(fires("lpj", HOST, None), None);
}

#[test]
fn quiet_fires_on_a_chatty_serial_console() {
    let f = fires("quiet", BEAGLE, None);
    let s = saving(&f);
    assert!(s > 0.3 && s < 2.0, "{f:?}");
    // The board's UART is emulated: the rule fires, but promises nothing on this log.
    let board = fires("quiet", SHELL_COLD, None);
    assert!(
        board
            .as_ref()
            .is_some_and(|f| f.evidence.contains("115200 baud")),
        "{board:?}"
    );
    assert!(board.is_some_and(|f| f.saving_s.is_none() && f.evidence.contains("emulated UART")));
}

#[test]
fn quiet_silent_with_quiet_or_without_serial_console() {
    assert_eq!(fires("quiet", HOST, None), None);
    assert_eq!(fires("quiet", NFSROOT, None), None);
}

#[test]
fn ip_autoconfig_fires_on_dhcp() {
    let f = fires("ip_autoconfig", NFSROOT, None);
    assert!(near(saving(&f), 4.931043 - 3.462147, 1e-6), "{f:?}");
    assert!(f.is_some_and(|f| f.evidence.contains("Sending DHCP requests")));
}

#[test]
fn ip_autoconfig_silent_without_it() {
    assert_eq!(fires("ip_autoconfig", SHELL_COLD, None), None);
    assert_eq!(fires("ip_autoconfig", HOST, None), None);
    let off = analyse("[    0.0] Command line: console=ttyS0 ip=off\n");
    assert_eq!(run_rule("ip_autoconfig", &off, None), None);
}

#[test]
fn legacy_ptys_fires_on_pty_init_or_config() {
    let f = fires("legacy_ptys", BEAGLE, None);
    assert!(near(saving(&f), 0.625, 1e-9), "{f:?}");
    let cfg = KernelConfig::parse("CONFIG_LEGACY_PTYS=y\nCONFIG_LEGACY_PTY_COUNT=64\n");
    let f = fires("legacy_ptys", SHELL_COLD, Some(&cfg));
    assert!(f.is_some_and(|f| f.saving_s.is_none() && f.evidence.contains("64 PTYs")));
}

#[test]
fn legacy_ptys_silent_without_them() {
    let cfg = KernelConfig::parse("# CONFIG_LEGACY_PTYS is not set\n");
    assert_eq!(fires("legacy_ptys", SHELL_COLD, Some(&cfg)), None);
    assert_eq!(fires("legacy_ptys", APP_COLD, None), None);
}

#[test]
fn slow_initcalls_lists_the_top_ones() {
    let f = fires("slow_initcalls", BEAGLE, None);
    let Some(f) = f else {
        panic!("slow_initcalls did not fire")
    };
    assert!(
        f.evidence
            .starts_with("serial8250_init 555.4 ms (built-in, pid 1)"),
        "{f:?}"
    );
    assert!(f
        .evidence
        .contains("twl4030_usb_init 35.9 ms (built-in, pid 26)"));
    // pid 26 runs in parallel: not counted.
    let expected = 0.555415 + 0.283690 + 0.0456 + 0.0378;
    assert!(near(f.saving_s.unwrap_or(0.0), expected, 1e-6), "{f:?}");
}

#[test]
fn slow_initcalls_silent_without_initcall_debug() {
    assert_eq!(fires("slow_initcalls", SHELL_COLD, None), None);
    assert_eq!(fires("slow_initcalls", NFSROOT, None), None);
}

#[test]
fn probe_delay_fires_on_rootdelay() {
    let f = fires("probe_delay", BEAGLE, None);
    assert!(near(saving(&f), 4.501983 - 2.494537, 1e-6), "{f:?}");
    let only_cmdline = analyse("[    0.0] Command line: root=/dev/sda1 rootdelay=5\n");
    let f = run_rule("probe_delay", &only_cmdline, None);
    assert!(near(saving(&f), 5.0, 1e-9), "{f:?}");
}

#[test]
fn probe_delay_silent_without_delay() {
    assert_eq!(fires("probe_delay", SHELL_COLD, None), None);
    assert_eq!(fires("probe_delay", NFSROOT, None), None);
}

#[test]
fn long_gap_fires_on_an_unexplained_silence() {
    let f = fires("long_gap", BEAGLE, None);
    let Some(f) = f else {
        panic!("long_gap did not fire")
    };
    assert!(f.evidence.contains("initcalls running: pty_init"), "{f:?}");
}

#[test]
fn long_gap_silent_on_a_busy_boot() {
    assert_eq!(fires("long_gap", SHELL_COLD, None), None);
    assert_eq!(fires("long_gap", HOST, None), None);
}

#[test]
fn initramfs_unpack_fires_when_slow() {
    let f = fires("initramfs_unpack", BEAGLE, None);
    assert!(near(saving(&f), (0.918731 - 0.308563) * 0.5, 1e-6), "{f:?}");
    let cfg = KernelConfig::parse("CONFIG_INITRAMFS_COMPRESSION_XZ=y\n");
    let f = fires("initramfs_unpack", BEAGLE, Some(&cfg));
    assert!(near(saving(&f), (0.918731 - 0.308563) * 0.8, 1e-6), "{f:?}");
}

#[test]
fn initramfs_unpack_silent_when_fast() {
    assert_eq!(fires("initramfs_unpack", SHELL_COLD, None), None);
    assert_eq!(fires("initramfs_unpack", HOST, None), None);
}

#[test]
fn rootfs_mount_fires_on_journal_recovery() {
    let f = fires("rootfs_mount", BEAGLE, None);
    assert!(near(saving(&f), 4.841766 - 4.501983 - 0.05, 1e-6), "{f:?}");
    assert!(f.is_some_and(|f| f.fix.contains("rootfstype=")));
}

#[test]
fn rootfs_mount_silent_when_fast() {
    assert_eq!(fires("rootfs_mount", SHELL_COLD, None), None);
    assert_eq!(fires("rootfs_mount", NFSROOT, None), None);
    assert_eq!(fires("rootfs_mount", NO_TIME, None), None);
}

#[test]
fn kernel_compression_fires_on_xz() {
    let cfg = KernelConfig::parse("CONFIG_KERNEL_XZ=y\n");
    let f = fires("kernel_compression", SHELL_COLD, Some(&cfg));
    assert!(f.is_some_and(|f| f.title.contains("xz")));
}

#[test]
fn kernel_compression_silent_on_lz4_or_no_config() {
    let cfg = KernelConfig::parse("CONFIG_KERNEL_LZ4=y\n");
    assert_eq!(fires("kernel_compression", SHELL_COLD, Some(&cfg)), None);
    assert_eq!(fires("kernel_compression", SHELL_COLD, None), None);
}

#[test]
fn snapshot_gain_fires_on_a_slow_app() {
    let f = fires("snapshot_gain", APP_COLD, None);
    let s = saving(&f);
    assert!(s > 25.0 && s < 27.5, "{f:?}");
    assert!(f.is_some_and(|f| f.evidence.contains("~230 MB")));
}

#[test]
fn snapshot_gain_silent_on_a_fast_shell_or_a_panic() {
    assert_eq!(fires("snapshot_gain", SHELL_COLD, None), None);
    assert_eq!(
        fires(
            "snapshot_gain",
            log!("../boottrace/tests/data/panic.log"),
            None
        ),
        None
    );
    assert_eq!(fires("snapshot_gain", HOST, None), None);
}

#[test]
fn advise_sorts_by_saving_and_names_known_rules() {
    let findings = advise(&analyse(BEAGLE), None);
    assert!(findings.len() >= 7, "{findings:#?}");
    assert!(findings.iter().all(|f| RULES.contains(&f.rule.as_str())));
    let savings: Vec<f64> = findings
        .iter()
        .map(|f| f.saving_s.unwrap_or(-1.0))
        .collect();
    assert!(savings.windows(2).all(|w| w[0] >= w[1]), "{savings:?}");
    assert!(total_saving(&findings) > 3.0);
    assert_eq!(run_rule("no_such_rule", &analyse(BEAGLE), None), None);
}

#[test]
fn rule_names_match_the_rule_table() {
    let names: Vec<&str> = ALL.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, RULES);
}

#[test]
fn restore_kernel_fires_on_a_restore_by_the_distribution_kernel() {
    let f = fires("restore_kernel", RESTORE_STOCK, None).expect("fires");
    // This log: kernel start 0.221 s, `@resume-start` 2.731 s: 2.51 s, of which 67% saved.
    assert!(near(f.saving_s.unwrap(), 1.682, 0.01), "{f:?}");
    assert!(f.evidence.contains("6.1.0-56-amd64"), "{}", f.evidence);
    // Not on a restore by the restore kernel, nor on a cold boot.
    assert_eq!(fires("restore_kernel", RESTORE_RK, None), None);
    assert_eq!(fires("restore_kernel", SHELL_COLD, None), None);
}

#[test]
fn handover_names_the_reason_and_the_time_lost() {
    let f = fires("handover", HANDOVER, None).expect("fires");
    assert!(
        f.evidence.contains("no snapboot image in the store"),
        "{}",
        f.evidence
    );
    // Restore kernel start (0.32 s) to the stock kernel's banner (9.06 s).
    assert!(near(f.saving_s.unwrap(), 8.739, 0.01), "{f:?}");
    assert_eq!(fires("handover", RESTORE_RK, None), None);
    assert_eq!(fires("handover", SHELL_COLD, None), None);
}

#[test]
fn a_refusal_of_the_restorer_names_the_reason_and_the_time_lost() {
    let f = fires("restorer_refused", RESTORER_FALLBACK, None).expect("fires");
    assert!(
        f.evidence.contains("image's e820 checksum 0xb9b0357f"),
        "{}",
        f.evidence
    );
    // The restorer's start (0.218 s) to the stock kernel's (0.627 s).
    assert!(near(f.saving_s.unwrap(), 0.409, 0.002), "{f:?}");
    assert_eq!(fires("restorer_refused", RESTORER, None), None);
    assert_eq!(fires("handover", RESTORER_FALLBACK, None), None);
}

#[test]
fn slow_device_restore_names_the_slowest_devices_of_a_pm_times_image() {
    // A restore-kernel boot of an image captured with `snapboot.pmtimes`.
    let a = analyse(PM_TIMES);
    let by = crate::devpm::restore_by_device(&a.device_pm);
    assert_eq!(by.len(), 28, "{by:?}");
    assert_eq!(by[0].who, "virtio-pci 0000:00:01.0");
    assert_eq!(by[0].callbacks, ["pci_pm_restore_noirq", "pci_pm_restore"]);
    assert!(near(by[0].duration, 0.078644, 1e-6), "{:?}", by[0]);
    // The capture's freeze lines, still in the image's log buffer, are not the restore.
    assert!(a.device_pm.iter().any(|c| c.callback == "pci_pm_freeze"));
    assert!(by
        .iter()
        .all(|d| d.callbacks.iter().all(|c| !c.contains("freeze"))));
    let f = fires("slow_device_restore", PM_TIMES, None).expect("fires");
    assert!(
        f.evidence.starts_with("virtio-pci 0000:00:01.0 78.6 ms"),
        "{}",
        f.evidence
    );
    // The callbacks overlap: the saving is bounded by the restore's first-to-last span.
    let span = crate::devpm::restore_span(&a.device_pm).unwrap();
    assert!(near(span, 0.141826, 1e-5), "{span}");
    assert!(near(saving(&Some(f)), span, 1e-9));
    // Silent without pm_print_times lines.
    assert_eq!(fires("slow_device_restore", RESTORE_RK, None), None);
    assert_eq!(fires("slow_device_restore", SHELL_COLD, None), None);
}
