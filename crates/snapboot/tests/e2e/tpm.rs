//! End-to-end test of the board's TPM (`--tpm DIR`): both kernels of the PC see a TPM 2.0,
//! and an image captured with it restores with it.

use crate::common::{board_capture, bundle, home, run, snapboot};

/// The probe line of the TPM driver, the stock kernel's and the restore kernel's alike.
const TPM2_PROBED: &str = "tpm_tis MSFT0101:00: 2.0 TPM";

/// The stock kernel sees the TPM in the capture boot, the restore kernel sees it before it
/// restores, and the restored system has `/dev/tpmrm0`; the TPM's state is kept in DIR.
#[test]
fn both_kernels_of_the_pc_see_the_boards_tpm2() {
    crate::restore_kernel::restore_kernel(); // a snapshot boot then restores with it
    let b = bundle("shell");
    let dir = tempfile::tempdir_in(home()).unwrap();
    let tpm = dir.path().join("tpm");
    let store = dir.path().join("tpm.store");
    let tpm_arg = tpm.to_str().unwrap();

    let so = board_capture(&b, &store, &["--tpm", tpm_arg, "--console"]);
    assert!(
        so.contains(TPM2_PROBED),
        "the stock kernel saw no TPM:\n{so}"
    );
    assert!(
        !so.contains("Invalid table length"),
        "the capture boot's ACPI tables were overwritten:\n{so}"
    );
    assert!(
        tpm.join("tpm2-00.permall").is_file(),
        "swtpm keeps the TPM's state in DIR"
    );

    let mut c = snapboot();
    c.args(["board", "run"])
        .arg(&b)
        .arg("--store")
        .arg(&store)
        .args(["--tpm", tpm_arg, "--console"])
        .args(["--probe", "ls /dev/tpmrm0", "--expect", "^/dev/tpmrm0$"]);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "{so}\n{se}");
    let restore = so
        .split_once("-snapboot-restore")
        .unwrap_or_else(|| panic!("not the restore kernel:\n{so}"))
        .1;
    let (before, after) = restore
        .split_once("snapboot: @restored")
        .unwrap_or_else(|| panic!("not restored:\n{so}"));
    assert!(
        before.contains(TPM2_PROBED),
        "the restore kernel saw no TPM:\n{so}"
    );
    assert!(after.contains("probe_answered"), "{so}");
}
