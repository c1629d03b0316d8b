//! `sts proxy`: interposition between real switches (Open vSwitch in a QA
//! testbed, say) and a controller.
//!
//! Each switch that connects to `listen` gets its own connection to the
//! controller; both directions are framed, recorded and relayed through one
//! shared [`Interposer`]. Channels are numbered by connection order (the
//! channel's `dpid` field is that number); the interposer learns each
//! switch's datapath id from its FEATURES_REPLY, so rules can select a switch
//! by that id too. With a [`Recording`], every message is appended to a
//! JSON Lines file: a header line, then one event per line (a [`Recorded`],
//! its bytes in hex). The fingerprint is not written: it is a function of the
//! bytes, computed where it is needed ([`Recorded::fingerprint`], `sts
//! import`), which keeps decoding off the recording path (version 1 files
//! carried it; readers accept both). A recorder thread writes, off the relay's
//! path, and flushes whenever it has caught up, so a killed proxy leaves a
//! readable file that lacks at most what was queued. The queue is bounded
//! ([`RECORDER_BACKLOG`] batches): beyond it the relay waits for the recorder.
//!
//! A fault policy ([`parse_fault_rules`]: `--drop TYPE`, `--delay TYPE=MS`) applies
//! to every channel; echo messages always pass. Every direction of a channel
//! is written by its own writer task, fed in order by the relay and, for
//! delayed messages, by a ticker, so a delay keeps the connection's order (what
//! follows a delayed message waits behind it).
//!
//! The proxy reads no clock of its own: the caller passes a [`Now`] (sts
//! passes its run clock), so time is read in one place only.
//!
//! [`Recorded`]: crate::interpose::Recorded

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::interpose::{Action, ChannelId, Direction, Interposer, Recorded, Rule};
use crate::wire::OfpCodec;
use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::FramedRead;

/// Milliseconds since the proxy started, from the caller's clock.
pub type Now = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Batches the recorder may trail the relay by before the relay waits.
pub const RECORDER_BACKLOG: usize = 1024;

/// The first line of a recording.
pub const RECORDING_HEADER: &str = r#"{"format":"sts-openflow-recording","version":2}"#;

/// The first line of a version-1 recording (each line also carried its
/// fingerprint); still read.
pub const RECORDING_HEADER_V1: &str = r#"{"format":"sts-openflow-recording","version":1}"#;

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

/// Creates `path` with the recording header and starts the recorder thread.
///
/// The file only ever grows by whole lines: each catch-up is formatted in
/// memory and appended with one write, and a write that fails (a full disk)
/// is cut back to the last whole line before the error is returned. A proxy
/// killed mid-run leaves a file whose every line parses.
pub fn record_to(path: &Path) -> std::io::Result<(Recording, RecorderHandle)> {
    // Never over an existing file (someone's recording), nor through a link.
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(path)?;
    let header = format!("{RECORDING_HEADER}\n");
    file.write_all(header.as_bytes())?;
    let mut whole = header.len() as u64;
    // Bounded: when the recorder falls this far behind, the relay waits for it
    // (backpressure) rather than queueing without limit. Nothing is dropped.
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Recorded>>(RECORDER_BACKLOG);
    let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let shared_counter = counter.clone();
    let thread = std::thread::Builder::new().name("sts-recorder".into()).spawn(move || {
        let mut written = 0u64;
        let mut lines = Vec::with_capacity(1 << 16);
        let mut append = |lines: &mut Vec<u8>| -> std::io::Result<()> {
            if let Err(e) = file.write_all(lines) {
                let _ = file.set_len(whole); // no half line left behind
                return Err(e);
            }
            whole += lines.len() as u64;
            lines.clear();
            Ok(())
        };
        while let Ok(batch) = rx.recv() {
            let mut next = Some(batch);
            while let Some(events) = next {
                for e in &events {
                    serde_json::to_writer(&mut lines, e)?;
                    lines.push(b'\n');
                    written += 1;
                }
                if lines.len() >= 1 << 20 {
                    append(&mut lines)?;
                }
                shared_counter.store(written, std::sync::atomic::Ordering::Relaxed);
                next = rx.try_recv().ok();
            }
            append(&mut lines)?; // caught up: everything so far is in the file
        }
        Ok(written)
    })?;
    Ok((Recording { tx, written: counter }, RecorderHandle { thread }))
}

struct Shared {
    interposer: Interposer,
    record: Option<Recording>,
    now: Now,
    /// The writer task of each channel direction.
    writers: std::collections::HashMap<(ChannelId, Direction), tokio::sync::mpsc::Sender<bytes::Bytes>>,
}

/// Batches a writer task may trail its relay by.
const WRITER_BACKLOG: usize = 256;

/// Parses a fault policy from `--drop TYPE` and `--delay TYPE=MS` values
/// (message type names as recorded: `flow_mod`, `packet_in` ...).
pub fn parse_fault_rules(drop: &[String], delay: &[String]) -> Result<Vec<Rule>, String> {
    let known = crate::wire::type_names();
    let check = |flag: &str, t: &str| {
        if known.contains(&t) {
            Ok(t.to_string())
        } else {
            Err(format!("--{flag} {t:?}: unknown message type (known: {})", known.join(", ")))
        }
    };
    let mut rules = Vec::new();
    for t in drop {
        rules.push(Rule {
            dir: None,
            dpid: None,
            msg_type: Some(check("drop", t)?),
            action: Action::Drop,
            ..Default::default()
        });
    }
    for d in delay {
        let (t, ms) = d.split_once('=').ok_or_else(|| format!("--delay {d:?}: expected TYPE=MS, e.g. flow_mod=200"))?;
        let ms: u64 = ms.parse().map_err(|_| format!("--delay {d:?}: {ms:?} is not a number of milliseconds"))?;
        rules.push(Rule {
            dir: None,
            dpid: None,
            msg_type: Some(check("delay", t)?),
            action: Action::Delay(ms),
            ..Default::default()
        });
    }
    Ok(rules)
}

impl Shared {
    /// Records a message and returns the bytes to forward now, on this
    /// channel direction (a message only ever releases its own queue).
    /// Records stay in the interposer's log until `flush_records`.
    fn pass(&mut self, channel: ChannelId, dir: Direction, frame: crate::wire::Frame) -> Vec<bytes::Bytes> {
        let now = (self.now)();
        let out = self.interposer.on_message(channel, dir, frame, now);
        out.into_iter().filter(|d| d.channel == channel && d.dir == dir).map(|d| d.frame.bytes().clone()).collect()
    }
}

impl Shared {
    /// Hands the events recorded so far to the recorder thread.
    fn flush_records(&mut self) {
        let events = self.interposer.take_log();
        // A recording keeps arrivals only (its format has no delivery record).
        self.interposer.take_delivered();
        match &self.record {
            Some(r) if !events.is_empty() => {
                let _ = r.tx.send(events);
            }
            _ => {}
        }
    }
}

/// Binds `listen` and relays every switch connection to `controller` until
/// the task is dropped, with message times from `now`. Reports the bound
/// address through `ready`. At most `max_switches` switches are relayed at
/// once (each costs two descriptors): later ones are closed at once, with a
/// warning, until some leave; a failing `accept` (out of descriptors) is
/// retried, never fatal.
pub async fn run(
    listen: SocketAddr,
    controller: SocketAddr,
    record: Option<Recording>,
    policy: Vec<Rule>,
    max_switches: usize,
    now: Now,
    ready: Option<tokio::sync::oneshot::Sender<SocketAddr>>,
) -> std::io::Result<()> {
    let proxy = Proxy::bind(listen, controller, record, policy, max_switches, now).await?;
    if let Some(tx) = ready {
        let _ = tx.send(proxy.local_addr());
    }
    proxy.serve().await
}

/// A bound proxy, before it serves; [`Proxy::control`] gives a handle that
/// changes it while it runs.
pub struct Proxy {
    listener: TcpListener,
    controller: SocketAddr,
    max_switches: usize,
    shared: Arc<Mutex<Shared>>,
    active: Arc<std::sync::atomic::AtomicUsize>,
    /// Whether the delivery ticker must run (delays now, or a policy that
    /// may change).
    ticker: bool,
}

/// Changes a running proxy: its fault policy, its held messages; and says
/// how it is doing. Cheap to clone.
#[derive(Clone)]
pub struct Control {
    shared: Arc<Mutex<Shared>>,
    active: Arc<std::sync::atomic::AtomicUsize>,
}

/// What a running proxy has done so far.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// Switches relayed right now.
    pub switches: usize,
    /// Messages seen so far (both directions, every switch).
    pub messages: u64,
    /// Messages held or delayed right now.
    pub queued: usize,
    /// Events written to the recording so far.
    pub recorded: u64,
    /// The datapath id each switch gave in its FEATURES_REPLY, by
    /// connection number (every switch that got that far, gone or not).
    pub datapath_ids: std::collections::BTreeMap<u64, u64>,
}

impl Control {
    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The fault policy in force.
    pub fn fault_rules(&self) -> Vec<Rule> {
        self.lock().interposer.rules().to_vec()
    }

    /// Replaces the fault policy for the messages that come from now on;
    /// messages already held stay held until [`Control::release`].
    pub fn set_fault_rules(&self, rules: Vec<Rule>) {
        self.lock().interposer.set_rules(rules);
    }

    /// Adds `rule` to the fault policy in force (after its other rules).
    pub fn add_fault_rule(&self, rule: Rule) {
        self.lock().interposer.add_rule(rule);
    }

    /// Takes the rules `gone` selects out of the fault policy.
    pub fn remove_fault_rules(&self, gone: impl Fn(&Rule) -> bool) {
        let mut shared = self.lock();
        let kept: Vec<Rule> = shared.interposer.rules().iter().filter(|r| !gone(r)).cloned().collect();
        shared.interposer.set_rules(kept);
    }

    /// Arms a one-shot rule: the next message `rule` selects gets its
    /// action (dropped, delayed), and the rule is gone.
    pub fn arm_once(&self, rule: Rule) {
        self.lock().interposer.arm(rule);
    }

    /// Seeds the draws of rules that apply with a probability or delay
    /// with jitter.
    pub fn seed(&self, seed: u64) {
        self.lock().interposer.seed(seed);
    }

    /// Sends every held message on now (each connection's order kept);
    /// returns how many went.
    pub async fn release(&self) -> usize {
        let out: Vec<(tokio::sync::mpsc::Sender<bytes::Bytes>, bytes::Bytes)> = {
            let mut shared = self.lock();
            let now = (shared.now)();
            let delivered = shared.interposer.release(None, None, now);
            delivered
                .into_iter()
                .filter_map(|d| shared.writers.get(&(d.channel, d.dir)).map(|w| (w.clone(), d.frame.bytes().clone())))
                .collect()
        };
        let n = out.len();
        for (w, b) in out {
            let _ = w.send(b).await;
        }
        n
    }

    /// Switches relayed right now whose FEATURES_REPLY has passed (their
    /// handshake done).
    pub fn connected_datapaths(&self) -> usize {
        let shared = self.lock();
        shared
            .writers
            .keys()
            .map(|(c, _)| *c)
            .collect::<std::collections::BTreeSet<_>>()
            .iter()
            .filter(|c| shared.interposer.datapaths().contains_key(c))
            .count()
    }

    /// What the proxy has done so far.
    pub fn stats(&self) -> Stats {
        let shared = self.lock();
        Stats {
            switches: self.active.load(std::sync::atomic::Ordering::Relaxed),
            messages: shared.interposer.seen(),
            queued: shared.interposer.queued(),
            recorded: shared.record.as_ref().map_or(0, Recording::written),
            datapath_ids: shared.interposer.datapaths().iter().map(|(c, d)| (c.dpid, *d)).collect(),
        }
    }
}

impl Proxy {
    /// Binds `listen`; nothing is relayed until [`Proxy::serve`].
    pub async fn bind(
        listen: SocketAddr,
        controller: SocketAddr,
        record: Option<Recording>,
        policy: Vec<Rule>,
        max_switches: usize,
        now: Now,
    ) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind(listen).await?;
        let ticker = policy.iter().any(|r| matches!(r.action, Action::Delay(_) | Action::Bandwidth(_)));
        let mut interposer = Interposer::default();
        interposer.set_rules(policy);
        let shared = Arc::new(Mutex::new(Shared { interposer, record, now, writers: Default::default() }));
        let active = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        Ok(Proxy { listener, controller, max_switches, shared, active, ticker })
    }

    /// The address switches connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    /// A handle that changes the proxy while it serves.
    pub fn control(&mut self) -> Control {
        // Any policy may come: held messages must be able to go out later.
        self.ticker = true;
        Control { shared: self.shared.clone(), active: self.active.clone() }
    }

    /// Relays every switch connection until the task is dropped; dropping
    /// it also ends every connection it relays.
    pub async fn serve(self) -> std::io::Result<()> {
        let Proxy { listener, controller, max_switches, shared, active, ticker } = self;
        // Every task of this proxy: dropped with it.
        let mut tasks = tokio::task::JoinSet::new();
        if ticker {
            tasks.spawn(deliver_due(shared.clone()));
        }
        let mut next = 0u64;
        let mut refused = 0u64;
        loop {
            while tasks.try_join_next().is_some() {} // reap the connections that ended
            let (switch, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it was
                    // taken: wait for some to be freed and go on.
                    tracing::warn!("cannot accept a switch connection: {e}; retrying");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            if active.load(std::sync::atomic::Ordering::Relaxed) >= max_switches {
                refused += 1;
                if refused.is_power_of_two() {
                    tracing::warn!(
                        "switch {peer} refused: {max_switches} switches are connected already (--max-switches); \
                         {refused} refused so far"
                    );
                }
                drop(switch);
                continue;
            }
            let slot = Slot::take(&active);
            let channel = ChannelId { dpid: next, controller: 0 };
            next += 1;
            let shared = shared.clone();
            tasks.spawn(async move {
                let _slot = slot;
                let ctl = match TcpStream::connect(controller).await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!("switch {peer}: cannot reach the controller at {controller}: {e}");
                        return;
                    }
                };
                tracing::info!("switch {peer} connected (channel {}), relayed to {controller}", channel.dpid);
                let _ = switch.set_nodelay(true);
                let _ = ctl.set_nodelay(true);
                let (sr, sw) = switch.into_split();
                let (cr, cw) = ctl.into_split();
                let up_writer = writer(cw, channel, Direction::SwitchToController, &shared);
                let down_writer = writer(sw, channel, Direction::ControllerToSwitch, &shared);
                let up = pump(sr, up_writer, channel, Direction::SwitchToController, shared.clone());
                let down = pump(cr, down_writer, channel, Direction::ControllerToSwitch, shared.clone());
                // When either side closes, the whole channel ends.
                tokio::select! {
                    r = up => if let Err(e) = r { tracing::info!("channel {}: {e}", channel.dpid) },
                    r = down => if let Err(e) = r { tracing::info!("channel {}: {e}", channel.dpid) },
                }
                if let Ok(mut shared) = shared.lock() {
                    shared.writers.retain(|(c, _), _| *c != channel);
                }
                tracing::info!("switch {peer} left (channel {})", channel.dpid);
            });
        }
    }
}

/// One relayed switch, counted in `active` while it lives.
struct Slot(Arc<std::sync::atomic::AtomicUsize>);

impl Slot {
    fn take(active: &Arc<std::sync::atomic::AtomicUsize>) -> Slot {
        active.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Slot(active.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Starts the writer task of one channel direction and registers it.
fn writer(
    mut to: impl AsyncWrite + Unpin + Send + 'static,
    channel: ChannelId,
    dir: Direction,
    shared: &Arc<Mutex<Shared>>,
) -> tokio::sync::mpsc::Sender<bytes::Bytes> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(WRITER_BACKLOG);
    if let Ok(mut shared) = shared.lock() {
        shared.writers.insert((channel, dir), tx.clone());
    }
    tokio::spawn(async move {
        while let Some(b) = rx.recv().await {
            if to.write_all(&b).await.is_err() {
                return;
            }
        }
    });
    tx
}

/// Delivers delayed messages when they fall due, through their writers.
async fn deliver_due(shared: Arc<Mutex<Shared>>) {
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        let due: Vec<(tokio::sync::mpsc::Sender<bytes::Bytes>, bytes::Bytes)> = {
            let Ok(mut shared) = shared.lock() else { return };
            let now = (shared.now)();
            let delivered = shared.interposer.due(now);
            delivered
                .into_iter()
                .filter_map(|d| shared.writers.get(&(d.channel, d.dir)).map(|w| (w.clone(), d.frame.bytes().clone())))
                .collect()
        };
        for (w, b) in due {
            let _ = w.send(b).await;
        }
    }
}

/// Relays one direction. Frames already buffered are taken as a batch (one
/// lock, one hand-off to the recorder, one write); a lone frame goes at once.
async fn pump(
    from: impl AsyncRead + Unpin,
    to: tokio::sync::mpsc::Sender<bytes::Bytes>,
    channel: ChannelId,
    dir: Direction,
    shared: Arc<Mutex<Shared>>,
) -> Result<(), String> {
    let mut batches = FramedRead::new(from, OfpCodec).ready_chunks(256);
    while let Some(batch) = batches.next().await {
        let mut out = Vec::with_capacity(1 << 12);
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
        if !out.is_empty() {
            to.send(bytes::Bytes::from(out)).await.map_err(|_| format!("{dir:?}: the peer closed"))?;
        }
        if let Some(f) = failure {
            return Err(f);
        }
    }
    Ok(())
}
