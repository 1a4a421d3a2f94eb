//! Which of `compare`'s methods a run measures: every method works on every built-in
//! workload; a method a workload or the host cannot support is left out before anything
//! boots, with a note for the table and the JSON report, never waited for.

use std::path::PathBuf;

use bundle::workload::Workload;

/// The methods `compare` measures, the baseline first.
pub const COMPARE_METHODS: [&str; 5] = [
    "cold",
    "kernel-resume",
    "snapboot",
    "snapboot-lazy",
    "snapboot-lazy-profiled",
];

/// The methods `compare` adds with a restore kernel: the `snapboot`, `snapboot-lazy` and
/// `snapboot-lazy-profiled` images, restored by it. Which of all these a run measures:
/// [`ComparePlan`].
pub const RESTORE_KERNEL_METHODS: [&str; 3] = [
    "restore-kernel",
    "restore-kernel-lazy",
    "restore-kernel-lazy-profiled",
];

/// The methods `compare --encrypt` adds, restored by the restore kernel: the `snapboot`
/// and `snapboot-lazy` images captured encrypted (`snapboot.encrypt=`), from a bundle that
/// differs from the others only by its device key.
pub const ENCRYPTED_METHODS: [&str; 2] =
    ["restore-kernel-encrypted", "restore-kernel-lazy-encrypted"];

/// The method `compare` adds on the PC whose firmware loads the kernel itself (PVH): the
/// `snapboot` image restored by the restorer (crates/restorer, `board::restorer_boot`),
/// with no kernel booted before the image.
pub const RESTORER_METHOD: &str = "restorer";

/// The methods of the restorer: [`RESTORER_METHOD`], and the `snapboot-lazy-profiled`
/// image restored by it (its swap region checked as resume does; the rest is paged in by
/// the image kernel).
pub const RESTORER_METHODS: [&str; 2] = [RESTORER_METHOD, "restorer-lazy-profiled"];

/// The profiled lazy methods: their images are re-captured by the restored workload
/// (`recapture` on its console).
pub const PROFILED_METHODS: [&str; 3] = [
    COMPARE_METHODS[4],
    RESTORE_KERNEL_METHODS[2],
    RESTORER_METHODS[1],
];

/// The name of `compare`'s medium baseline (`boottrace::report::MediumBaseline`): once per
/// round, the restore kernel boots with the `snapboot` image's store and reads the image's
/// extent with plain sequential 1 MiB reads instead of restoring it, prints the
/// `medium-baseline` marker and powers off. It is no method of the report: each method's
/// load phase is set against it (`of medium`).
pub const MEDIUM_BASELINE: &str = "medium";

/// Whether `compare` measures the restore kernel's methods, and if not, why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreKernelUse {
    /// Measured, with this restore kernel (its vmlinux).
    Measured(PathBuf),
    /// None is built for this kernel release.
    NotBuilt(String),
    /// Left out on request (`--no-restore-kernel`).
    Declined,
}

/// Whether `compare` measures the restorer, and if not, why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestorerUse {
    /// Measured, with this ELF (`bundle::home::restorer_elf`).
    Measured(PathBuf),
    /// The board cannot start it (`board::restorer_boot::unsupported` says why).
    Unsupported(&'static str),
    /// Left out on request (`--no-restorer`).
    Declined,
}

/// What `compare` measures: the restore kernel (if any), whether the profiled lazy images
/// are made, the restorer (if any), and one note per reason a method is left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComparePlan {
    /// The restore kernel's vmlinux, when its methods are measured.
    pub restore_kernel: Option<PathBuf>,
    /// The restorer's ELF, when its methods are measured.
    pub restorer: Option<PathBuf>,
    /// Whether the profiled lazy methods are measured: the workload re-captures itself.
    pub profiled: bool,
    /// Whether the encrypted methods are measured (`--encrypt`, with a restore kernel).
    pub encrypted: bool,
    /// Whether the medium baseline ([`MEDIUM_BASELINE`]) is measured, once per round (with
    /// a restore kernel, unless `--no-medium-baseline`).
    pub medium_baseline: bool,
    /// Why methods are left out, one line each.
    pub notes: Vec<String>,
}

impl ComparePlan {
    /// The plan for `workload` with `restore_kernel`.
    pub fn new(workload: &Workload, restore_kernel: RestoreKernelUse) -> Self {
        let profiled = workload.recapture;
        let mut notes = Vec::new();
        if !profiled {
            notes.push(no_recapture_note(workload, &PROFILED_METHODS));
        }
        let left_out = |why: String| {
            let methods: Vec<&str> = RESTORE_KERNEL_METHODS
                .into_iter()
                .filter(|m| profiled || !PROFILED_METHODS.contains(m))
                .collect();
            format!("{} left out: {why}", methods.join(", "))
        };
        let restore_kernel = match restore_kernel {
            RestoreKernelUse::Measured(vmlinux) => Some(vmlinux),
            RestoreKernelUse::NotBuilt(release) => {
                notes.push(left_out(format!(
                    "no restore kernel built for {release} (`snapboot board restore-kernel` \
                     builds it)"
                )));
                None
            }
            RestoreKernelUse::Declined => {
                notes.push(left_out("--no-restore-kernel".into()));
                None
            }
        };
        Self {
            restore_kernel,
            restorer: None,
            profiled,
            encrypted: false,
            medium_baseline: false,
            notes,
        }
    }

    /// The plan with the medium baseline when `wanted` (not `--no-medium-baseline`) and a
    /// restore kernel reads it; otherwise a note why there is none.
    pub fn with_medium_baseline(mut self, wanted: bool) -> Self {
        let why = if !wanted {
            "--no-medium-baseline"
        } else if self.restore_kernel.is_none() {
            "the restore kernel reads it (`snapboot.baseline=medium`) and none is measured"
        } else {
            self.medium_baseline = true;
            return self;
        };
        self.notes.push(format!(
            "medium baseline left out: {why}; no load phase is set against the medium's \
             sequential read (\"of medium\")"
        ));
        self
    }

    /// The plan with the restorer's methods, or a note why they are left out.
    pub fn with_restorer(mut self, restorer: RestorerUse) -> Self {
        let methods: Vec<&str> = RESTORER_METHODS
            .into_iter()
            .filter(|m| self.profiled || !PROFILED_METHODS.contains(m))
            .collect();
        let methods = methods.join(", ");
        match restorer {
            RestorerUse::Measured(elf) => self.restorer = Some(elf),
            RestorerUse::Unsupported(why) => {
                self.notes.push(format!("{methods} left out: {why}"));
            }
            RestorerUse::Declined => {
                self.notes
                    .push(format!("{methods} left out: --no-restorer"));
            }
        }
        self
    }

    /// The plan with the encrypted methods too (left out, with a note, without a restore
    /// kernel).
    pub fn with_encrypted(mut self) -> Self {
        if self.restore_kernel.is_some() {
            self.encrypted = true;
        } else {
            self.notes.push(format!(
                "{} left out: it is restored by the restore kernel",
                ENCRYPTED_METHODS.join(", ")
            ));
        }
        self
    }

    /// The methods measured, in the report's order (the baseline first).
    pub fn methods(&self) -> Vec<&'static str> {
        let rk = self.restore_kernel.is_some();
        COMPARE_METHODS
            .into_iter()
            .chain(RESTORE_KERNEL_METHODS.into_iter().filter(|_| rk))
            .chain(
                RESTORER_METHODS
                    .into_iter()
                    .filter(|_| self.restorer.is_some()),
            )
            .filter(|m| self.profiled || !PROFILED_METHODS.contains(m))
            .chain(ENCRYPTED_METHODS.into_iter().filter(|_| self.encrypted))
            .collect()
    }

    /// How many times `compare` calls `tick` for `runs` boots per method: every boot, plus
    /// the image captures (kernel-native, full, lazy, and the profiled lazy re-capture; the
    /// restorer restores the full one and the profiled lazy one), plus the medium
    /// baseline's boot per round.
    pub fn steps(&self, runs: usize) -> u64 {
        let captures = if self.profiled { 4 } else { 3 } + 2 * u64::from(self.encrypted);
        let boots = self.methods().len() + usize::from(self.medium_baseline);
        boots as u64 * runs as u64 + captures
    }
}

/// The note for `methods` left out because `workload` does not answer `recapture`.
pub fn no_recapture_note(workload: &Workload, methods: &[&str]) -> String {
    format!(
        "{} left out: workload `{}` does not answer `recapture` on its console, which makes \
         their images (build a --rootfs workload that does with `board build --recapture`)",
        methods.join(", "),
        workload.name
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn custom() -> Workload {
        Workload {
            name: "kiosk".into(),
            recapture: false,
            ..Workload::shell()
        }
    }

    #[test]
    fn every_builtin_workload_gets_every_method() {
        for w in [Workload::shell(), Workload::app(), Workload::debian()] {
            let plan = ComparePlan::new(&w, RestoreKernelUse::Measured("/rk/vmlinux".into()));
            assert_eq!(
                plan.methods(),
                [
                    "cold",
                    "kernel-resume",
                    "snapboot",
                    "snapboot-lazy",
                    "snapboot-lazy-profiled",
                    "restore-kernel",
                    "restore-kernel-lazy",
                    "restore-kernel-lazy-profiled"
                ],
                "{}",
                w.name
            );
            assert!(plan.notes.is_empty(), "{:?}", plan.notes);
            assert_eq!(plan.steps(3), 8 * 3 + 4);
        }
    }

    #[test]
    fn a_workload_that_cannot_recapture_has_its_profiled_methods_left_out_with_a_note() {
        let plan = ComparePlan::new(&custom(), RestoreKernelUse::Measured("/rk".into()));
        assert_eq!(
            plan.methods(),
            [
                "cold",
                "kernel-resume",
                "snapboot",
                "snapboot-lazy",
                "restore-kernel",
                "restore-kernel-lazy"
            ]
        );
        assert!(!plan.profiled);
        assert_eq!(
            plan.notes,
            [
                "snapboot-lazy-profiled, restore-kernel-lazy-profiled, restorer-lazy-profiled left \
              out: workload `kiosk` does not answer `recapture` on its console, which makes their images (build a \
              --rootfs workload that does with `board build --recapture`)"
            ]
        );
        // No profiling re-capture either: 6 methods' boots and 3 captures.
        assert_eq!(plan.steps(2), 6 * 2 + 3);
    }

    #[test]
    fn without_a_restore_kernel_its_methods_are_left_out_and_the_note_says_how_to_build_it() {
        let plan = ComparePlan::new(
            &Workload::shell(),
            RestoreKernelUse::NotBuilt("6.1.0-56-amd64".into()),
        );
        assert_eq!(plan.methods().len(), 5);
        assert_eq!(plan.steps(1), 9);
        assert_eq!(
            plan.notes,
            [
                "restore-kernel, restore-kernel-lazy, restore-kernel-lazy-profiled left out: no \
              restore kernel built for 6.1.0-56-amd64 (`snapboot board restore-kernel` builds \
              it)"
            ]
        );
        let plan = ComparePlan::new(&custom(), RestoreKernelUse::Declined);
        assert_eq!(plan.methods().len(), 4);
        assert_eq!(
            plan.notes[1], "restore-kernel, restore-kernel-lazy left out: --no-restore-kernel",
            "the profiled one is named once, in the first note"
        );
    }

    #[test]
    fn the_restorer_restores_the_full_and_profiled_images_after_the_kernels_methods_or_is_noted_out(
    ) {
        let w = Workload::shell();
        let rk = || RestoreKernelUse::Measured("/rk".into());
        let plain = ComparePlan::new(&w, rk());
        let plan = ComparePlan::new(&w, rk())
            .with_restorer(RestorerUse::Measured("/r/restorer".into()))
            .with_encrypted();
        let m = plan.methods();
        assert_eq!(&m[..plain.methods().len()], &plain.methods()[..]);
        let n = plain.methods().len();
        assert_eq!(m[n..n + 2], ["restorer", "restorer-lazy-profiled"]);
        assert_eq!(&m[n + 2..], &ENCRYPTED_METHODS);
        assert!(plan.notes.is_empty(), "{:?}", plan.notes);
        // Two more boots per run, no capture of their own.
        assert_eq!(plan.steps(2), plain.steps(2) + 2 * 2 + (2 * 2 + 2));
        let uefi = ComparePlan::new(&w, rk())
            .with_restorer(RestorerUse::Unsupported("--firmware uefi boots GRUB"));
        assert_eq!(uefi.methods(), plain.methods());
        assert_eq!(
            uefi.notes,
            ["restorer, restorer-lazy-profiled left out: --firmware uefi boots GRUB"]
        );
        let declined = ComparePlan::new(&w, rk()).with_restorer(RestorerUse::Declined);
        assert_eq!(
            declined.notes,
            ["restorer, restorer-lazy-profiled left out: --no-restorer"]
        );
        // A workload that cannot re-capture itself has no profiled image to restore.
        let kiosk = ComparePlan::new(&custom(), rk())
            .with_restorer(RestorerUse::Measured("/r/restorer".into()));
        assert_eq!(kiosk.methods().last(), Some(&"restorer"));
    }

    #[test]
    fn the_medium_baseline_is_read_by_the_restore_kernel_once_per_round_or_noted_out() {
        let w = Workload::shell();
        let rk = || RestoreKernelUse::Measured("/rk".into());
        let plain = ComparePlan::new(&w, rk());
        let plan = ComparePlan::new(&w, rk()).with_medium_baseline(true);
        assert!(plan.medium_baseline && plan.notes.is_empty());
        assert_eq!(plan.methods(), plain.methods(), "it is no method");
        assert_eq!(plan.steps(3), plain.steps(3) + 3);
        let declined = ComparePlan::new(&w, rk()).with_medium_baseline(false);
        assert!(!declined.medium_baseline);
        assert_eq!(
            declined.notes,
            [
                "medium baseline left out: --no-medium-baseline; no load phase is set against \
              the medium's sequential read (\"of medium\")"
            ]
        );
        let none = ComparePlan::new(&w, RestoreKernelUse::Declined).with_medium_baseline(true);
        assert!(!none.medium_baseline);
        assert_eq!(
            none.steps(2),
            ComparePlan::new(&w, RestoreKernelUse::Declined).steps(2)
        );
        assert!(
            none.notes[1].starts_with(
                "medium baseline left out: the restore kernel reads it \
                 (`snapboot.baseline=medium`) and none is measured"
            ),
            "{:?}",
            none.notes
        );
    }

    #[test]
    fn encrypted_methods_come_with_a_restore_kernel_only() {
        let w = Workload::builtin("app").unwrap();
        let rk = RestoreKernelUse::Measured("vmlinux".into());
        let plain = ComparePlan::new(&w, rk.clone());
        let plan = ComparePlan::new(&w, rk).with_encrypted();
        assert!(plan.encrypted);
        assert_eq!(&plan.methods()[plain.methods().len()..], &ENCRYPTED_METHODS);
        assert_eq!(plan.steps(3), plain.steps(3) + 2 * 3 + 2);
        let none = ComparePlan::new(&w, RestoreKernelUse::Declined).with_encrypted();
        assert!(!none.encrypted);
        assert!(!none.methods().contains(&ENCRYPTED_METHODS[0]));
        assert!(none
            .notes
            .iter()
            .any(|n| n.contains("restore-kernel-encrypted")));
    }
}
