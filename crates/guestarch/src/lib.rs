//! The guest architectures the board runs: the x86_64 PC and the arm64 board. Every crate of
//! the host side that differs by architecture (kernels, root filesystems, machines) asks
//! [`Arch`].

pub mod arch;

pub use arch::Arch;
