//! Choosing zram's compressor. zram names its default compressor when the kernel is
//! configured (`CONFIG_ZRAM_DEF_COMP`), but that compressor may be a module (Debian's cloud
//! kernel has `CONFIG_CRYPTO_LZO=m`) that nothing loaded in an initramfs without modprobe;
//! setting `disksize` then fails with a bare "Invalid argument". So lazy capture picks a
//! compressor the running kernel really has (registered in `/proc/crypto`) from those zram
//! offers, and names what to load when there is none.

/// Compressors in order of preference: fast to decompress first (page-ins after restore).
pub const PREFERRED: &[&str] = &["lz4", "lzo-rle", "lzo", "zstd", "lz4hc", "842"];

/// The algorithms a `comp_algorithm` listing offers, and the selected one (`[in brackets]`).
pub fn offered(listing: &str) -> (Vec<String>, Option<String>) {
    let mut all = Vec::new();
    let mut current = None;
    for w in listing.split_whitespace() {
        match w.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
            Some(sel) => {
                current = Some(sel.to_string());
                all.push(sel.to_string());
            }
            None => all.push(w.to_string()),
        }
    }
    (all, current)
}

/// Names of the algorithms `/proc/crypto` lists (those the kernel can allocate now).
pub fn registered(proc_crypto: &str) -> Vec<String> {
    proc_crypto
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == "name").then(|| v.trim().to_string())
        })
        .collect()
}

/// The compressor to use: the selected one if the kernel has it, else the first of
/// [`PREFERRED`] that zram offers and the kernel has. The error says what to load.
pub fn choose(listing: &str, proc_crypto: &str) -> Result<String, String> {
    let (offered, current) = offered(listing);
    let have = registered(proc_crypto);
    if let Some(c) = current.filter(|c| have.contains(c)) {
        return Ok(c);
    }
    PREFERRED
        .iter()
        .find(|p| offered.iter().any(|o| o == *p) && have.iter().any(|h| h == *p))
        .map(|p| p.to_string())
        .ok_or_else(|| {
            format!(
                "zram has no usable compressor: it offers {} but none is registered in \
                 /proc/crypto; load one of them first (modules lzo-rle, lz4 or zstd: \
                 CONFIG_CRYPTO_LZO, CONFIG_CRYPTO_LZ4, CONFIG_CRYPTO_ZSTD)",
                if offered.is_empty() {
                    "nothing".to_string()
                } else {
                    offered.join(" ")
                }
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CRYPTO_LZ4: &str = "name         : lz4\ndriver       : lz4-generic\nmodule       : lz4\ntype         : scomp\n\nname         : crc32c\ndriver       : crc32c-generic\n";

    #[test]
    fn listing_parses_with_the_selection() {
        let (all, cur) = offered("lzo [lzo-rle] lz4 lz4hc zstd\n");
        assert_eq!(all, ["lzo", "lzo-rle", "lz4", "lz4hc", "zstd"]);
        assert_eq!(cur.as_deref(), Some("lzo-rle"));
        assert_eq!(registered(CRYPTO_LZ4), ["lz4", "crc32c"]);
    }

    #[test]
    fn keeps_the_default_when_loaded_else_picks_a_loaded_one() {
        let lzo = "name : lzo-rle\ntype : scomp\n";
        assert_eq!(choose("lzo [lzo-rle] lz4", lzo).unwrap(), "lzo-rle");
        // The cloud kernel: default lzo-rle is a module nobody loaded, lz4 is there.
        assert_eq!(choose("lzo [lzo-rle] lz4 zstd", CRYPTO_LZ4).unwrap(), "lz4");
    }

    #[test]
    fn none_loaded_names_what_to_load() {
        let err = choose("lzo [lzo-rle] lz4", "name : crc32c\n").unwrap_err();
        assert!(err.contains("offers lzo lzo-rle lz4"), "{err}");
        assert!(err.contains("load one of them first"), "{err}");
    }
}
