//! Generators for property tests: `arbitrary` produces only *valid* messages, so
//! that `parse(emit(m)) == m` must hold for every one of them. These helpers pick
//! lengths and codes that keep the structures well formed (an "unknown" action
//! must not carry a type code the codec knows, a body must keep 8-byte alignment).

use arbitrary::{Result, Unstructured};
use bytes::Bytes;

/// A short arbitrary payload.
pub fn bytes(u: &mut Unstructured) -> Result<Bytes> {
    let n = u.int_in_range(0..=48)?;
    Ok(Bytes::copy_from_slice(u.bytes(n)?))
}

/// A payload whose length plus `header` is a multiple of 8.
pub fn padded(u: &mut Unstructured, header: usize) -> Result<Bytes> {
    let blocks = u.int_in_range(0..=4usize)?;
    let n = (8 - header % 8) % 8 + blocks * 8;
    Ok(Bytes::copy_from_slice(u.bytes(n)?))
}

/// A code in `lo..=hi`, used for "unknown" variants outside the assigned range.
pub fn code_u16(u: &mut Unstructured, lo: u16, hi: u16) -> Result<u16> {
    u.int_in_range(lo..=hi)
}

pub fn hello_element_type(u: &mut Unstructured) -> Result<u16> {
    code_u16(u, 2, 0xffff)
}

/// A (version, type) pair that no decoder claims, so it stays [`super::Body::Raw`].
pub fn raw_message_type(u: &mut Unstructured) -> Result<(u8, u8)> {
    let version = *u.choose(&[1u8, 2, 3, 4, 5, 6])?;
    let msg_type = match version {
        1 => u.int_in_range(22..=255)?,
        4 => u.int_in_range(30..=255)?,
        _ => u.int_in_range(1..=255)?,
    };
    Ok((version, msg_type))
}

/// A body that follows a 4-byte TLV header and keeps 8-byte alignment.
pub fn padded_after_4(u: &mut Unstructured) -> Result<Bytes> {
    padded(u, 4)
}

/// A body that follows an 8-byte TLV header and keeps 8-byte alignment.
pub fn padded_after_8(u: &mut Unstructured) -> Result<Bytes> {
    padded(u, 8)
}

/// An action type that OpenFlow 1.0 does not define.
pub fn unknown_action10(u: &mut Unstructured) -> Result<u16> {
    code_u16(u, 12, 0xfffe)
}

/// A 1.0 queue property type other than MIN_RATE.
pub fn queue_prop_type10(u: &mut Unstructured) -> Result<u16> {
    let c = code_u16(u, 1, 0xffff)?;
    Ok(if c == 1 { 0 } else { c })
}

/// A statistics type OpenFlow 1.0 does not define.
pub fn unknown_stats10(u: &mut Unstructured) -> Result<u16> {
    code_u16(u, 6, 0xfffe)
}

/// An action type OpenFlow 1.3 does not define.
pub fn unknown_action13(u: &mut Unstructured) -> Result<u16> {
    Ok(match u.int_in_range(0..=2)? {
        0 => u.int_in_range(1..=10)?,
        1 => *u.choose(&[13u16, 14])?,
        _ => u.int_in_range(28..=0xfffe)?,
    })
}

/// An instruction type OpenFlow 1.3 does not define.
pub fn unknown_instruction13(u: &mut Unstructured) -> Result<u16> {
    Ok(if u.ratio(1, 4)? { 0 } else { u.int_in_range(7..=0xfffe)? })
}

/// A multipart type OpenFlow 1.3 does not define.
pub fn unknown_multipart13(u: &mut Unstructured) -> Result<u16> {
    code_u16(u, 14, 0xfffe)
}

/// A meter band type other than DROP, DSCP_REMARK and EXPERIMENTER.
pub fn unknown_band13(u: &mut Unstructured) -> Result<u16> {
    Ok(if u.ratio(1, 4)? { 0 } else { u.int_in_range(3..=0xfffe)? })
}

/// An error type other than the experimenter escape 0xffff.
pub fn error_type13(u: &mut Unstructured) -> Result<u16> {
    code_u16(u, 0, 0xfffe)
}

/// A 1.3 queue property other than MIN_RATE, MAX_RATE and EXPERIMENTER.
pub fn queue_prop_type13(u: &mut Unstructured) -> Result<u16> {
    Ok(if u.ratio(1, 4)? { 0 } else { u.int_in_range(3..=0xfffe)? })
}
