//! Round trip of generated valid messages: `parse(emit(m)) == m` and
//! `emit(parse(b)) == b`, for every message type of OpenFlow 1.0 and 1.3.

use std::collections::BTreeSet;

use arbitrary::{Arbitrary, Unstructured};
use bytes::Bytes;
use proptest::prelude::*;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sts_proxy::wire::{Message, WireError, OFP10, OFP13};

/// Emits `m`, parses the bytes back, and checks both directions. Returns the
/// (version, type) pair, or `None` when the generated message is over 64 KiB.
fn check(m: &Message) -> Option<(u8, u8)> {
    let bytes = match m.emit() {
        Ok(b) => b,
        Err(WireError::TooLong(_)) => return None,
        Err(e) => panic!("emit failed: {e} for {m:?}"),
    };
    let parsed = Message::parse(Bytes::from(bytes.clone()))
        .unwrap_or_else(|e| panic!("parse failed: {e}\n{m:#?}\n{bytes:02x?}"));
    assert_eq!(&parsed, m, "decoded message differs");
    assert_eq!(parsed.emit().unwrap(), bytes, "re-encoding differs");
    Some((bytes[0], bytes[1]))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn generated_messages_round_trip(seed in proptest::collection::vec(any::<u8>(), 0..1500)) {
        let mut u = Unstructured::new(&seed);
        if let Ok(m) = Message::arbitrary(&mut u) {
            check(&m);
        }
    }
}

/// The generator must reach every message type of both versions, or the round
/// trip above proves less than it claims.
#[test]
fn generator_covers_every_message_type() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut seen = BTreeSet::new();
    let mut buf = vec![0u8; 2048];
    for _ in 0..20_000 {
        rng.fill_bytes(&mut buf);
        if let Ok(m) = Message::arbitrary(&mut Unstructured::new(&buf)) {
            if let Some(pair) = check(&m) {
                seen.insert(pair);
            }
        }
    }
    for t in 0..=21u8 {
        assert!(seen.contains(&(OFP10, t)), "OpenFlow 1.0 type {t} never generated");
    }
    for t in 1..=29u8 {
        assert!(seen.contains(&(OFP13, t)), "OpenFlow 1.3 type {t} never generated");
    }
}
