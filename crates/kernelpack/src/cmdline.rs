//! The cold boot's command line: what a restoring program (the restore kernel, the
//! restorer) gives the stock kernel when it hands a cold boot over. Its own command line,
//! without the words that point it at the kernel pack or start snapboot as the first process
//! (the stock kernel runs `/init`, which loads its modules), plus `snapboot.handedover`, so
//! the stock kernel's `snapboot resume` does not try the image a second time.

/// On a restoring program: the device holding the kernel pack (`snapboot.coldkernel=DEV`).
pub const COLDKERNEL: &str = "snapboot.coldkernel";
/// This cold boot was handed over by a restoring program, which already said why.
pub const HANDEDOVER: &str = "snapboot.handedover";
/// The word that makes a kernel start another first process than the initramfs's `/init`.
const RDINIT: &str = "rdinit=";

/// Whether `word` of the restoring program's command line goes to the stock kernel.
fn kept(word: &str) -> bool {
    let pack = word
        .strip_prefix(COLDKERNEL)
        .is_some_and(|rest| rest.starts_with('='));
    !pack && !word.starts_with(RDINIT) && word != HANDEDOVER
}

/// The stock kernel's command line, word by word (join them with single spaces).
pub fn cold_cmdline_words(current: &str) -> impl Iterator<Item = &str> {
    current
        .split_whitespace()
        .filter(|w| kept(w))
        .chain(core::iter::once(HANDEDOVER))
}

/// The stock kernel's command line.
#[cfg(feature = "std")]
pub fn cold_cmdline(current: &str) -> String {
    cold_cmdline_words(current).collect::<Vec<_>>().join(" ")
}

/// The value of one `key=value` word of `cmdline`, read on its own (the last one wins):
/// for a fallback that must still work when another `snapboot.*` word does not parse.
pub fn value_of<'a>(cmdline: &'a str, key: &str) -> Option<&'a str> {
    cmdline
        .split_whitespace()
        .rev()
        .filter_map(|w| w.split_once('='))
        .find(|(k, v)| *k == key && !v.is_empty())
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stock_kernel_is_told_it_was_handed_over_and_not_where_the_pack_is() {
        let c = cold_cmdline(
            "console=ttyS0 rdinit=/bin/snapboot snapboot.store=/dev/vdb snapboot.coldkernel=/dev/vdc root=/dev/vda",
        );
        assert_eq!(
            c,
            "console=ttyS0 snapboot.store=/dev/vdb root=/dev/vda snapboot.handedover"
        );
        // Never twice, whatever the restore kernel was given.
        assert_eq!(cold_cmdline(&c).matches("snapboot.handedover").count(), 1);
        // A word that only starts like the key is not the pack's.
        assert_eq!(
            cold_cmdline("snapboot.coldkernelx=1"),
            "snapboot.coldkernelx=1 snapboot.handedover"
        );
    }

    #[test]
    fn the_last_non_empty_value_wins() {
        let line =
            "snapboot.coldkernel=/dev/vdb x snapboot.coldkernel=/dev/vdc snapboot.coldkernel=";
        assert_eq!(value_of(line, COLDKERNEL), Some("/dev/vdc"));
        assert_eq!(value_of(line, "snapboot.store"), None);
        assert_eq!(value_of("", COLDKERNEL), None);
    }
}
