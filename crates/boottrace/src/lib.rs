//! The power-on timeline, grabserial-style: a board's serial console is recorded line by line
//! with host timestamps, boot milestones are recognised in it (kernel messages and snapboot's
//! own `snapboot: @name` markers, the restorer's `snapboot-restorer:` lines), and the result is summarised as phases and a time to
//! interactive (TTI). [`Timeline`] is the JSON contract shared by the runner, the CLI and the
//! benchmarks.

pub mod marker;
pub mod parse;
pub mod recorder;
pub mod report;
pub mod restorer;
pub mod serial;
pub mod stats;
pub mod summary;
pub mod timeline;

pub use marker::{Marker, MARKER_PREFIX};
pub use parse::ParseError;
pub use recorder::{parse_printk_prefix, ConsoleLine, LineRecorder, MAX_LINE_BYTES};
pub use restorer::{RestorerLine, RESTORER_PREFIX};
pub use stats::Stats;
pub use summary::{OrderError, Phases, EXPECTED_ORDER};
pub use timeline::{detect, error_chain, Milestone, MilestoneKind, Outcome, Timeline};
