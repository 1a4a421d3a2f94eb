//! Which images are tried, in which order: the names `snapboot.image=` asks for first, in
//! its order and each once (a name no image can have, or one the store lacks, is a
//! candidate that is refused with that reason, so the boot log says what was asked), then
//! every other image of the store, newest generation first. A store with no image has no
//! candidate, whatever is asked for: that is an empty store, which a cold boot fills.

use alloc::vec::Vec;
use storelayout::{valid_name, ImageRec};

/// One image to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Candidate<'a> {
    /// An image of the store.
    Image(&'a ImageRec),
    /// A name asked for that the store has no image of.
    Missing(&'a str),
    /// A name asked for that no image can have.
    BadName(&'a str),
}

impl Candidate<'_> {
    /// The name it is tried under.
    pub fn name(&self) -> &str {
        match self {
            Candidate::Image(rec) => &rec.name,
            Candidate::Missing(n) | Candidate::BadName(n) => n,
        }
    }

    /// The image, or why there is none to try.
    pub fn image(&self) -> Result<&ImageRec, crate::Refused> {
        match *self {
            Candidate::Image(rec) => Ok(rec),
            Candidate::Missing(n) => Err(crate::Refused::Missing(n.into())),
            Candidate::BadName(n) => Err(crate::Refused::BadName(n.into())),
        }
    }
}

/// The candidates among `images` (a store's catalog) when `wanted` are asked for.
pub fn candidates<'a, S: AsRef<str>>(
    images: &'a [ImageRec],
    wanted: &'a [S],
) -> Vec<Candidate<'a>> {
    if images.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<Candidate<'a>> = Vec::new();
    for w in wanted.iter().map(AsRef::as_ref) {
        if out.iter().any(|c| c.name() == w) {
            continue;
        }
        out.push(if !valid_name(w) {
            Candidate::BadName(w)
        } else {
            match images.iter().find(|i| i.name == w) {
                Some(rec) => Candidate::Image(rec),
                None => Candidate::Missing(w),
            }
        });
    }
    let mut rest: Vec<&ImageRec> = images
        .iter()
        .filter(|i| !out.iter().any(|c| c.name() == i.name))
        .collect();
    rest.sort_by_key(|i| core::cmp::Reverse(i.generation));
    out.extend(rest.into_iter().map(Candidate::Image));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;
    use alloc::vec;

    fn rec(name: &str, generation: u64) -> ImageRec {
        ImageRec {
            name: name.into(),
            generation,
            pinned: false,
            created_unix: 0,
            meta: storelayout::Extent { cluster: 1, len: 1 },
            meta_hash: [0; 32],
            chunks: Vec::new(),
            stats: Default::default(),
            signature: Vec::new(),
            raw: None,
            sealed: None,
        }
    }

    fn names(c: &[Candidate]) -> Vec<String> {
        c.iter()
            .map(|c| match c {
                Candidate::Image(r) => r.name.clone(),
                Candidate::Missing(n) => alloc::format!("missing {n}"),
                Candidate::BadName(n) => alloc::format!("bad {n}"),
            })
            .collect()
    }

    #[test]
    fn asked_for_names_come_first_once_then_the_rest_newest_first() {
        let images = [rec("a", 1), rec("b", 3), rec("c", 2)];
        assert_eq!(names(&candidates::<&str>(&images, &[])), ["b", "c", "a"]);
        let wanted = ["a", "new", "a", "x/y", "b"];
        assert_eq!(
            names(&candidates(&images, &wanted)),
            ["a", "missing new", "bad x/y", "b", "c"]
        );
    }

    #[test]
    fn an_empty_store_has_no_candidate_whatever_is_asked_for() {
        assert!(candidates(&[], &["new"]).is_empty());
        let images = [rec("a", 1)];
        let c = candidates(&images, &["new"]);
        let missing = c[0].image().unwrap_err();
        assert!(matches!(&missing, crate::Refused::Missing(n) if n == "new"));
        assert_eq!(missing.to_string(), "no image named `new`");
        assert_eq!(c.len(), 2);
        let long = String::from_iter(vec!['a'; 65]);
        let c = candidates(&images, core::slice::from_ref(&long));
        assert!(matches!(c[0], Candidate::BadName(_)));
    }
}
