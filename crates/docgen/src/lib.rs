//! The device binary's man pages and shell completions, generated from its command line
//! (clap) and written under a root at the paths the Debian package ships them
//! (`bundle::debpkg` calls this):
//!
//! ```text
//!   ROOT/usr/share/man/man8/snapboot.8                 snapboot(8)
//!   ROOT/usr/share/man/man8/snapboot-SUB[-SUB].8       one page per subcommand (clap_mangen)
//!   ROOT/usr/share/bash-completion/completions/snapboot
//!   ROOT/usr/share/zsh/vendor-completions/_snapboot
//!   ROOT/usr/share/fish/vendor_completions.d/snapboot.fish
//! ```
//!
//! A crate of its own so clap_mangen and clap_complete stay out of the static device binary.
//! The pages are written uncompressed; the packaging compresses them.

use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;
use std::path::{Path, PathBuf};

/// The man pages' directory under a root.
pub const MAN_DIR: &str = "usr/share/man/man8";

/// The config file's page, snapboot.conf(5) (file formats), from the settings table.
pub const CONF_MAN_DIR: &str = "usr/share/man/man5";

/// Section of the man pages: system administration commands.
const SECTION: &str = "8";

/// The command line as the pages show it: built, so every subcommand knows its full name
/// (`snapboot-store-gc`), without clap's `help` subcommand.
fn command() -> clap::Command {
    let mut cmd = snapboot_device::DeviceCli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// snapboot(8) and a page for every visible subcommand, at every depth.
pub fn write_man_pages(root: &Path) -> Result<Vec<PathBuf>> {
    let dir = root.join(MAN_DIR);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::new();
    let mut todo = vec![command()];
    while let Some(cmd) = todo.pop() {
        todo.extend(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
        let man = clap_mangen::Man::new(cmd)
            .section(SECTION)
            .manual("snapboot")
            .source(format!("snapboot {}", env!("CARGO_PKG_VERSION")));
        let path = man
            .generate_to(&dir)
            .with_context(|| format!("cannot write a man page in {}", dir.display()))?;
        written.push(path);
    }
    let conf_dir = root.join(CONF_MAN_DIR);
    std::fs::create_dir_all(&conf_dir)
        .with_context(|| format!("cannot create {}", conf_dir.display()))?;
    let conf = conf_dir.join("snapboot.conf.5");
    std::fs::write(&conf, bootparams::config::man_page())
        .with_context(|| format!("cannot write {}", conf.display()))?;
    written.push(conf);
    written.sort();
    Ok(written)
}

/// Where Debian's shells look for completions a package ships, and the file name each wants.
const COMPLETIONS: [(Shell, &str, &str); 3] = [
    (
        Shell::Bash,
        "usr/share/bash-completion/completions",
        "snapboot",
    ),
    (Shell::Zsh, "usr/share/zsh/vendor-completions", "_snapboot"),
    (
        Shell::Fish,
        "usr/share/fish/vendor_completions.d",
        "snapboot.fish",
    ),
];

/// The bash, zsh and fish completions.
pub fn write_completions(root: &Path) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for (shell, dir, name) in COMPLETIONS {
        let dir = root.join(dir);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let mut text = Vec::new();
        clap_complete::generate(shell, &mut command(), "snapboot", &mut text);
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_subcommand_gets_a_page_and_every_shell_a_completion() {
        let d = tempfile::tempdir().unwrap();
        let pages = write_man_pages(d.path()).unwrap();
        let names: Vec<String> = pages
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for want in ["snapboot.8", "snapboot-install.8", "snapboot-store-gc.8"] {
            assert!(
                names.iter().any(|n| n == want),
                "{want} missing from {names:?}"
            );
        }
        let main = std::fs::read_to_string(d.path().join("usr/share/man/man8/snapboot.8")).unwrap();
        assert!(
            main.contains(".TH snapboot 8"),
            "{}",
            &main[..200.min(main.len())]
        );
        assert!(main.contains("install"), "the page lists the subcommands");
        let conf =
            std::fs::read_to_string(d.path().join("usr/share/man/man5/snapboot.conf.5")).unwrap();
        assert!(
            conf.starts_with(".TH SNAPBOOT.CONF 5"),
            "{}",
            &conf[..80.min(conf.len())]
        );
        assert!(conf.contains("encrypt"), "every setting is in the page");
        let done = write_completions(d.path()).unwrap();
        assert_eq!(done.len(), 3);
        let bash = std::fs::read_to_string(&done[0]).unwrap();
        assert!(bash.contains("complete -F _snapboot"), "{bash}");
        let fish = std::fs::read_to_string(&done[2]).unwrap();
        assert!(fish.contains("-a \"install\""), "{fish}");
    }

    /// The pages are the device's: none names the host tool's commands, its board or its
    /// builds, and the exit statuses are the device binary's own.
    #[test]
    fn the_pages_are_in_device_words() {
        let d = tempfile::tempdir().unwrap();
        let pages = write_man_pages(d.path()).unwrap();
        assert!(pages.len() > 20, "{pages:?}");
        for page in &pages {
            let text = std::fs::read_to_string(page).unwrap();
            let name = page.file_name().unwrap().to_string_lossy();
            for word in [
                "guest",
                "cross\\-build",
                "cross-build",
                "board run",
                "board\\'s",
                "bench endurance",
                "snapboot bench",
                "check\\-kernel",
                "check-kernel",
                "(device",
            ] {
                assert!(!text.contains(word), "{name} says {word:?}");
            }
        }
        let main = std::fs::read_to_string(d.path().join(MAN_DIR).join("snapboot.8")).unwrap();
        assert!(
            main.contains("something snapshot boot needs is missing here"),
            "exit 7"
        );
    }
}
