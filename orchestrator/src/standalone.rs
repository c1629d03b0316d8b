//! `sts proxy`: interposition between real switches (Open vSwitch in a QA
//! testbed, say) and a controller.
//!
//! Each switch that connects to `listen` gets its own connection to the
//! controller; both directions are framed, recorded and relayed through one
//! shared [`Interposer`]. Channels are numbered by connection order (the
//! channel's `dpid` field is that number: the proxy does not parse FEATURES
//! to learn datapath ids). With a [`Recording`], every message is appended to a
//! JSON Lines file: a header line, then one event per line (a [`Recorded`] plus
//! its fingerprint). A recorder thread fingerprints and writes, off the relay's
//! path, and flushes whenever it has caught up, so a killed proxy leaves a
//! readable file that lacks at most what was queued. The queue is bounded
//! ([`RECORDER_BACKLOG`] batches): beyond it the relay waits for the recorder.
//!
//! [`Recorded`]: sts_proxy::interpose::Recorded

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use sts_proxy::interpose::{ChannelId, Direction, Interposer, Recorded};
use sts_proxy::wire::OfpCodec;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::FramedRead;

use crate::clock::Clock;

/// Batches the recorder may trail the relay by before the relay waits.
pub const RECORDER_BACKLOG: usize = 1024;

/// The first line of a recording.
pub const RECORDING_HEADER: &str = r#"{"format":"sts-openflow-recording","version":1}"#;

/// Where recorded events go: a recorder thread writing a JSON Lines file.
#[derive(Clone)]
pub struct Recording {
    tx: std::sync::mpsc::SyncSender<Vec<Recorded>>,
    written: Arc<std::sync::atomic::AtomicU64>,
}

impl Recording {
    /// Events written to the file so far (the recorder may trail the relay).
    pub fn written(&self) -> u64 {
        self.written.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The recorder thread; [`RecorderHandle::finish`] waits until every event
/// sent to it is written.
pub struct RecorderHandle {
    thread: std::thread::JoinHandle<std::io::Result<u64>>,
}

impl RecorderHandle {
    /// Waits for the recorder to write everything (all [`Recording`] clones
    /// must be dropped first) and returns how many events it wrote.
    pub fn finish(self) -> std::io::Result<u64> {
        self.thread.join().map_err(|_| std::io::Error::other("the recorder thread panicked"))?
    }
}

#[derive(serde::Serialize)]
struct Line<'a> {
    #[serde(flatten)]
    event: &'a Recorded,
    fingerprint: sts_proxy::wire::Fingerprint,
}

/// Creates `path` with the recording header and starts the recorder thread.
pub fn record_to(path: &Path) -> std::io::Result<(Recording, RecorderHandle)> {
    let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(w, "{RECORDING_HEADER}")?;
    w.flush()?;
    // Bounded: when the recorder falls this far behind, the relay waits for it
    // (backpressure) rather than queueing without limit. Nothing is dropped.
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Recorded>>(RECORDER_BACKLOG);
    let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let shared_counter = counter.clone();
    let thread = std::thread::Builder::new().name("sts-recorder".into()).spawn(move || {
        let mut written = 0u64;
        while let Ok(batch) = rx.recv() {
            let mut next = Some(batch);
            while let Some(events) = next {
                for e in &events {
                    serde_json::to_writer(&mut w, &Line { event: e, fingerprint: e.fingerprint() })?;
                    w.write_all(b"\n")?;
                    written += 1;
                }
                shared_counter.store(written, std::sync::atomic::Ordering::Relaxed);
                next = rx.try_recv().ok();
            }
            w.flush()?; // caught up: make everything so far readable
        }
        w.flush()?;
        Ok(written)
    })?;
    Ok((Recording { tx, written: counter }, RecorderHandle { thread }))
}

struct Shared {
    interposer: Interposer,
    record: Option<Recording>,
    clock: Clock,
}

impl Shared {
    /// Records a message and returns the bytes to forward now.
    fn pass(&mut self, channel: ChannelId, dir: Direction, frame: sts_proxy::wire::Frame) -> Vec<bytes::Bytes> {
        let now = self.clock.now();
        let out = self.interposer.on_message(channel, dir, frame, now);
        // The standalone proxy passes; what is delivered belongs to this channel.
        // (Records stay in the interposer's log until `flush_records`.)
        out.into_iter().filter(|d| d.channel == channel && d.dir == dir).map(|d| d.frame.bytes().clone()).collect()
    }
}

impl Shared {
    /// Hands the events recorded so far to the recorder thread.
    fn flush_records(&mut self) {
        let events = self.interposer.take_log();
        match &self.record {
            Some(r) if !events.is_empty() => {
                let _ = r.tx.send(events);
            }
            _ => {}
        }
    }
}

/// Binds `listen` and relays every switch connection to `controller` until
/// the task is dropped. Reports the bound address through `ready`.
pub async fn run(
    listen: SocketAddr,
    controller: SocketAddr,
    record: Option<Recording>,
    ready: Option<tokio::sync::oneshot::Sender<SocketAddr>>,
) -> std::io::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    let shared = Arc::new(Mutex::new(Shared { interposer: Interposer::default(), record, clock: Clock::start() }));
    if let Some(tx) = ready {
        let _ = tx.send(listener.local_addr()?);
    }
    let mut next = 0u64;
    loop {
        let (switch, peer) = listener.accept().await?;
        let channel = ChannelId { dpid: next, controller: 0 };
        next += 1;
        let shared = shared.clone();
        tokio::spawn(async move {
            let ctl = match TcpStream::connect(controller).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("switch {peer}: cannot reach the controller at {controller}: {e}");
                    return;
                }
            };
            let _ = switch.set_nodelay(true);
            let _ = ctl.set_nodelay(true);
            let (sr, sw) = switch.into_split();
            let (cr, cw) = ctl.into_split();
            let up = pump(sr, cw, channel, Direction::SwitchToController, shared.clone());
            let down = pump(cr, sw, channel, Direction::ControllerToSwitch, shared);
            // When either side closes, the whole channel ends.
            tokio::select! {
                r = up => if let Err(e) = r { tracing::info!("channel {}: {e}", channel.dpid) },
                r = down => if let Err(e) = r { tracing::info!("channel {}: {e}", channel.dpid) },
            }
        });
    }
}

/// Relays one direction. Frames already buffered are taken as a batch (one
/// lock, one hand-off to the recorder, one write); a lone frame goes at once.
async fn pump(
    from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    channel: ChannelId,
    dir: Direction,
    shared: Arc<Mutex<Shared>>,
) -> Result<(), String> {
    let mut batches = FramedRead::new(from, OfpCodec).ready_chunks(256);
    let mut out = Vec::with_capacity(1 << 16);
    while let Some(batch) = batches.next().await {
        out.clear();
        let mut failure = None;
        {
            let mut shared = shared.lock().map_err(|_| "recorder lock poisoned".to_string())?;
            for frame in batch {
                match frame {
                    Ok(frame) => shared.pass(channel, dir, frame).iter().for_each(|b| out.extend_from_slice(b)),
                    Err(e) => {
                        failure = Some(format!("bad framing ({dir:?}): {e}"));
                        break;
                    }
                }
            }
            shared.flush_records();
        }
        to.write_all(&out).await.map_err(|e| e.to_string())?;
        if let Some(f) = failure {
            return Err(f);
        }
    }
    Ok(())
}

/// The `sts proxy` command.
pub fn command(listen: &str, controller: &str, record: Option<&Path>) -> u8 {
    use crate::cli::exit;
    let parse = |what: &str, s: &str| s.parse::<SocketAddr>().map_err(|e| format!("--{what} {s:?}: {e} (expected IP:PORT)"));
    let (listen, controller) = match (parse("listen", listen), parse("controller", controller)) {
        (Ok(l), Ok(c)) => (l, c),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("sts proxy: {e}");
            return exit::BAD_INPUT;
        }
    };
    let rt = match crate::session::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sts proxy: {e}");
            return e.exit_code();
        }
    };
    let (recording, recorder) = match record.map(record_to).transpose() {
        Ok(Some((r, h))) => (Some(r), Some(h)),
        Ok(None) => (None, None),
        Err(e) => {
            eprintln!("sts proxy: cannot record to {}: {e}", record.map(|p| p.display().to_string()).unwrap_or_default());
            return exit::ENVIRONMENT;
        }
    };
    eprintln!("sts proxy: switches -> {listen} -> controller {controller}{}", record.map_or(String::new(), |p| format!(", recording to {}", p.display())));
    let result = rt.block_on(async {
        tokio::select! {
            r = run(listen, controller, recording, None) => r,
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    });
    drop(rt); // ends the relay tasks, and with them every handle on the recording
    if let Some(h) = recorder {
        match h.finish() {
            Ok(n) => eprintln!("sts proxy: {n} messages recorded"),
            Err(e) => eprintln!("sts proxy: recording incomplete: {e}"),
        }
    }
    match result {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("sts proxy: {e}");
            exit::ENVIRONMENT
        }
    }
}
