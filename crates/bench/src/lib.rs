//! Benchmarks on the board: the same workload booted N times per method, each boot checked
//! to have come up the way its method promises, and the [`boottrace::report::BenchReport`] every benchmark
//! writes (`snapboot bench cold`, `snapboot bench compare`; `endurance` restores one image
//! again and again).
//!
//! `compare` runs every boot method on one workload (`compare`, the methods in `plan`, one
//! measured boot in `measure`, the kernel's own resume in `native`); `endurance` restores one
//! image again and again; `recapture`, `lazy` and `memory` measure re-capture, lazy restore and
//! the memory sizes a board can restore.

mod compare;
mod endurance;
mod lazy;
mod measure;
mod memory;
pub mod native;
mod plan;
mod recapture;

pub use compare::{cold, compare, report, write_json, write_json_value, Compared};
pub use endurance::{
    endurance, summarize as endurance_summary, Endurance, Failure as EnduranceFailure, FaultKind,
    Plan as EndurancePlan, Report as EnduranceReport, RestoreRecord, Summary as EnduranceSummary,
    ENDURANCE_METHOD, FAULT_QUERY, HANG_QUERY, HANG_WATCHDOG_S, MAX_FAULT_PERCENT,
};
pub use lazy::{lazy_notes, lazy_sizes, lazy_steps, size_word};
pub use measure::{
    check_boot, check_medium_baseline, measured_boot, medium_boot, BenchError, BootError,
    MethodRuns, PROFILE_ROUNDS,
};
pub use memory::{boards as memory_board_list, memory_boards, memory_steps, mib_word, MemBoard};
pub use plan::{
    no_recapture_note, ComparePlan, RestoreKernelUse, RestorerUse, COMPARE_METHODS,
    ENCRYPTED_METHODS, MEDIUM_BASELINE, PROFILED_METHODS, RESTORER_METHOD, RESTORER_METHODS,
    RESTORE_KERNEL_METHODS,
};
pub use recapture::{
    recapture, recapture_steps, CaptureCost, Plan as RecapturePlan, Recapture,
    Source as RecaptureSource, RECAPTURE_METHODS,
};
