//! How a capture writes an image's chunks: their compression ([`Compression`]) and how much
//! the image may reference chunks other images stored ([`Dedupe`]). The store (crate
//! `flashstore`, whose writer applies them and explains selective dedupe) and the boot
//! words that choose them (crate `bootparams`, also read without std) share these types.

/// How much a new image may reference what other images stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dedupe {
    /// Store every page this image needs (memory dedupe within the image still applies).
    Off,
    /// Reference any stored page with the same content.
    Full,
    /// Reference another image's chunk only when this image uses enough of it (the module
    /// docs of `flashstore`'s writer).
    Selective {
        /// The least share of an old chunk's pages, in percent, that the image must use for
        /// the chunk to be referenced (0: any).
        min_use: u8,
        /// The shortest run of consecutive pages in consecutive slots of one old chunk that
        /// is referenced (1: any).
        min_run: u16,
    },
}

/// The default least use of an old chunk, percent. Ten re-captures of the board's `app`
/// (2026-11-23), replayed into stores with each policy: 90 % wrote 7.4 % of a full image per
/// re-capture and the last image's restore read 1.007× the chunk bytes of a fresh store;
/// 80 % wrote 5.7 % and read 1.017×; no floor with runs of 8 wrote 8.4 % and read 1.163×.
pub const DEFAULT_MIN_USE: u8 = 90;

impl Dedupe {
    /// The default selective policy.
    pub const SELECTIVE: Dedupe = Dedupe::Selective {
        min_use: DEFAULT_MIN_USE,
        min_run: 1,
    };
}

/// How chunks are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Stored as they are.
    None,
    /// LZ4 (a chunk that does not shrink is stored raw).
    #[default]
    Lz4,
}

impl Compression {
    /// Every choice, in the order help lists them.
    pub const ALL: [Compression; 2] = [Compression::None, Compression::Lz4];

    /// The word that names it (`none`, `lz4`).
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
        }
    }

    /// Back from [`Compression::name`].
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == s)
    }
}
