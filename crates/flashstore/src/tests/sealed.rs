//! Sealed images: what the medium shows, who can read them, what tampering and another key
//! get, dedupe within one key, fsck and signing without the key.

use super::*;
use zeroize::Zeroizing;

fn key(b: u8) -> DeviceKey {
    DeviceKey::new(&Zeroizing::new([b; 32]))
}

/// Memory holding a recognisable secret in a few pages.
fn with_secret(n: usize, seed: u64) -> Vec<Page> {
    let mut mem = memory(n, seed);
    for i in (5..n).step_by(97) {
        mem[i][200..232].copy_from_slice(b"the-secret-token-0123456789abcd!");
    }
    mem
}

fn holds(m: &MemMedium, needle: &[u8]) -> bool {
    m.bytes.windows(needle.len()).any(|w| w == needle)
}

const SECRET: &[u8] = b"the-secret-token-0123456789abcd!";

#[test]
fn a_sealed_image_round_trips_and_its_secrets_are_not_on_the_medium() {
    let mem = with_secret(400, 1);
    for compression in [Compression::Lz4, Compression::None] {
        let opts = WriteOptions {
            compression,
            ..wo()
        };
        let mut plain = new_store(8 * MIB, 16);
        write(&mut plain, "current", &mem, opts).unwrap();
        assert!(
            holds(plain.medium(), SECRET),
            "the clear store shows the secret"
        );

        let mut s = new_store(8 * MIB, 16);
        s.unlock(key(1));
        let c = write(&mut s, "current", &mem, opts).unwrap();
        assert_eq!(c.image.sealed, Some(key(1).id()));
        assert!(s.catalog().chunks.iter().all(|c| c.sealed));
        assert_eq!(read(&s, "current").unwrap(), mem);
        assert!(
            !holds(s.medium(), SECRET),
            "{compression:?}: the secret is on the medium"
        );
        assert_clean(&s);

        // Reopened: locked until unlocked with the same key.
        let mut s = Store::open(s.into_medium()).unwrap();
        let e = read(&s, "current").unwrap_err();
        assert!(matches!(e, StoreError::Locked { .. }), "{e}");
        assert!(e.to_string().contains(&key(1).id().to_string()), "{e}");
        s.unlock(key(1));
        assert_eq!(read(&s, "current").unwrap(), mem);
    }
}

#[test]
fn another_key_is_refused_by_id_and_a_forged_id_by_the_tag() {
    let mem = memory(200, 2);
    let mut s = new_store(8 * MIB, 16);
    s.unlock(key(1));
    write(&mut s, "current", &mem, wo()).unwrap();
    let mut s = Store::open(s.into_medium()).unwrap();
    s.unlock(key(2));
    let e = read(&s, "current").unwrap_err();
    assert!(matches!(e, StoreError::WrongKey { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains(&key(1).id().to_string()) && msg.contains(&key(2).id().to_string()));

    // The catalog claims the other key's id: the page list does not open.
    let mut forged = s.catalog.clone();
    forged.images[0].sealed = Some(key(2).id());
    s.catalog = forged;
    let e = read(&s, "current").unwrap_err().to_string();
    assert!(e.contains("does not authenticate"), "{e}");
}

#[test]
fn tampering_with_a_sealed_chunk_or_its_record_is_caught() {
    let mem = memory(300, 3);
    let mut s = new_store(8 * MIB, 16);
    s.unlock(key(1));
    write(&mut s, "current", &mem, wo()).unwrap();
    let c = s.catalog().chunks[2];

    // A flipped ciphertext byte, its checksum recomputed so only the tag can tell.
    let mut m = s.into_medium();
    let at = (c.cluster * 16 * BLOCK + u64::from(c.offset)) as usize + 100;
    m.bytes[at] ^= 1;
    let mut s = Store::open(m).unwrap();
    s.unlock(key(1));
    let stored = &s.medium().bytes[at - 100..at - 100 + c.stored_len as usize];
    let hash = s.catalog.check.digest(stored);
    s.catalog.chunks[2].hash = hash;
    let e = read(&s, "current").unwrap_err().to_string();
    assert!(
        e.contains(&format!(
            "chunk {} (cluster {}) does not authenticate",
            c.id, c.cluster
        )),
        "{e}"
    );
    assert!(!s.fsck().clean());
    s.catalog.chunks[2].hash = c.hash;

    // Its record says it is in the clear: a sealed image reads sealed chunks only.
    let mut m = s.into_medium();
    m.bytes[at] ^= 1;
    let mut s = Store::open(m).unwrap();
    s.unlock(key(1));
    assert_eq!(read(&s, "current").unwrap(), mem);
    s.catalog.chunks[2].sealed = false;
    let e = read(&s, "current").unwrap_err().to_string();
    assert!(e.contains("is encrypted but refers to chunk"), "{e}");
    // ... or holds another page count or encoding: the tag covers them.
    s.catalog.chunks[2].sealed = true;
    s.catalog.chunks[2].lz4 = !c.lz4;
    assert!(read(&s, "current").is_err());
}

#[test]
fn dedupe_works_within_one_key_and_never_across_keys_or_with_clear_images() {
    let mut mem = memory(600, 4);
    let first = mem.clone();
    let mut s = new_store(16 * MIB, 16);
    s.unlock(key(1));
    write(&mut s, "factory", &mem, wo()).unwrap();
    mutate(&mut mem, 20, 5);
    let second = write(&mut s, "current", &mem, wo()).unwrap();
    assert!(
        second.image.stats.shared_pages > second.image.stats.unique_pages / 2,
        "a re-capture under the same key shares: {:?}",
        second.image.stats
    );
    // Exactly as much as the same captures in the clear.
    let mut clear = new_store(16 * MIB, 16);
    write(&mut clear, "factory", &first, wo()).unwrap();
    let clear_second = write(&mut clear, "current", &mem, wo()).unwrap();
    assert_eq!(
        second.image.stats.new_pages,
        clear_second.image.stats.new_pages
    );
    assert_eq!(read(&s, "current").unwrap(), mem);

    // Under another key (rotation), nothing old is referenced.
    let mut s = Store::open(s.into_medium()).unwrap();
    s.unlock(key(2));
    let rotated = write(&mut s, "next", &mem, wo()).unwrap();
    assert_eq!(rotated.image.stats.shared_pages, 0);
    assert_eq!(read(&s, "next").unwrap(), mem);

    // In the clear, nothing sealed is referenced either.
    let mut s = Store::open(s.into_medium()).unwrap();
    let clear = write(&mut s, "clear", &mem, wo()).unwrap();
    assert_eq!(clear.image.stats.shared_pages, 0);
    assert_eq!(clear.image.sealed, None);

    // fsck without a key checks what it can and counts the rest; with one key, opens its.
    let f = s.fsck();
    assert!(f.clean(), "{f:?}");
    assert_eq!(f.unopened_images, 3);
    s.unlock(key(2));
    let f = s.fsck();
    assert!(f.clean(), "{f:?}");
    assert_eq!(f.unopened_images, 2);
    assert!(f.unopened_chunks > 0 && f.unopened_chunks < f.chunks);
}

#[test]
fn a_sealed_image_is_signed_on_a_host_without_the_key_and_key_slots_persist() {
    let mem = memory(200, 6);
    let mut s = signable_store();
    s.unlock(key(1));
    write(&mut s, "factory", &mem, wo()).unwrap();
    let slot = KeySlot {
        id: key(1).id(),
        kind: "tpm2".into(),
        wrapped: vec![1, 2, 3],
    };
    s.set_key_slots(vec![slot.clone()]).unwrap();
    // The signing host has no key: it checks checksums and signs.
    let mut host = Store::open(s.into_medium()).unwrap();
    let rec = host.image("factory").unwrap().clone();
    let digest = host.signed_digest(&rec).unwrap();
    host.set_signature("factory", vec![9; 64]).unwrap();
    let mut dev = Store::open(host.into_medium()).unwrap();
    assert_eq!(dev.key_slots(), &[slot]);
    dev.unlock(key(1));
    let rec = dev.image("factory").unwrap().clone();
    assert_eq!(dev.signed_digest(&rec).unwrap(), digest);
    assert_eq!(rec.signature, vec![9; 64]);
    assert_eq!(read(&dev, "factory").unwrap(), mem);
    // The digest of a sealed image differs from the same image in the clear.
    let mut clear = signable_store();
    write(&mut clear, "factory", &mem, wo()).unwrap();
    let crec = clear.image("factory").unwrap().clone();
    assert_ne!(clear.signed_digest(&crec).unwrap(), digest);
}

#[test]
fn power_cut_at_any_write_of_a_sealed_capture_loses_nothing() {
    let a = memory(120, 7);
    let mut base = new_store(4 * MIB, 16);
    base.unlock(key(1));
    write(&mut base, "current", &a, wo()).unwrap();
    let bytes = base.medium().bytes.clone();
    let b = memory(120, 8);
    for (budget, torn) in [
        (0, 0),
        (1, 0),
        (2, 100),
        (3, 0),
        (5, 4000),
        (8, 0),
        (13, 0),
        (40, 0),
    ] {
        let mut s = cut_store(&bytes, budget, torn);
        s.unlock(key(1));
        let _ = write(&mut s, "current", &b, wo());
        let m = s.into_medium().inner;
        let mut s = Store::open(m).unwrap();
        s.unlock(key(1));
        let got = read(&s, "current").unwrap();
        assert!(got == a || got == b, "budget {budget}: neither image");
        assert_clean(&s);
    }
}
