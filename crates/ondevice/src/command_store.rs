//! The store a command works on (`capture`, `store …`, `image inspect`, `invalidate`,
//! `confirm`, `check`): the one given on its command line, or else the one the device's
//! settings name, the config file's under the kernel command line's
//! ([`bootparams::config::effective`], the rule the resume follows), with where that name
//! came from. A command run on a live system never waits for devices: the address is
//! resolved as the disks are now ([`devsys::locate::resolve`] with no wait), and a store that
//! is not there is said in one line that names the address and where it came from.

use crate::store::StoreUseError;
use bootparams::config::{Effective, SettingsError, Source, CONFIG_PATH};
use bootparams::StoreAddress;
use devsys::locate::{LocateError, Located};
use flashstore::Store;
use std::fmt;
use std::fs::File;
use std::path::Path;
use std::time::Duration;

/// Where a command's store address came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The command line of the command.
    Given,
    /// The config file at this path (`store = …`).
    File(String),
    /// The kernel command line (`snapboot.store=`).
    Kernel,
}

/// A command's store: its address and where the address came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandStore {
    /// The address.
    pub address: StoreAddress,
    /// Where it came from.
    pub origin: Origin,
}

impl fmt::Display for CommandStore {
    /// `store /dev/vdb`, `the configured store PARTLABEL=s (/etc/snapboot/snapboot.conf)`
    /// or `the store LABEL=s of the kernel command line (snapboot.store=)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = &self.address;
        match &self.origin {
            Origin::Given => write!(f, "store {a}"),
            Origin::File(path) => write!(f, "the configured store {a} ({path})"),
            Origin::Kernel => write!(
                f,
                "the store {a} of the kernel command line ({}=)",
                bootparams::key::STORE
            ),
        }
    }
}

/// Why a command has no store to work on.
#[derive(Debug, thiserror::Error)]
pub enum CommandStoreError {
    /// None given, none configured.
    #[error("no store given and none in {path} (`store = …`)")]
    NotConfigured {
        /// The config file looked in.
        path: String,
    },
    /// None given, and this boot's command line says `snapboot.store=none`.
    #[error(
        "no store given, and this boot's kernel command line says {}={} (whatever {path} names)",
        bootparams::key::STORE,
        bootparams::NO_STORE
    )]
    NoneThisBoot {
        /// The config file.
        path: String,
    },
    /// None given, and the settings that would name one cannot be read.
    #[error("no store given, and the settings that name one cannot be read")]
    Settings(#[source] SettingsError),
    /// The store's address names no device here now.
    #[error("{store} is not on this device")]
    NotHere {
        /// The store.
        store: CommandStore,
        /// What the lookup found.
        #[source]
        source: LocateError,
    },
    /// The store was found but cannot be used (not a store, cannot be opened, two devices).
    #[error(transparent)]
    Use(#[from] StoreUseError),
}

impl CommandStoreError {
    /// Whether the device has no store configured at all (nothing given, none named): the
    /// case an update hook on an unconfigured system passes over in silence.
    pub fn is_unconfigured(&self) -> bool {
        matches!(self, Self::NotConfigured { .. })
    }
}

/// The store a command works on: `given`, or else the one `settings` name (the file read at
/// `path`). The settings are only consulted when nothing is given, so a bad config file
/// does not stop a command told its store.
pub fn choose(
    given: Option<StoreAddress>,
    settings: impl FnOnce() -> Result<Effective, SettingsError>,
    path: &str,
) -> Result<CommandStore, CommandStoreError> {
    if let Some(address) = given {
        return Ok(CommandStore {
            address,
            origin: Origin::Given,
        });
    }
    let e = settings().map_err(CommandStoreError::Settings)?;
    let key = bootparams::key::STORE;
    match (e.params.store.clone(), e.source(key)) {
        (Some(address), Source::Kernel) => Ok(CommandStore {
            address,
            origin: Origin::Kernel,
        }),
        (Some(address), _) => Ok(CommandStore {
            address,
            origin: Origin::File(e.file.as_ref().map_or(path.into(), |f| f.path.clone())),
        }),
        (None, Source::Kernel) => Err(CommandStoreError::NoneThisBoot { path: path.into() }),
        (None, _) => Err(CommandStoreError::NotConfigured { path: path.into() }),
    }
}

/// [`choose`] on this system: the config file at [`CONFIG_PATH`] under `/proc/cmdline`.
pub fn from_system(given: Option<StoreAddress>) -> Result<CommandStore, CommandStoreError> {
    choose(
        given,
        || bootparams::config::load(&devsys::system::kernel_cmdline(), Path::new(CONFIG_PATH)),
        CONFIG_PATH,
    )
}

impl CommandStore {
    /// The device the address names now (no waiting): a missing one is
    /// [`CommandStoreError::NotHere`], a configured path included (a path given on the
    /// command line is opened as it is, and opening it says why it cannot be).
    pub fn locate(&self) -> Result<Located, CommandStoreError> {
        self.locate_with(|a| {
            let at = devsys::locate::resolve(a, Duration::ZERO)?;
            match at.path.exists() || self.origin == Origin::Given {
                true => Ok(at),
                false => Err(LocateError::NoNode {
                    path: at.path,
                    waited: Duration::ZERO,
                }),
            }
        })
    }

    /// [`CommandStore::locate`] with the lookup given (tests pass a fixture's).
    pub fn locate_with(
        &self,
        resolve: impl FnOnce(&StoreAddress) -> Result<Located, LocateError>,
    ) -> Result<Located, CommandStoreError> {
        resolve(&self.address).map_err(|source| {
            if source.is_missing() {
                CommandStoreError::NotHere {
                    store: self.clone(),
                    source,
                }
            } else {
                CommandStoreError::Use(StoreUseError::Locate {
                    address: self.address.clone(),
                    source,
                })
            }
        })
    }

    /// Finds the store now and opens it by its magic ([`crate::store::open_store`]'s
    /// refusals), for writing with `rw`.
    pub fn open(&self, rw: bool) -> Result<(Store<File>, Located), CommandStoreError> {
        let at = self.locate()?;
        let store = crate::store::open_located(&at, rw)?;
        Ok((store, at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bootparams::config::from_text;
    use devsys::settle::Absence;

    const CONF: &str = "/etc/snapboot/snapboot.conf";

    fn pick(
        given: Option<&str>,
        cmdline: &str,
        file: Option<&str>,
    ) -> Result<CommandStore, CommandStoreError> {
        let given = given.map(|g| StoreAddress::parse(g).unwrap());
        choose(given, || from_text(cmdline, file), CONF)
    }

    #[test]
    fn the_given_store_wins_and_a_bad_file_does_not_matter_then() {
        let s = pick(Some("/dev/vdb"), "", Some("stroe = x\n")).unwrap();
        assert_eq!(s.address, StoreAddress::path("/dev/vdb"));
        assert_eq!(s.to_string(), "store /dev/vdb");
    }

    #[test]
    fn the_file_names_the_store_unless_the_kernel_command_line_does() {
        let file = Some("store = PARTLABEL=snapstore\n");
        let s = pick(None, "quiet", file).unwrap();
        assert_eq!(s.address, StoreAddress::PartLabel("snapstore".into()));
        assert_eq!(
            s.to_string(),
            "the configured store PARTLABEL=snapstore (/etc/snapboot/snapboot.conf)"
        );
        let s = pick(None, "snapboot.store=LABEL=factory", file).unwrap();
        assert_eq!(s.address, StoreAddress::Label("factory".into()));
        assert_eq!(
            s.to_string(),
            "the store LABEL=factory of the kernel command line (snapboot.store=)"
        );
    }

    #[test]
    fn no_store_anywhere_says_where_it_was_looked_for() {
        for file in [None, Some("# nothing\ncompress = none\n")] {
            let e = pick(None, "quiet", file).unwrap_err();
            assert!(e.is_unconfigured());
            assert_eq!(
                e.to_string(),
                "no store given and none in /etc/snapboot/snapboot.conf (`store = …`)"
            );
        }
        let e = pick(None, "snapboot.store=none", Some("store = /dev/vdb\n")).unwrap_err();
        assert!(!e.is_unconfigured(), "the boot chose none: that is said");
        assert!(e.to_string().contains("snapboot.store=none"), "{e}");
        let e = pick(None, "", Some("stroe = /dev/vdb\n")).unwrap_err();
        assert!(matches!(e, CommandStoreError::Settings(_)), "{e:?}");
        assert!(!e.is_unconfigured());
    }

    #[test]
    fn a_configured_store_that_is_not_here_is_named_with_its_origin() {
        let s = pick(None, "", Some("store = PARTLABEL=snapstore\n")).unwrap();
        let missing = |_: &StoreAddress| {
            Err(LocateError::NoMatch {
                absence: Absence::Waited {
                    waited: Duration::ZERO,
                },
                searched: vec!["vda".into()],
            })
        };
        let e = s.locate_with(missing).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the configured store PARTLABEL=snapstore (/etc/snapboot/snapboot.conf) is not on \
             this device"
        );
        let two = |_: &StoreAddress| {
            Err(LocateError::Ambiguous {
                first: "/dev/vda1".into(),
                second: "/dev/vdb1".into(),
            })
        };
        let e = s.locate_with(two).unwrap_err();
        assert!(matches!(e, CommandStoreError::Use(_)), "{e:?}");
        let found = s
            .locate_with(|a| {
                Ok(Located {
                    address: a.clone(),
                    path: "/dev/vdb2".into(),
                })
            })
            .unwrap();
        assert_eq!(found.to_string(), "PARTLABEL=snapstore (/dev/vdb2)");
    }
}
