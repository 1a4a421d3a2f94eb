//! Host tools (dpkg-deb, mtools, sfdisk, apt-cache, ...) run by the board's builders: the
//! kernel fetcher, the root filesystem builders and the machines' disk makers.

pub mod run;

pub use run::{output, Failed};
