//! OpenFlow sessions as pcapng files, for Wireshark and tshark.
//!
//! A trace records each OpenFlow message with its bytes (trace v2); this
//! writes them as the TCP streams they crossed: one stream per
//! switch–controller connection (a reconnection starts a new one). Each node
//! has its own loopback address, named in the file (a name-resolution block:
//! with name resolution on, Wireshark shows `s3` and `c0`) and in the
//! section's comment: switch `sN` is 127.1.x.y (`x.y` its datapath id,
//! 127.1.0.3 for s3) on port `40000 + n` (the n-th connection), controller
//! `cN` is 127.0.0.(N+1) on 6653 (OpenFlow's IANA port, so dissectors decode
//! it without being told). Sequence and acknowledgement numbers are
//! consistent, so dissectors reassemble messages split over segments. What
//! the interposition proxy did with a message is its packet's comment
//! (`frame.comment`): dropped (never delivered), or held or delayed.
//!
//! Times are the trace's, from the run's recorded wall-clock epoch. The
//! trace keeps milliseconds; records in the same millisecond are spread
//! over its microseconds in the trace's order ([`Clock`]), so a burst keeps
//! its order in Wireshark (and across the two files when merged) instead of
//! reading as one instant. The file format is `pcap-file`'s pcapng.
//!
//! The hosts' frames (trace records of kind `frame`) go into a second file,
//! a pcapng with one interface per host named after it ([`write_frames`]),
//! as a capture on every host's interface at once would show them.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use std::borrow::Cow;

use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{InterfaceDescriptionBlock, InterfaceDescriptionOption};
use pcap_file::pcapng::blocks::name_resolution::{Ipv4Record, NameResolutionBlock, Record};
use pcap_file::pcapng::blocks::section_header::{SectionHeaderBlock, SectionHeaderOption};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;
use sts_trace::{Direction, Internal, Trace};

/// The controller's port in the capture.
pub const CONTROLLER_PORT: u16 = 6653;

/// Switch `dpid`'s address in the capture: 127.1.x.y.
pub fn switch_addr(dpid: u64) -> [u8; 4] {
    [127, 1, (dpid >> 8) as u8, dpid as u8]
}

/// Controller `c`'s address in the capture: 127.0.0.(c+1).
pub fn controller_addr(c: usize) -> [u8; 4] {
    [127, 0, 0, (c as u8).wrapping_add(1)]
}

/// The time of each record of a trace in a capture: the record's
/// millisecond, plus one microsecond per earlier record in that millisecond
/// (the trace's order), up to 999.
pub struct Clock {
    epoch: Duration,
    last_ms: Option<u64>,
    within: u64,
}

impl Clock {
    /// Times from `trace`'s recorded wall-clock epoch.
    pub fn of(trace: &Trace) -> Clock {
        Clock { epoch: Duration::from_nanos(trace.header.wall_epoch_ns.unwrap_or(0)), last_ms: None, within: 0 }
    }

    /// The time of the next record, at `t_ms` on the run's clock (records
    /// in the trace's order).
    pub fn at(&mut self, t_ms: u64) -> Duration {
        if self.last_ms == Some(t_ms) {
            self.within = (self.within + 1).min(999);
        } else {
            self.last_ms = Some(t_ms);
            self.within = 0;
        }
        self.epoch + Duration::from_millis(t_ms) + Duration::from_micros(self.within)
    }
}
/// The first switch-side port; stream `n` uses `FIRST_SWITCH_PORT + n`.
pub const FIRST_SWITCH_PORT: u16 = 40000;
/// Payload bytes per TCP segment.
const MSS: usize = 1448;

/// TCP streams written into a pcapng (one Ethernet interface, microsecond
/// times).
pub struct TcpStreams<W: Write> {
    writer: PcapNgWriter<W>,
    /// Per stream: next sequence number from the switch, from the controller.
    seq: Vec<[u32; 2]>,
    /// Per stream: the switch's and the controller's address.
    ends: Vec<([u8; 4], [u8; 4])>,
}

/// A stream opened by [`TcpStreams::open`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamId(usize);

impl<W: Write> TcpStreams<W> {
    /// A pcapng written to `w`, without names.
    pub fn new(w: W) -> std::io::Result<TcpStreams<W>> {
        TcpStreams::with_names(w, "", &[])
    }

    /// A pcapng written to `w`: `comment` on its section, and `names` (a
    /// name for each address) in a name-resolution block.
    pub fn with_names(w: W, comment: &str, names: &[(String, [u8; 4])]) -> std::io::Result<TcpStreams<W>> {
        let err = std::io::Error::other;
        let mut options =
            vec![SectionHeaderOption::UserApplication(Cow::Owned(format!("sts {}", env!("CARGO_PKG_VERSION"))))];
        if !comment.is_empty() {
            options.push(SectionHeaderOption::Comment(Cow::Owned(comment.to_string())));
        }
        let section = SectionHeaderBlock { options, ..SectionHeaderBlock::default() };
        let mut writer = PcapNgWriter::with_section_header(w, section).map_err(err)?;
        let interface = InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0,
            options: vec![
                InterfaceDescriptionOption::IfName(Cow::Borrowed("openflow")),
                InterfaceDescriptionOption::IfTsResol(6),
            ],
        };
        writer.write_pcapng_block(interface).map_err(err)?;
        if !names.is_empty() {
            let records = names
                .iter()
                .map(|(name, addr)| {
                    Record::Ipv4(Ipv4Record {
                        ip_addr: Cow::Owned(addr.to_vec()),
                        names: vec![Cow::Owned(name.clone())],
                    })
                })
                .chain(std::iter::once(Record::End))
                .collect();
            writer.write_pcapng_block(NameResolutionBlock { records, options: Vec::new() }).map_err(err)?;
        }
        Ok(TcpStreams { writer, seq: Vec::new(), ends: Vec::new() })
    }

    /// A new connection between 127.0.0.1 and 127.0.0.1.
    pub fn open(&mut self) -> StreamId {
        self.open_between([127, 0, 0, 1], [127, 0, 0, 1])
    }

    /// A new connection between a switch and a controller at these addresses.
    pub fn open_between(&mut self, switch: [u8; 4], controller: [u8; 4]) -> StreamId {
        self.seq.push([1_000, 1_000_000]);
        self.ends.push((switch, controller));
        StreamId(self.seq.len() - 1)
    }

    /// `bytes` sent on `stream` at `at` (since the Unix epoch), by the
    /// switch or by the controller, in segments of at most 1,448 bytes.
    pub fn send(&mut self, stream: StreamId, from_switch: bool, at: Duration, bytes: &[u8]) -> std::io::Result<()> {
        self.send_with_comment(stream, from_switch, at, bytes, None)
    }

    /// [`TcpStreams::send`], with a comment on the first segment.
    pub fn send_with_comment(
        &mut self,
        stream: StreamId,
        from_switch: bool,
        at: Duration,
        bytes: &[u8],
        comment: Option<&str>,
    ) -> std::io::Result<()> {
        let switch_port = FIRST_SWITCH_PORT.wrapping_add(stream.0 as u16);
        let (sw, ctl) = self.ends[stream.0];
        let (from, to, d) = if from_switch {
            ((sw, switch_port), (ctl, CONTROLLER_PORT), 0)
        } else {
            ((ctl, CONTROLLER_PORT), (sw, switch_port), 1)
        };
        for (i, chunk) in bytes.chunks(MSS).enumerate() {
            let seq = &mut self.seq[stream.0];
            let segment = tcp_segment(from, to, seq[d], seq[1 - d], chunk);
            seq[d] = seq[d].wrapping_add(chunk.len() as u32);
            let options = match comment {
                Some(c) if i == 0 => vec![EnhancedPacketOption::Comment(Cow::Borrowed(c))],
                _ => Vec::new(),
            };
            let packet = EnhancedPacketBlock {
                interface_id: 0,
                timestamp: at,
                original_len: segment.len() as u32,
                data: Cow::Borrowed(&segment),
                options,
            };
            self.writer.write_pcapng_block(packet).map_err(std::io::Error::other)?;
        }
        Ok(())
    }

    /// The underlying writer, flushed.
    pub fn into_inner(self) -> W {
        self.writer.into_inner()
    }
}

/// What [`write_trace`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    /// OpenFlow messages written.
    pub messages: usize,
    /// TCP connections they crossed.
    pub connections: usize,
    /// Messages the trace recorded without their bytes (a version-1 trace).
    pub without_bytes: usize,
    /// Messages the proxy dropped (written, with a comment saying so: their
    /// receiver never got them).
    pub dropped: usize,
    /// Messages the proxy held or delayed (written, with a comment).
    pub queued: usize,
    /// Who is who: (name, address) of every switch and controller written,
    /// switches first, each in order.
    pub legend: Vec<(String, [u8; 4])>,
}

impl Written {
    /// The legend in a line: `s1 127.1.0.1, s2 127.1.0.2, c0 127.0.0.1`.
    pub fn legend_line(&self) -> String {
        let addr = |a: &[u8; 4]| format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3]);
        self.legend.iter().map(|(n, a)| format!("{n} {}", addr(a))).collect::<Vec<_>>().join(", ")
    }
}

/// Writes every OpenFlow message of `trace` that carries its bytes into `w`
/// as a pcapng. A HELLO in a direction that already sent one on a
/// connection starts a new connection (the switch reconnected). A message
/// the proxy dropped or held is written with a comment saying so.
pub fn write_trace<W: Write>(trace: &Trace, w: W) -> std::io::Result<(Written, W)> {
    let mut written = Written::default();
    let (mut switches, mut controllers) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
    for r in &trace.records {
        if let Some(Internal::Openflow { dpid, controller, raw: Some(_), .. }) = r.internal() {
            switches.insert(*dpid);
            controllers.insert(*controller);
        }
    }
    written.legend = switches.iter().map(|&d| (format!("s{d}"), switch_addr(d))).collect();
    written.legend.extend(controllers.iter().map(|&c| (format!("c{c}"), controller_addr(c))));
    let comment =
        format!("OpenFlow sessions recorded by sts (controllers on port {CONTROLLER_PORT}): {}", written.legend_line());
    let mut streams = TcpStreams::with_names(w, &comment, &written.legend)?;
    // (dpid, controller) → (its current stream, the directions that said HELLO on it).
    let mut current: BTreeMap<(u64, usize), (StreamId, [bool; 2])> = BTreeMap::new();
    let mut clock = Clock::of(trace);
    let dropped_later = crate::html::dropped_after_holding(trace);
    // When each queued message went on (its `delivered` record), if known.
    let delivered = trace.deliveries();
    for record in &trace.records {
        let at = clock.at(record.t_ms);
        let Some(Internal::Openflow { dpid, controller, dir, msg, raw, proxy, .. }) = record.internal() else {
            continue;
        };
        let Some(raw) = raw else {
            written.without_bytes += 1;
            continue;
        };
        // The receiver's name, only for a message the proxy did not pass.
        let to = || match dir {
            Direction::ToController => format!("c{controller}"),
            Direction::ToSwitch => format!("s{dpid}"),
        };
        let comment = if dropped_later.contains(&record.seq) {
            written.dropped += 1;
            Some(format!("sts: held by the proxy, then dropped: {} never received it (seq {})", to(), record.seq))
        } else {
            match proxy {
                Some(sts_trace::ProxyDecision::Dropped) => {
                    written.dropped += 1;
                    Some(format!("sts: dropped by the proxy: {} never received it (seq {})", to(), record.seq))
                }
                Some(sts_trace::ProxyDecision::Queued) => {
                    written.queued += 1;
                    Some(match delivered.get(&record.seq).map(|&i| (trace.records[i].seq, trace.records[i].t_ms)) {
                        Some((dseq, dt)) => format!(
                            "sts: held or delayed by the proxy {} ms: {} received it at {dt} ms (seq {}, delivered at seq {dseq})",
                            dt.saturating_sub(record.t_ms),
                            to(),
                            record.seq
                        ),
                        None => format!("sts: held or delayed by the proxy: {} received it later (seq {})", to(), record.seq),
                    })
                }
                None => None,
            }
        };
        let from_switch = *dir == Direction::ToController;
        let d = usize::from(!from_switch);
        let hello = msg.as_str() == "hello";
        let entry = current.entry((*dpid, *controller));
        let (stream, hellos) = match entry {
            std::collections::btree_map::Entry::Vacant(v) => {
                written.connections += 1;
                v.insert((streams.open_between(switch_addr(*dpid), controller_addr(*controller)), [false; 2]))
            }
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
        };
        if hello && hellos[d] {
            written.connections += 1;
            *stream = streams.open_between(switch_addr(*dpid), controller_addr(*controller));
            *hellos = [false; 2];
        }
        hellos[d] |= hello;
        streams.send_with_comment(*stream, from_switch, at, raw, comment.as_deref())?;
        written.messages += 1;
    }
    Ok((written, streams.into_inner()))
}

/// An Ethernet/IPv4/TCP segment from `(address, port)` to another.
fn tcp_segment(from: ([u8; 4], u16), to: ([u8; 4], u16), seq: u32, ack: u32, payload: &[u8]) -> Vec<u8> {
    let ((src, from), (dst, to)) = (from, to);
    let mut f = Vec::with_capacity(54 + payload.len());
    // Ethernet: two locally administered MACs, IPv4.
    f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00]);
    let total = (40 + payload.len()) as u16;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&total.to_be_bytes());
    // id 0, don't fragment, TTL 64, TCP, checksum (below), addresses.
    ip.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]);
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let c = sts_mocknet::packet::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&from.to_be_bytes());
    f.extend_from_slice(&to.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&ack.to_be_bytes());
    // Data offset 5 words; PSH|ACK; window; checksum 0 (not verified by
    // default: captures on loopback carry offloaded checksums too); urgent 0.
    f.extend_from_slice(&[0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    f.extend_from_slice(payload);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ipv4_checksum_verifies() {
        let seg = tcp_segment(([127, 1, 0, 3], 40000), ([127, 0, 0, 1], 6653), 1, 2, b"x");
        assert_eq!(sts_mocknet::packet::checksum(&seg[14..34]), 0, "a header with its checksum sums to zero");
    }

    #[test]
    fn long_messages_are_cut_into_segments_with_running_sequence_numbers() {
        let mut s = TcpStreams::new(Vec::new()).unwrap();
        let a = s.open();
        s.send(a, true, Duration::from_secs(1), &[0u8; 3000]).unwrap();
        s.send(a, false, Duration::from_secs(2), &[0u8; 10]).unwrap();
        assert_eq!(s.seq[0], [1_000 + 3000, 1_000_000 + 10]);
        let bytes = s.into_inner();
        let mut reader = pcap_file::pcapng::PcapNgReader::new(&bytes[..]).unwrap();
        let mut lens = Vec::new();
        while let Some(block) = reader.next_block() {
            if let pcap_file::pcapng::Block::EnhancedPacket(p) = block.unwrap() {
                lens.push(p.data.len());
            }
        }
        // 3 segments from the switch and 1 back, each 54 bytes of headers
        // plus its payload.
        assert_eq!(lens, vec![54 + 1448, 54 + 1448, 54 + 104, 54 + 10]);
    }

    #[test]
    fn records_in_one_millisecond_keep_their_order_in_microseconds() {
        let mut c = Clock { epoch: Duration::ZERO, last_ms: None, within: 0 };
        let t: Vec<u128> = [5, 5, 5, 6, 6, 9].iter().map(|&ms| c.at(ms).as_micros()).collect();
        assert_eq!(t, vec![5_000, 5_001, 5_002, 6_000, 6_001, 9_000]);
        for _ in 0..2_000 {
            c.at(9);
        }
        assert_eq!(c.at(9).as_micros(), 9_999, "never into the next millisecond");
        assert_eq!(switch_addr(3), [127, 1, 0, 3]);
        assert_eq!(switch_addr(0x1_02), [127, 1, 1, 2]);
        assert_eq!(controller_addr(0), [127, 0, 0, 1]);
    }
}

/// What [`write_frames`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FramesWritten {
    /// Frames written.
    pub frames: usize,
    /// Host interfaces (one per host that sent or received a frame).
    pub hosts: usize,
}

/// pcapng `epb_flags` direction bits: inbound, outbound.
const INBOUND: u32 = 0b01;
const OUTBOUND: u32 = 0b10;

/// Writes every host frame of `trace` into `w` as a pcapng: an Ethernet
/// interface per host (`if_name` the host's name, in the order h1, h2 ...,
/// nanosecond timestamps), each frame on its host's interface, marked
/// outbound when the host sent it and inbound when it received it.
pub fn write_frames<W: Write>(trace: &Trace, w: W) -> std::io::Result<(FramesWritten, W)> {
    // Timed over every record, as in the OpenFlow capture, so that the two
    // files merge in the trace's order.
    let mut clock = Clock::of(trace);
    let frames: Vec<(Duration, &str, bool, &[u8])> = trace
        .records
        .iter()
        .filter_map(|r| {
            let at = clock.at(r.t_ms);
            match r.internal() {
                Some(Internal::Frame { host, sent, raw: Some(raw) }) => Some((at, host.as_str(), *sent, &raw[..])),
                _ => None,
            }
        })
        .collect();
    let mut hosts: Vec<&str> = frames.iter().map(|f| f.1).collect();
    let number = |h: &str| h.trim_start_matches(|c: char| !c.is_ascii_digit()).parse::<u64>().unwrap_or(u64::MAX);
    hosts.sort_by_key(|h| (number(h), h.to_string()));
    hosts.dedup();
    let err = std::io::Error::other;
    let mut writer = PcapNgWriter::new(w).map_err(err)?;
    for h in &hosts {
        let idb = InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0,
            options: vec![
                InterfaceDescriptionOption::IfName(Cow::Borrowed(h)),
                InterfaceDescriptionOption::IfTsResol(9),
            ],
        };
        writer.write_pcapng_block(idb).map_err(err)?;
    }
    for (at, host, sent, raw) in &frames {
        let id = hosts.iter().position(|h| h == host).expect("every host has an interface") as u32;
        let epb = EnhancedPacketBlock {
            interface_id: id,
            timestamp: *at,
            original_len: raw.len() as u32,
            data: Cow::Borrowed(raw),
            options: vec![EnhancedPacketOption::Flags(if *sent { OUTBOUND } else { INBOUND })],
        };
        writer.write_pcapng_block(epb).map_err(err)?;
    }
    Ok((FramesWritten { frames: frames.len(), hosts: hosts.len() }, writer.into_inner()))
}
