//! Writes a recorded OpenFlow session as a pcap of one TCP connection (with
//! `sts_report::pcap`, the writer `sts pcap` uses), so an independent
//! dissector (tshark) reads exactly the bytes that crossed it.

use std::path::Path;
use std::time::Duration;

use sts_report::pcap::TcpStreams;

use crate::{Dir, Recorded};

/// Writes `log` to `path`, one message per second, the controller on
/// [`sts_report::pcap::CONTROLLER_PORT`].
pub fn write(path: &Path, log: &[Recorded]) -> std::io::Result<()> {
    let mut streams = TcpStreams::new(std::io::BufWriter::new(std::fs::File::create(path)?))?;
    let stream = streams.open();
    for (i, rec) in log.iter().enumerate() {
        streams.send(stream, rec.dir == Dir::SwitchToController, Duration::from_secs(i as u64 + 1), &rec.bytes)?;
    }
    std::io::Write::flush(&mut streams.into_inner())
}
