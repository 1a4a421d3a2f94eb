//! Seal/unseal against a scripted transport: the commands sent, in order, the handles
//! flushed on every path, and garbage or truncated responses.

use super::*;
use crate::marshal::{ST_NO_SESSIONS, ST_SESSIONS};
use std::collections::VecDeque;
use std::io;

/// Replies with canned responses in order and records what was sent.
#[derive(Default)]
struct Scripted {
    replies: VecDeque<io::Result<Vec<u8>>>,
    sent: Vec<Vec<u8>>,
}

impl Transport for Scripted {
    fn transact(&mut self, command: &[u8]) -> io::Result<Vec<u8>> {
        self.sent.push(command.to_vec());
        self.replies
            .pop_front()
            .unwrap_or_else(|| Err(io::Error::other("script ran out")))
    }
}

fn with_size(mut r: Vec<u8>) -> Vec<u8> {
    let n = r.len() as u32;
    r[2..6].copy_from_slice(&n.to_be_bytes());
    r
}

/// A success response with an authorization area (commands sent with a session).
fn ok_auth(handles: &[u32], params: &[u8]) -> Vec<u8> {
    let mut r = vec![0x80, 0x02, 0, 0, 0, 0, 0, 0, 0, 0];
    for h in handles {
        r.extend_from_slice(&h.to_be_bytes());
    }
    r.extend_from_slice(&(params.len() as u32).to_be_bytes());
    r.extend_from_slice(params);
    r.extend_from_slice(&[0, 0, 0x01, 0, 0]); // TPMS_AUTH_RESPONSE: nonce, attrs, hmac
    with_size(r)
}

/// A success response without sessions.
fn ok_plain(handles: &[u32], params: &[u8]) -> Vec<u8> {
    let mut r = vec![0x80, 0x01, 0, 0, 0, 0, 0, 0, 0, 0];
    for h in handles {
        r.extend_from_slice(&h.to_be_bytes());
    }
    r.extend_from_slice(params);
    with_size(r)
}

fn fail(rc: u32) -> Vec<u8> {
    let mut r = vec![0x80, 0x01, 0, 0, 0, 10];
    r.extend_from_slice(&rc.to_be_bytes());
    r
}

fn tpm2b(b: &[u8]) -> Vec<u8> {
    let mut v = (b.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(b);
    v
}

fn script(replies: Vec<Vec<u8>>) -> Tpm<Scripted> {
    Tpm::new(Scripted {
        replies: replies.into_iter().map(Ok).collect(),
        sent: Vec::new(),
    })
}

/// Command codes of what was sent.
fn codes(t: &Scripted) -> Vec<u32> {
    t.sent
        .iter()
        .map(|c| u32::from_be_bytes([c[6], c[7], c[8], c[9]]))
        .collect()
}

/// The handles passed to TPM2_FlushContext, in order.
fn flushed(t: &Scripted) -> Vec<u32> {
    t.sent
        .iter()
        .filter(|c| c[6..10] == CommandCode::FlushContext.code().to_be_bytes())
        .map(|c| u32::from_be_bytes([c[10], c[11], c[12], c[13]]))
        .collect()
}

const PRIMARY: u32 = 0x8000_0000;
const OBJECT: u32 = 0x8000_0001;
const SESSION: u32 = 0x0300_0000;
const PUBLIC: &[u8] = &[0, 4, 0, 8, 0, 11];
const PRIVATE: &[u8] = &[0, 3, 0xAA, 0xBB, 0xCC];

fn create_reply() -> Vec<u8> {
    let mut p = PRIVATE.to_vec();
    p.extend_from_slice(PUBLIC);
    p.extend_from_slice(&[0, 0, 0, 0]); // the rest is not read
    ok_auth(&[], &p)
}

/// A TPM2_PCR_Read reply for `pcrs` with value `[pcr; 32]` each.
fn pcr_reply(pcrs: &[u32]) -> Vec<u8> {
    let set = PcrSet::from_indices(pcrs).unwrap();
    let mut p = 7u32.to_be_bytes().to_vec();
    set.marshal(&mut p);
    p.extend_from_slice(&(pcrs.len() as u32).to_be_bytes());
    for pcr in set.indices() {
        p.extend_from_slice(&tpm2b(&[pcr as u8; 32]));
    }
    ok_plain(&[], &p)
}

/// The full reply script of a PCR-bound unseal that succeeds with `secret`.
fn policy_unseal_replies(secret: &[u8]) -> Vec<Vec<u8>> {
    vec![
        ok_auth(&[PRIMARY], &[]),
        ok_auth(&[OBJECT], &tpm2b(&[0; 34])),
        ok_plain(&[], &[]),
        ok_plain(&[], &tpm2b(&[0x5A; 32])),
        ok_plain(&[SESSION], &tpm2b(&[1; 32])),
        ok_plain(&[], &[]),
        ok_auth(&[], &tpm2b(secret)),
        ok_plain(&[], &[]),
        ok_plain(&[], &[]),
    ]
}

fn pcr_blob() -> SealedBlob {
    SealedBlob::from_parts(&[16], PUBLIC.to_vec(), PRIVATE.to_vec()).unwrap()
}

#[test]
fn policy_digest_matches_an_independent_computation() {
    // Computed with Python's hashlib from the PolicyPCR formula.
    let d = pcr_policy_digest(PcrSet::from_indices(&[16]).unwrap(), &[[0; 32]]);
    assert_eq!(
        hex(&d),
        "bff2d58e9813f97cefc14f72ad8133bc7092d652b7c877959254af140c841f36"
    );
    let d = pcr_policy_digest(
        PcrSet::from_indices(&[0, 7, 16]).unwrap(),
        &[[1; 32], [7; 32], [16; 32]],
    );
    assert_eq!(
        hex(&d),
        "6b5d37f995e6d76a00b7f0e12d21483d64679c555a9dd0f4b1fa4c9e706d177e"
    );
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn seal_without_pcrs_creates_under_the_primary_and_flushes_it() {
    let mut tpm = script(vec![
        ok_auth(&[PRIMARY], &[]),
        create_reply(),
        ok_plain(&[], &[]),
    ]);
    let blob = tpm.seal(b"device key", &[]).unwrap();
    assert_eq!(blob.public(), PUBLIC);
    assert_eq!(blob.private(), PRIVATE);
    assert!(blob.pcrs().is_empty());
    let t = tpm.into_inner();
    assert_eq!(codes(&t), [0x131, 0x153, 0x165]);
    assert_eq!(flushed(&t), [PRIMARY]);
    // The Create carries the secret and a template allowing the empty password.
    let create = &t.sent[1];
    let template = sealed_template(None);
    assert!(create.windows(10).any(|w| w == b"device key"));
    assert!(create.windows(template.len()).any(|w| w == template));
    let attrs = u32::from_be_bytes([template[4], template[5], template[6], template[7]]);
    assert_eq!(
        attrs,
        attr::FIXED_TPM | attr::FIXED_PARENT | attr::NO_DA | attr::USER_WITH_AUTH
    );
}

#[test]
fn seal_with_pcrs_puts_the_policy_of_their_values_in_the_template() {
    let mut tpm = script(vec![
        pcr_reply(&[7, 16]),
        ok_auth(&[PRIMARY], &[]),
        create_reply(),
        ok_plain(&[], &[]),
    ]);
    let blob = tpm.seal(&[9; 32], &[16, 7]).unwrap();
    assert_eq!(blob.pcrs(), [7, 16]);
    let t = tpm.into_inner();
    let policy = pcr_policy_digest(blob.pcr_set(), &[[7; 32], [16; 32]]);
    let template = sealed_template(Some(&policy));
    assert!(t.sent[2].windows(template.len()).any(|w| w == template));
    // No userWithAuth: only the policy opens it.
    let attrs = u32::from_be_bytes([template[4], template[5], template[6], template[7]]);
    assert_eq!(attrs & attr::USER_WITH_AUTH, 0);
}

#[test]
fn failed_create_still_flushes_the_primary() {
    let mut tpm = script(vec![
        ok_auth(&[PRIMARY], &[]),
        fail(0x2D5),
        ok_plain(&[], &[]),
    ]);
    let e = tpm.seal(&[1; 32], &[]).unwrap_err();
    assert_eq!(e.response_code(), Some(crate::rc::ResponseCode(0x2D5)));
    assert_eq!(flushed(&tpm.into_inner()), [PRIMARY]);
}

#[test]
fn secret_size_and_pcr_index_are_checked_before_anything_is_sent() {
    let mut tpm = script(vec![]);
    assert!(matches!(
        tpm.seal(&[], &[]),
        Err(TpmError::SecretSize { len: 0, max: 128 })
    ));
    assert!(matches!(
        tpm.seal(&[0; 129], &[]),
        Err(TpmError::SecretSize { len: 129, .. })
    ));
    assert!(matches!(
        tpm.seal(&[0; 32], &[24]),
        Err(TpmError::PcrIndex { pcr: 24 })
    ));
    assert!(matches!(
        tpm.pcr_extend(30, &[0; 32]),
        Err(TpmError::PcrIndex { pcr: 30 })
    ));
    assert!(tpm.into_inner().sent.is_empty());
}

#[test]
fn unseal_without_pcrs_uses_the_password_session() {
    let mut tpm = script(vec![
        ok_auth(&[PRIMARY], &[]),
        ok_auth(&[OBJECT], &tpm2b(&[0; 34])),
        ok_plain(&[], &[]),
        ok_auth(&[], &tpm2b(b"secret")),
        ok_plain(&[], &[]),
    ]);
    let blob = SealedBlob::from_parts(&[], PUBLIC.to_vec(), PRIVATE.to_vec()).unwrap();
    assert_eq!(tpm.unseal(&blob).unwrap().as_slice(), b"secret");
    let t = tpm.into_inner();
    assert_eq!(codes(&t), [0x131, 0x157, 0x165, 0x15E, 0x165]);
    assert_eq!(flushed(&t), [PRIMARY, OBJECT]);
    // Load sends the blob's private then public part.
    let mut parts = PRIVATE.to_vec();
    parts.extend_from_slice(PUBLIC);
    assert!(t.sent[1].ends_with(&parts));
}

#[test]
fn refused_load_flushes_the_primary_and_says_another_tpm() {
    let mut tpm = script(vec![
        ok_auth(&[PRIMARY], &[]),
        fail(0x1DF),
        ok_plain(&[], &[]),
    ]);
    let e = tpm.unseal(&pcr_blob()).unwrap_err();
    assert!(matches!(e, TpmError::ForeignBlob { .. }), "{e}");
    let t = tpm.into_inner();
    assert_eq!(codes(&t), [0x131, 0x157, 0x165]);
    assert_eq!(flushed(&t), [PRIMARY]);
}

#[test]
fn policy_unseal_runs_the_session_and_flushes_everything() {
    let mut tpm = script(policy_unseal_replies(b"k"));
    assert_eq!(tpm.unseal(&pcr_blob()).unwrap().as_slice(), b"k");
    let t = tpm.into_inner();
    assert_eq!(
        codes(&t),
        [0x131, 0x157, 0x165, 0x17B, 0x176, 0x17F, 0x15E, 0x165, 0x165]
    );
    assert_eq!(flushed(&t), [PRIMARY, SESSION, OBJECT]);
    // The session's nonceCaller is the TPM's random bytes; the Unseal names the session.
    assert!(t.sent[4].windows(34).any(|w| w == tpm2b(&[0x5A; 32])));
    assert_eq!(&t.sent[6][18..22], &SESSION.to_be_bytes());
    // PolicyPCR selects PCR 16 with an empty pcrDigest.
    assert!(t.sent[5].ends_with(&[0, 0, 0, 0, 0, 1, 0, 0x0B, 3, 0, 0, 1]));
}

#[test]
fn policy_failure_is_a_pcr_mismatch_and_flushes_session_and_object() {
    let mut replies = policy_unseal_replies(b"k");
    replies[6] = fail(0x99D);
    let mut tpm = script(replies);
    let e = tpm.unseal(&pcr_blob()).unwrap_err();
    match &e {
        TpmError::PcrMismatch { command, pcrs, .. } => {
            assert_eq!(*command, CommandCode::Unseal);
            assert_eq!(pcrs, &[16]);
        }
        other => panic!("{other}"),
    }
    assert_eq!(flushed(&tpm.into_inner()), [PRIMARY, SESSION, OBJECT]);
}

#[test]
fn a_failing_flush_after_success_is_reported() {
    let mut tpm = script(vec![ok_auth(&[PRIMARY], &[]), create_reply(), fail(0x18B)]);
    let e = tpm.seal(&[1; 32], &[]).unwrap_err();
    match e {
        TpmError::Command { command, rc } => {
            assert_eq!(command, CommandCode::FlushContext);
            assert_eq!(rc.0, 0x18B);
        }
        other => panic!("{other}"),
    }
}

#[test]
fn every_truncated_response_body_is_an_error_not_a_panic() {
    let good = policy_unseal_replies(b"secret");
    for i in 0..good.len() {
        for n in 10..good[i].len() {
            let mut replies = good.clone();
            replies[i] = with_size(good[i][..n].to_vec());
            let mut tpm = script(replies);
            // Either an error, or a response whose truncation only cut the ignored response
            // authorization area.
            if let Ok(secret) = tpm.unseal(&pcr_blob()) {
                assert_eq!(secret.as_slice(), b"secret", "reply {i} cut to {n}");
            }
        }
    }
}

#[test]
fn garbage_responses_are_errors_not_panics() {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..2000 {
        let len = (next() % 80) as usize;
        let mut g: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        // Half the time, a plausible header so the body parsers see the garbage.
        if round % 2 == 0 && len >= 10 {
            g[0..2].copy_from_slice(&[ST_NO_SESSIONS, ST_SESSIONS][round % 4 / 2].to_be_bytes());
            g[6..10].copy_from_slice(&0u32.to_be_bytes());
            g = with_size(g);
        }
        let replies = vec![g; 12];
        let blob = pcr_blob();
        let _ = script(replies.clone()).unseal(&blob);
        let _ = script(replies.clone()).seal(&[1; 32], &[0, 16]);
        let _ = script(replies.clone()).pcr_read(&[0, 1, 2]);
        let _ = script(replies.clone()).pcr_extend(16, &[0; 32]);
        let _ = script(replies).handles(HandleKind::Transient);
    }
}

#[test]
fn io_errors_name_the_command() {
    let mut tpm = Tpm::new(Scripted {
        replies: [Err(io::Error::other("wire cut"))].into(),
        sent: Vec::new(),
    });
    let e = tpm.pcr_read(&[0]).unwrap_err();
    assert!(
        matches!(
            e,
            TpmError::Io {
                command: CommandCode::PcrRead,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.to_string(), "TPM2_PCR_Read: TPM I/O failed");
}

#[test]
fn pcr_read_asks_again_for_the_rest_and_answers_in_the_order_asked() {
    let first: Vec<u32> = (0..8).collect();
    let second: Vec<u32> = (8..12).collect();
    let mut tpm = script(vec![pcr_reply(&first), pcr_reply(&second)]);
    let asked = [11, 0, 5, 8, 1, 2, 3, 4, 6, 7, 9, 10, 5];
    let values = tpm.pcr_read(&asked).unwrap();
    let expect: Vec<[u8; 32]> = asked.iter().map(|&p| [p as u8; 32]).collect();
    assert_eq!(values, expect);
    let t = tpm.into_inner();
    assert_eq!(codes(&t), [0x17E, 0x17E]);
    // The second read asks only for PCRs 8..=11.
    assert!(t.sent[1].ends_with(&[0, 0x0B, 3, 0, 0x0F, 0]));
}

#[test]
fn pcr_read_refuses_unasked_or_no_pcrs_instead_of_looping() {
    let mut tpm = script(vec![pcr_reply(&[3])]);
    assert!(matches!(
        tpm.pcr_read(&[2]),
        Err(TpmError::Malformed { .. })
    ));
    let mut tpm = script(vec![pcr_reply(&[])]);
    assert!(matches!(
        tpm.pcr_read(&[2]),
        Err(TpmError::Malformed { .. })
    ));
    // A SHA-1-sized digest in the SHA-256 bank.
    let mut p = 0u32.to_be_bytes().to_vec();
    PcrSet::from_indices(&[2]).unwrap().marshal(&mut p);
    p.extend_from_slice(&1u32.to_be_bytes());
    p.extend_from_slice(&tpm2b(&[0; 20]));
    let e = script(vec![ok_plain(&[], &p)]).pcr_read(&[2]).unwrap_err();
    assert!(format!("{:?}", e).contains("20-byte digest"), "{e:?}");
}

#[test]
fn pcr_extend_sends_one_sha256_digest_with_the_password_session() {
    let mut tpm = script(vec![ok_auth(&[], &[])]);
    tpm.pcr_extend(16, &[0xEE; 32]).unwrap();
    let t = tpm.into_inner();
    let c = &t.sent[0];
    assert_eq!(&c[0..2], &ST_SESSIONS.to_be_bytes());
    assert_eq!(&c[10..14], &16u32.to_be_bytes());
    assert!(c.ends_with(&[[0, 0, 0, 1, 0, 0x0B].as_slice(), &[0xEE; 32]].concat()));
}

#[test]
fn handles_follows_more_data() {
    let page = |more: u8, hs: &[u32]| {
        let mut p = vec![more];
        p.extend_from_slice(&CAP_HANDLES.to_be_bytes());
        p.extend_from_slice(&(hs.len() as u32).to_be_bytes());
        for h in hs {
            p.extend_from_slice(&h.to_be_bytes());
        }
        ok_plain(&[], &p)
    };
    let mut tpm = script(vec![
        page(1, &[0x8000_0000, 0x8000_0002]),
        page(0, &[0x8000_0005]),
    ]);
    assert_eq!(
        tpm.handles(HandleKind::Transient).unwrap(),
        [0x8000_0000, 0x8000_0002, 0x8000_0005]
    );
    let t = tpm.into_inner();
    assert_eq!(&t.sent[0][14..18], &0x8000_0000u32.to_be_bytes());
    assert_eq!(&t.sent[1][14..18], &0x8000_0003u32.to_be_bytes());
    // A policy session listed as 0x03... under the 0x02... query is kept, and the next page
    // is asked in the 0x02... range.
    let mut tpm = script(vec![page(1, &[0x0300_0000]), page(0, &[0x0200_0001])]);
    assert_eq!(
        tpm.handles(HandleKind::Session).unwrap(),
        [0x0300_0000, 0x0200_0001]
    );
    let t = tpm.into_inner();
    assert_eq!(&t.sent[1][14..18], &0x0200_0001u32.to_be_bytes());
    // A count larger than the bytes that follow.
    let mut bad = page(0, &[1]);
    bad[18] = 0xFF;
    assert!(script(vec![bad]).handles(HandleKind::Session).is_err());
}
