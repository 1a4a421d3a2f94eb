//! `snapboot config`: check a config file and show the settings in effect, and print the
//! documents made from the settings table. [`bootparams::config`] does the work.

use anyhow::{Context, Result};
use bootparams::config::{self, ConfigFile, CONFIG_PATH};
use clap::Subcommand;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::exit::Exit;

/// `snapboot config`.
#[derive(Subcommand, Debug)]
pub enum ConfigCmd {
    /// Check a config file, then print every setting in effect with it under this boot's
    /// kernel command line, and where each came from: default, file (with its line) or
    /// kernel. Exit 1, with the file's path and line, when it does not parse.
    Check {
        /// The file (default: /etc/snapboot/snapboot.conf; a missing one is no settings).
        file: Option<PathBuf>,
        /// The kernel command line to put over it (default: this boot's, /proc/cmdline).
        #[arg(long)]
        cmdline: Option<String>,
    },
    /// Print the man page snapboot.conf(5), in roff (`snapboot config man | man -l -`).
    Man,
    /// Print the default config file: every setting commented out, with its default.
    Default,
    /// Print the markdown table of every setting (docs/config.md).
    Table,
    /// Print this boot's settings in effect as kernel words on one line (what a boot script
    /// tests, e.g. to load the lazy image's modules). Exit 1 when the config file or the
    /// command line does not parse.
    Words,
}

/// Runs `snapboot config`.
pub fn config(c: ConfigCmd) -> Result<ExitCode> {
    match c {
        ConfigCmd::Check { file, cmdline } => {
            let path = file.unwrap_or_else(|| CONFIG_PATH.into());
            let cmdline = cmdline.unwrap_or_else(devsys::system::kernel_cmdline);
            let file = ConfigFile::read(&path)?;
            match &file {
                Some(f) => println!("{}: {} setting(s), valid", path.display(), f.entries.len()),
                None => println!("{}: no such file: the defaults apply", path.display()),
            }
            let e = config::effective(&cmdline, file).context("the kernel command line")?;
            print!("{}", e.report());
        }
        ConfigCmd::Man => print!("{}", config::man_page()),
        ConfigCmd::Default => print!("{}", config::default_file()),
        ConfigCmd::Table => print!("{}", config::markdown_table()),
        ConfigCmd::Words => return words(),
    }
    Ok(Exit::Success.into())
}

/// `snapboot config words` (a fast path: the board's `/init` runs it on every cold boot).
pub fn words() -> Result<ExitCode> {
    let path = std::path::Path::new(CONFIG_PATH);
    let e = config::load(&devsys::system::kernel_cmdline(), path)?;
    println!("{}", e.params.render().join(" "));
    Ok(Exit::Success.into())
}
