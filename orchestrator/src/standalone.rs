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
//! readable file that lacks at most the last batch.
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

/// The first line of a recording.
pub const RECORDING_HEADER: &str = r#"{"format":"sts-openflow-recording","version":1}"#;

/// Where recorded events go: a recorder thread writing a JSON Lines file.
#[derive(Clone)]
pub struct Recording {
    tx: std::sync::mpsc::Sender<Vec<Recorded>>,
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
    let (tx, rx) = std::sync::mpsc::channel::<Vec<Recorded>>();
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
                next = rx.try_recv().ok();
            }
            w.flush()?; // caught up: make everything so far readable
        }
        w.flush()?;
        Ok(written)
    })?;
    Ok((Recording { tx }, RecorderHandle { thread }))
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
        let events = self.interposer.take_log();
        if let Some(r) = &self.record {
            let _ = r.tx.send(events);
        }
        // The standalone proxy passes; what is delivered belongs to this channel.
        out.into_iter().filter(|d| d.channel == channel && d.dir == dir).map(|d| d.frame.bytes().clone()).collect()
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

async fn pump(
    from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    channel: ChannelId,
    dir: Direction,
    shared: Arc<Mutex<Shared>>,
) -> Result<(), String> {
    let mut frames = FramedRead::new(from, OfpCodec);
    while let Some(frame) = frames.next().await {
        let frame = frame.map_err(|e| format!("bad framing ({dir:?}): {e}"))?;
        let out = shared.lock().map_err(|_| "recorder lock poisoned".to_string())?.pass(channel, dir, frame);
        for bytes in out {
            to.write_all(&bytes).await.map_err(|e| e.to_string())?;
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
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sts proxy: {e}");
            return exit::ENVIRONMENT;
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
