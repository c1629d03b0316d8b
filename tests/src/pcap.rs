//! Writes a recorded OpenFlow session as a classic pcap file: one TCP
//! connection between 127.0.0.1:`switch_port` and 127.0.0.1:`controller_port`,
//! with correct sequence numbers so a dissector reassembles the streams.

use std::io::Write;
use std::path::Path;

use crate::{Dir, Recorded};

const MSS: usize = 1448;

/// Writes `log` to `path`.
pub fn write(path: &Path, log: &[Recorded], switch_port: u16, controller_port: u16) -> std::io::Result<()> {
    let mut out = Vec::new();
    // Global header: magic, version 2.4, timezone 0, sigfigs 0, snaplen, Ethernet.
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&262_144u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());

    let mut seq = [1000u32, 5000u32]; // per direction: [switch→controller, controller→switch]
    let mut n = 0u32;
    for rec in log {
        let (from, to, d) = match rec.dir {
            Dir::SwitchToController => (switch_port, controller_port, 0),
            Dir::ControllerToSwitch => (controller_port, switch_port, 1),
        };
        for chunk in rec.bytes.chunks(MSS) {
            let ack = seq[1 - d];
            let segment = tcp_segment(from, to, seq[d], ack, chunk);
            seq[d] = seq[d].wrapping_add(chunk.len() as u32);
            n += 1;
            out.extend_from_slice(&n.to_le_bytes()); // ts_sec: one second per segment
            out.extend_from_slice(&0u32.to_le_bytes());
            out.extend_from_slice(&(segment.len() as u32).to_le_bytes());
            out.extend_from_slice(&(segment.len() as u32).to_le_bytes());
            out.extend_from_slice(&segment);
        }
    }
    std::fs::File::create(path)?.write_all(&out)
}

fn tcp_segment(from: u16, to: u16, seq: u32, ack: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(54 + payload.len());
    f.extend_from_slice(&[0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 2, 0x08, 0x00]);
    let total = (40 + payload.len()) as u16;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1]);
    let c = crate::frames::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&from.to_be_bytes());
    f.extend_from_slice(&to.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&ack.to_be_bytes());
    // Data offset 5 words; flags PSH|ACK; window; checksum 0 (unchecked); urgent 0.
    f.extend_from_slice(&[0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    f.extend_from_slice(payload);
    f
}
