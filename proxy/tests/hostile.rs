//! Hostile input: arbitrary and mutated bytes never panic, always end in a
//! typed result, and never make the decoder allocate in proportion to a length a
//! peer merely claims. The long run (a million inputs and more) is
//! `scripts/fuzz-codec`; this is its CI-sized sibling.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use sts_proxy::wire::{Message, OfpCodec};
use tokio_util::codec::Decoder;

#[path = "../examples/common/alloc_meter.rs"]
mod alloc_meter;
use alloc_meter::{bytes_allocated_by, AllocMeter};

#[global_allocator]
static METER: AllocMeter = AllocMeter;

/// Live heap bytes a parse may use per byte of frame: the decoded structs are
/// larger than their wire form (an 8-byte action becomes a 40-byte enum), but
/// the factor is fixed, never driven by a claimed length.
const MAX_BYTES_PER_FRAME_BYTE: usize = 16;
const FIXED_ALLOWANCE: usize = 4096;

fn parse_is_total_and_bounded(frame: &[u8]) {
    let bytes = Bytes::copy_from_slice(frame);
    let (result, allocated) = bytes_allocated_by(|| Message::parse(bytes.clone()).map(|m| m.emit()));
    // Any outcome is fine except a panic; a decoded message must re-encode.
    if let Ok(emitted) = result {
        assert!(emitted.is_ok() || frame.len() > 60_000);
    }
    assert!(
        allocated <= MAX_BYTES_PER_FRAME_BYTE * frame.len() + FIXED_ALLOWANCE,
        "parsing {} bytes allocated {allocated}",
        frame.len()
    );
}

/// A frame header claiming the buffer's own length, so parsing reaches the body.
fn framed(version: u8, msg_type: u8, body: &[u8]) -> Vec<u8> {
    let len = (8 + body.len()).min(0xffff) as u16;
    let mut f = vec![version, msg_type];
    f.extend_from_slice(&len.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 1]);
    f.extend_from_slice(&body[..len as usize - 8]);
    f
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn arbitrary_bodies_of_every_type(version in prop_oneof![Just(1u8), Just(4u8), any::<u8>()],
                                       msg_type in 0u8..32,
                                       body in proptest::collection::vec(any::<u8>(), 0..600)) {
        parse_is_total_and_bounded(&framed(version, msg_type, &body));
    }

    #[test]
    fn arbitrary_frames(frame in proptest::collection::vec(any::<u8>(), 0..300)) {
        parse_is_total_and_bounded(&frame);
    }

    #[test]
    fn arbitrary_streams_are_framed_without_looping(stream in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let mut buf = BytesMut::from(&stream[..]);
        let mut codec = OfpCodec;
        // Every successful decode consumes at least 8 bytes, so this terminates;
        // the bound guards against a decoder that returns frames without consuming.
        for _ in 0..=stream.len() / 8 + 1 {
            match codec.decode_eof(&mut buf) {
                Ok(Some(frame)) => parse_is_total_and_bounded(frame.bytes()),
                Ok(None) | Err(_) => return Ok(()),
            }
        }
        prop_assert!(false, "decoder did not make progress");
    }
}
