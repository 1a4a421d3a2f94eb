//! Tests of the kernel-config checks.

use super::*;
use kernelcheck::check::verdict_of as verdict;

/// Boot-time options a fast-booting kernel has (the snapshot requirements are tested with
/// the device's list, `kernelcheck::check`).
const GOOD: &str = "\
CONFIG_PRINTK_TIME=y
CONFIG_KERNEL_LZ4=y
# CONFIG_LEGACY_PTYS is not set
CONFIG_KALLSYMS=y
CONFIG_INITRAMFS_COMPRESSION_GZIP=y
";

#[test]
fn good_boot_time_options_raise_no_warning_but_the_slow_initramfs() {
    let checks = check_kernel(GOOD);
    let boot: Vec<_> = checks
        .iter()
        .filter(|c| c.area == CheckArea::BootTime)
        .collect();
    assert!(
        boot.iter().all(|c| c.verdict != Verdict::Blocker),
        "{boot:#?}"
    );
    assert_eq!(verdict(&checks, "CONFIG_KERNEL_LZ4"), Some(Verdict::Ok));
    assert_eq!(
        verdict(&checks, "CONFIG_INITRAMFS_COMPRESSION_GZIP"),
        Some(Verdict::Warn)
    );
    assert_eq!(verdict(&checks, "CONFIG_LEGACY_PTYS"), Some(Verdict::Ok));
}

#[test]
fn blockers_and_warnings() {
    let checks = check_kernel(
        "# CONFIG_HIBERNATION is not set\nCONFIG_SECURITY_LOCKDOWN_LSM=y\nCONFIG_LOCK_DOWN_KERNEL_FORCE_INTEGRITY=y\nCONFIG_KERNEL_XZ=y\nCONFIG_LEGACY_PTYS=y\nCONFIG_LEGACY_PTY_COUNT=256\nCONFIG_IP_PNP=y\n",
    );
    // The device's requirements come first, then the boot-time advice.
    assert_eq!(
        verdict(&checks, "CONFIG_HIBERNATION"),
        Some(Verdict::Blocker)
    );
    for o in [
        "CONFIG_KERNEL_XZ",
        "CONFIG_LEGACY_PTYS",
        "CONFIG_IP_PNP",
        "CONFIG_PRINTK_TIME",
        "CONFIG_SWAP",
    ] {
        assert_eq!(verdict(&checks, o), Some(Verdict::Warn), "{o}");
    }
    let snapshot = checks.iter().take_while(|c| c.area == CheckArea::Snapshot);
    assert_eq!(
        snapshot.count(),
        kernelcheck::check::requirements(&KernelConfig::parse("")).len(),
        "the device's list, whole"
    );
}

#[test]
fn a_config_that_cannot_be_read_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("none");
    let err = load_config(Some(&missing)).err();
    assert!(matches!(err, Some(AnalyzeError::Config(_))));
    assert!(err.is_some_and(|e| e.to_string().contains("none")));
}

#[test]
fn zram_compressor_and_lzo_kernels_are_reported() {
    let cloud =
        "CONFIG_ZRAM=m\nCONFIG_ZRAM_DEF_COMP_LZORLE=y\nCONFIG_CRYPTO_LZO=m\nCONFIG_KERNEL_LZO=y\n";
    let checks = check_config(&KernelConfig::parse(cloud));
    let find = |o: &str| checks.iter().find(|c| c.option == o).unwrap();
    let z = find("CONFIG_CRYPTO_LZO");
    assert_eq!((z.verdict, z.value.as_str()), (Verdict::Ok, "m"));
    assert!(z.reason.contains("loads lzo_rle"), "{}", z.reason);
    let k = find("CONFIG_KERNEL_LZO");
    assert_eq!(k.verdict, Verdict::Warn);
    assert!(k.reason.contains("extract-vmlinux"), "{}", k.reason);
    let zstd = "CONFIG_ZRAM=m\nCONFIG_ZRAM_DEF_COMP_ZSTD=y\n";
    let checks = check_config(&KernelConfig::parse(zstd));
    let z = checks
        .iter()
        .find(|c| c.option == "CONFIG_CRYPTO_ZSTD")
        .unwrap();
    assert_eq!(z.verdict, Verdict::Warn);
    assert!(z.reason.contains("missing"), "{}", z.reason);
}
