//! Boot-time analysis for snapboot: boot logs (timeline JSON, stamped grabserial-like logs,
//! raw console or dmesg captures) become phases, initcalls, silent gaps, console cost and a
//! restore's load-phase throughput ([`Analysis`]), advice with the time each fix saves on
//! that log ([`advise`]), kernel config checks ([`check_kernel`]), and reports: text, JSON, a
//! standalone SVG boot graph and a self-contained interactive HTML page comparing several
//! boots on one time axis ([`Report`]).

pub mod advisor;
pub mod analysis;
pub mod console;
pub mod devpm;
pub mod error;
pub mod html;
pub mod initcall;
pub mod kconfig;
pub mod report;
pub mod svg;
pub mod throughput;

pub use advisor::{advise, run_rule, total_saving, Finding, RULES};
pub use analysis::{Analysis, AnalysisOptions, Gap, Line, Mark, Phase, PhaseKind};
pub use boottrace::{MilestoneKind, Timeline};
pub use console::{Cmdline, ConsoleCost, SerialConsole};
pub use devpm::{restore_by_device, CallbackKind, DeviceCallback, DeviceRestore};
pub use error::AnalyzeError;
pub use initcall::{Initcall, InitcallParser};
pub use kconfig::{
    check_config, check_kernel, load_config, CheckArea, ConfigValue, KernelCheck, KernelConfig,
    Verdict,
};
pub use report::{analyze_files, analyze_texts, Report, RunReport};
pub use throughput::{ThroughputKind, ThroughputLine};
