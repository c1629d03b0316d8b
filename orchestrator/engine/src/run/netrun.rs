//! Runs the mock network against real controllers over TCP.
//!
//! One task owns the [`Network`] and processes everything in arrival order;
//! each switch-to-controller connection has a reader task (framing with
//! [`OfpCodec`]) and a writer task. This is where the interposition proxy will
//! sit: every frame in either direction passes through [`NetRunner`].

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
pub use sts_mocknet::Endpoint;
use sts_mocknet::{Network, Recipient, ToController};
use sts_proxy::interpose::{ChannelId, Delivery, Direction, Interposer};
use sts_proxy::wire::{v13, Frame, Message, OfpCodec};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;

use crate::clock::{Clock, Millis};
use crate::finesleep::FineSleep;

/// How often flow timeouts are checked.
const TICK_MS: Millis = 200;
/// How often waiting loops re-check their condition without input.
const POLL_MS: Millis = 20;
/// Connections opened at once (more would overflow small listen backlogs).
pub const CONNECT_PARALLELISM: usize = 64;

enum Inbound {
    Frame { dpid: u64, conn: usize, epoch: u64, frame: Frame },
    Closed { dpid: u64, conn: usize, epoch: u64, why: String },
}

/// What one control connection has in flight on sts's side, for the idle
/// test of virtual time (`docs/virtual-time.md`): shared by the run loop and
/// the connection's reader and writer tasks.
#[derive(Debug, Default)]
struct ConnMeter {
    /// Messages queued for the writer and not yet written to the socket.
    unwritten: std::sync::atomic::AtomicUsize,
    /// The socket's descriptor while the reader holds it (-1 after).
    fd: std::sync::atomic::AtomicI32,
    /// The reader and writer tasks still running.
    tasks: std::sync::atomic::AtomicUsize,
    /// sts closed the connection: until both tasks have ended (and the
    /// socket with them) the close is in flight.
    closing: std::sync::atomic::AtomicBool,
}

impl ConnMeter {
    /// True when nothing is in flight on sts's side of this connection:
    /// every message queued was written, nothing received waits in the
    /// socket for the reader, and a close asked for has happened.
    fn quiet(&self) -> bool {
        use std::sync::atomic::Ordering::Acquire;
        if self.unwritten.load(Acquire) != 0 {
            return false;
        }
        if self.closing.load(Acquire) && self.tasks.load(Acquire) != 0 {
            return false;
        }
        let fd = self.fd.load(Acquire);
        if fd < 0 {
            return true;
        }
        let mut unread: nix::libc::c_int = 0;
        // SAFETY: FIONREAD writes one int; a descriptor closed meanwhile
        // fails (the connection is gone: nothing to read).
        let r = unsafe { nix::libc::ioctl(fd, nix::libc::FIONREAD, &mut unread) };
        r != 0 || unread == 0
    }

    fn close(&self) {
        self.closing.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// Ends a connection task's part in its [`ConnMeter`] however the task ends
/// (finished, failed, or aborted: dropped).
struct TaskDone(Arc<ConnMeter>, bool);

impl Drop for TaskDone {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering::Release;
        if self.1 {
            self.0.fd.store(-1, Release);
        }
        self.0.tasks.fetch_sub(1, Release);
    }
}

struct Conn {
    tx: mpsc::UnboundedSender<Bytes>,
    meter: Arc<ConnMeter>,
    open: bool,
    /// The controller's address, for reconnecting after a switch failure.
    addr: SocketAddr,
    /// Which incarnation of the connection this is: messages of an older one
    /// (closed by a switch failure) are ignored.
    epoch: u64,
    reader: tokio::task::AbortHandle,
    /// sts's port of the TCP connection (the controller's peer port), 0 if none.
    local_port: u16,
}

/// Completes when `vt` hears a controller thread enter a wait; never without
/// virtual time.
async fn announced(vt: Option<&crate::clock::VirtualTime>) {
    match vt {
        Some(v) => v.announced().await,
        None => std::future::pending().await,
    }
}

/// How long [`NetRunner::settle_with`] waits, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct Settle {
    /// How long the controllers must have been quiet (keepalives aside).
    pub quiet_ms: Millis,
    /// Never settle sooner than this (e.g. STP convergence).
    pub min_wait_ms: Millis,
    /// Give up after this long (or after `min_wait_ms`, if longer).
    pub max_ms: Millis,
}

/// Something that went wrong on a control connection (kept, not fatal).
#[derive(Debug, Clone)]
pub struct ConnIssue {
    pub dpid: u64,
    pub controller: usize,
    pub what: String,
}

/// Starts the reader and writer tasks of one switch-controller connection and
/// queues the switch's HELLO; returns the sender for outgoing frames (count
/// each message sent in the meter's `unwritten`).
fn spawn_connection(
    stream: TcpStream,
    dpid: u64,
    conn: usize,
    epoch: u64,
    in_tx: mpsc::UnboundedSender<Inbound>,
    hello: Option<Bytes>,
) -> (mpsc::UnboundedSender<Bytes>, tokio::task::AbortHandle, Arc<ConnMeter>) {
    use std::os::fd::AsRawFd;
    use std::sync::atomic::Ordering::{AcqRel, Release};
    let meter = Arc::new(ConnMeter::default());
    meter.fd.store(stream.as_raw_fd(), Release);
    meter.tasks.store(2, Release);
    let (read, mut write) = stream.into_split();
    let (tx, mut wrx) = mpsc::unbounded_channel::<Bytes>();
    let read_done = TaskDone(meter.clone(), true);
    let reader = tokio::spawn(async move {
        let mut frames = FramedRead::new(read, OfpCodec);
        // Declared after `frames`, so dropped before it: the meter lets go
        // of the descriptor before the socket closes.
        let _done = read_done;
        let why = loop {
            match frames.next().await {
                Some(Ok(frame)) => {
                    if in_tx.send(Inbound::Frame { dpid, conn, epoch, frame }).is_err() {
                        return;
                    }
                }
                Some(Err(e)) => break format!("bad framing from the controller: {e}"),
                None => break "the controller closed the connection".to_string(),
            }
        };
        let _ = in_tx.send(Inbound::Closed { dpid, conn, epoch, why });
    });
    let write_done = TaskDone(meter.clone(), false);
    tokio::spawn(async move {
        let done = write_done;
        while let Some(b) = wrx.recv().await {
            let written = write.write_all(&b).await.is_ok();
            done.0.unwritten.fetch_sub(1, AcqRel);
            if !written {
                // What is still queued will never be written: not in flight.
                wrx.close();
                while wrx.recv().await.is_some() {
                    done.0.unwritten.fetch_sub(1, AcqRel);
                }
                return;
            }
        }
    });
    if let Some(hello) = hello {
        meter.unwritten.fetch_add(1, AcqRel);
        if tx.send(hello).is_err() {
            meter.unwritten.fetch_sub(1, AcqRel);
        }
    }
    (tx, reader.abort_handle(), meter)
}

impl Conn {
    /// A connection slot with no connection (its controller is down).
    fn closed(addr: SocketAddr, epoch: u64) -> Conn {
        let reader = tokio::spawn(async {}).abort_handle();
        let meter = Arc::new(ConnMeter { fd: (-1).into(), ..ConnMeter::default() });
        Conn { tx: mpsc::unbounded_channel().0, meter, open: false, addr, epoch, reader, local_port: 0 }
    }

    /// Queues `bytes` for the controller (counted in flight until written).
    fn send(&self, bytes: Bytes) {
        use std::sync::atomic::Ordering::AcqRel;
        self.meter.unwritten.fetch_add(1, AcqRel);
        if self.tx.send(bytes).is_err() {
            self.meter.unwritten.fetch_sub(1, AcqRel);
        }
    }
}

/// How long a switch waits for the controller to accept its connection (a
/// controller that listens but never accepts would otherwise hold sts for
/// the kernel's SYN retries, two minutes and more). Real time: it bounds
/// sts's own wait, not anything the controller sees.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens one control connection and says HELLO.
async fn open_conn(
    dpid: u64,
    local: usize,
    epoch: u64,
    addr: SocketAddr,
    in_tx: mpsc::UnboundedSender<Inbound>,
    hello: Bytes,
) -> std::io::Result<Conn> {
    let stream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(connected) => connected.map_err(|e| {
            std::io::Error::new(e.kind(), format!("switch {dpid} cannot connect to the controller at {addr}: {e}"))
        })?,
        Err(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "switch {dpid} cannot connect to the controller at {addr}: no answer in {} s (it listens but \
                     does not accept connections)",
                    CONNECT_TIMEOUT.as_secs()
                ),
            ))
        }
    };
    stream.set_nodelay(true)?;
    let local_port = stream.local_addr()?.port();
    let (tx, reader, meter) = spawn_connection(stream, dpid, local, epoch, in_tx, Some(hello));
    Ok(Conn { tx, meter, open: true, addr, epoch, reader, local_port })
}

/// Everything a [`NetRunner`] holds except its live connections: what a
/// rollback to a checkpoint restores ([`NetRunner::state`],
/// [`NetRunner::restore`]). Take it only when the run is quiescent.
#[derive(Clone)]
pub struct RunState {
    net: Network,
    interposer: Interposer,
    /// Per switch, per connection: (open, controller address, epoch, sts's port).
    conns: BTreeMap<u64, Vec<(bool, SocketAddr, u64, u16)>>,
    down: BTreeMap<u64, Vec<sts_mocknet::Endpoint>>,
    controllers_down: BTreeSet<SocketAddr>,
    handshakes: BTreeSet<(u64, usize)>,
    last_activity: Millis,
    last_tick: Millis,
    issues: Vec<ConnIssue>,
    messages_from_controllers: u64,
    messages_to_controllers: u64,
    /// Virtual monotonic nanoseconds when it was taken.
    time_ns: u64,
}

impl RunState {
    /// The open connections at the checkpoint: (switch, connection index,
    /// sts's port of it), to pair with the controllers' held connections.
    pub fn open_connections(&self) -> Vec<(u64, usize, u16)> {
        self.conns
            .iter()
            .flat_map(|(&d, cs)| cs.iter().enumerate().filter(|(_, c)| c.0).map(move |(i, c)| (d, i, c.3)))
            .collect()
    }

    /// Virtual monotonic nanoseconds when the state was taken (0 on real
    /// time): what to set the clock back to before resuming controllers.
    pub fn time_ns(&self) -> u64 {
        self.time_ns
    }

    /// The mock network as it was.
    pub fn net(&self) -> &Network {
        &self.net
    }
}

/// The mock network, connected to its controllers.
pub struct NetRunner {
    pub net: Network,
    pub clock: Clock,
    /// Records every message and decides its delivery (see `sts_proxy::interpose`).
    /// Channels are numbered by the switch's own list of controllers.
    pub interposer: Interposer,
    conns: BTreeMap<u64, Vec<Conn>>,
    rx: mpsc::UnboundedReceiver<Inbound>,
    in_tx: mpsc::UnboundedSender<Inbound>,
    /// Failed switches, with the links their failure took down.
    down: BTreeMap<u64, Vec<sts_mocknet::Endpoint>>,
    /// Controllers crashed on purpose.
    controllers_down: BTreeSet<SocketAddr>,
    /// (dpid, controller) pairs whose FEATURES_REPLY has been sent.
    pub handshakes: BTreeSet<(u64, usize)>,
    /// Time of the last controller message other than an echo.
    pub last_activity: Millis,
    last_tick: Millis,
    pub issues: Vec<ConnIssue>,
    pub messages_from_controllers: u64,
    pub messages_to_controllers: u64,
    /// The idle test's pace on virtual time.
    fine: FineSleep,
    /// Meters of connections sts closed whose tasks may not have ended yet.
    closing: Vec<Arc<ConnMeter>>,
}

impl NetRunner {
    /// Connects every switch of `net` to every controller in `controllers`
    /// and sends each switch's HELLO.
    pub async fn connect(net: Network, controllers: &[SocketAddr], clock: Clock) -> std::io::Result<NetRunner> {
        let all: Vec<usize> = (0..controllers.len()).collect();
        Self::connect_with(net, controllers, clock, |_| all.clone()).await
    }

    /// Connects each switch to the controllers `assign(dpid)` names (indices
    /// into `controllers`), at most [`CONNECT_PARALLELISM`] at a time, and
    /// sends each switch's HELLO.
    pub async fn connect_with(
        net: Network,
        controllers: &[SocketAddr],
        clock: Clock,
        assign: impl Fn(u64) -> Vec<usize>,
    ) -> std::io::Result<NetRunner> {
        let (in_tx, rx) = mpsc::unbounded_channel();
        let pairs: Vec<(u64, usize, usize, SocketAddr)> = net
            .switches
            .keys()
            .flat_map(|&dpid| assign(dpid).into_iter().enumerate().map(move |(local, ci)| (dpid, local, ci)))
            .map(|(dpid, local, ci)| (dpid, local, ci, controllers[ci]))
            .collect();
        let hellos: BTreeMap<u64, Bytes> = net
            .switches
            .iter()
            .map(|(&d, sw)| (d, Bytes::from(sw.hello().emit().expect("a HELLO always encodes"))))
            .collect();
        // Each connection starts its reader and writer and says HELLO as soon as
        // it is up: a controller waiting seconds for a HELLO gives up on the switch.
        let opened: Vec<std::io::Result<(u64, Conn)>> = futures::stream::iter(pairs)
            .map(|(dpid, local, _, addr)| {
                let in_tx = in_tx.clone();
                let hello = hellos[&dpid].clone();
                async move { Ok((dpid, open_conn(dpid, local, 0, addr, in_tx, hello).await?)) }
            })
            .buffered(CONNECT_PARALLELISM)
            .collect()
            .await;
        let mut conns: BTreeMap<u64, Vec<Conn>> = BTreeMap::new();
        for o in opened {
            let (dpid, conn) = o?;
            conns.entry(dpid).or_default().push(conn);
        }
        let last_activity = clock.now();
        Ok(NetRunner {
            in_tx,
            down: BTreeMap::new(),
            controllers_down: BTreeSet::new(),
            net,
            clock,
            interposer: Interposer::default(),
            conns,
            rx,
            handshakes: BTreeSet::new(),
            last_activity,
            last_tick: 0,
            issues: Vec::new(),
            messages_from_controllers: 0,
            messages_to_controllers: 0,
            fine: FineSleep::new(),
            closing: Vec::new(),
        })
    }

    /// The run's state, for a rollback (see [`RunState`]).
    pub fn state(&self) -> RunState {
        RunState {
            net: self.net.clone(),
            interposer: self.interposer.clone(),
            conns: self
                .conns
                .iter()
                .map(|(&d, cs)| (d, cs.iter().map(|c| (c.open, c.addr, c.epoch, c.local_port)).collect()))
                .collect(),
            down: self.down.clone(),
            controllers_down: self.controllers_down.clone(),
            handshakes: self.handshakes.clone(),
            last_activity: self.last_activity,
            last_tick: self.last_tick,
            issues: self.issues.clone(),
            messages_from_controllers: self.messages_from_controllers,
            messages_to_controllers: self.messages_to_controllers,
            time_ns: self.clock.virtual_time().map_or(0, |v| v.now_ns()),
        }
    }

    /// Rolls the run back to `state`: drops every live connection and takes
    /// `streams`, one per connection open at the checkpoint (by switch and
    /// connection index), which continue those sessions mid-stream (no
    /// HELLO). The controllers must have been rolled back first: virtual
    /// time set back to [`RunState::time_ns`] (before resuming any of them: a
    /// copy that read the later time would see its clock step back), then
    /// each resumed from its checkpoint on the other ends of `streams`; `moved` maps each
    /// controller's old address to the one its resumed copy listens on, for
    /// later reconnections.
    pub async fn restore(
        &mut self,
        state: &RunState,
        mut streams: BTreeMap<(u64, usize), TcpStream>,
        moved: &BTreeMap<SocketAddr, SocketAddr>,
    ) -> std::io::Result<()> {
        let moved_to = |a: SocketAddr| moved.get(&a).copied().unwrap_or(a);
        for c in self.conns.values().flatten() {
            c.reader.abort();
            c.meter.close();
            self.closing.push(c.meter.clone());
        }
        let mut conns = BTreeMap::new();
        for (&dpid, cs) in &state.conns {
            let mut list = Vec::new();
            for (i, &(open, addr, epoch, _)) in cs.iter().enumerate() {
                let addr = moved_to(addr);
                // A newer epoch: whatever the old connections still deliver is ignored.
                let epoch = epoch.max(self.conns.get(&dpid).and_then(|l| l.get(i)).map_or(0, |c| c.epoch)) + 1;
                match streams.remove(&(dpid, i)) {
                    Some(stream) if open => {
                        stream.set_nodelay(true)?;
                        let local_port = stream.local_addr()?.port();
                        let (tx, reader, meter) = spawn_connection(stream, dpid, i, epoch, self.in_tx.clone(), None);
                        list.push(Conn { tx, meter, open: true, addr, epoch, reader, local_port });
                    }
                    None if open => {
                        return Err(std::io::Error::other(format!(
                            "no connection given for switch {dpid}'s connection {i}, open at the checkpoint"
                        )))
                    }
                    _ => list.push(Conn::closed(addr, epoch)),
                }
            }
            conns.insert(dpid, list);
        }
        // Messages of the dropped connections still queued are of the other timeline.
        while self.rx.try_recv().is_ok() {}
        self.conns = conns;
        self.net = state.net.clone();
        self.interposer = state.interposer.clone();
        self.down = state.down.clone();
        self.controllers_down = state.controllers_down.iter().map(|&a| moved_to(a)).collect();
        self.handshakes = state.handshakes.clone();
        self.last_activity = state.last_activity;
        self.last_tick = state.last_tick;
        self.issues = state.issues.clone();
        self.messages_from_controllers = state.messages_from_controllers;
        self.messages_to_controllers = state.messages_to_controllers;
        Ok(())
    }

    /// Number of switch-controller connections.
    pub fn connection_count(&self) -> usize {
        self.conns.values().map(Vec::len).sum()
    }

    /// A switch sends `msg` to one of its controllers: through the interposer.
    fn send(&mut self, dpid: u64, conn: usize, msg: &Message) {
        let Ok(frame) = Frame::from_message(msg) else { return };
        tracing::debug!(dpid, conn, "switch -> controller: {}", sts_proxy::wire::Fingerprint::of(msg));
        let out = self.interposer.on_message(
            ChannelId { dpid, controller: conn },
            Direction::SwitchToController,
            frame,
            self.clock.now(),
        );
        out.into_iter().for_each(|d| self.deliver(d));
    }

    /// Delivers a message the interposer let through.
    fn deliver(&mut self, d: Delivery) {
        let ChannelId { dpid, controller: conn } = d.channel;
        match d.dir {
            Direction::SwitchToController => {
                let Some(c) = self.conns.get(&dpid).and_then(|l| l.get(conn)) else { return };
                if c.open {
                    c.send(d.frame.bytes().clone());
                    self.messages_to_controllers += 1;
                    // FEATURES_REPLY is type 6 in both versions: the handshake is done.
                    if d.frame.header().msg_type == v13::types::FEATURES_REPLY {
                        self.handshakes.insert((dpid, conn));
                    }
                }
            }
            Direction::ControllerToSwitch => match d.frame.decode() {
                Ok(msg) => {
                    let out = self.net.handle_controller_from(dpid, conn, d.frame.bytes(), &msg, self.clock.now());
                    self.dispatch(out, Some(conn));
                }
                Err(e) => self.issues.push(ConnIssue {
                    dpid,
                    controller: conn,
                    what: format!("undecodable message {:?}: {e}", d.frame),
                }),
            },
        }
    }

    fn dispatch(&mut self, out: Vec<ToController>, requester: Option<usize>) {
        for m in out {
            match (m.to, requester) {
                (Recipient::Requester, Some(c)) => self.send(m.dpid, c, &m.msg),
                _ => {
                    let n = self.conns.get(&m.dpid).map_or(0, Vec::len);
                    for c in 0..n {
                        if self.net.wants(m.dpid, c, &m.msg) {
                            self.send(m.dpid, c, &m.msg);
                        }
                    }
                }
            }
        }
    }

    fn on_inbound(&mut self, inbound: Inbound) {
        let now = self.clock.now();
        match inbound {
            Inbound::Frame { dpid, conn, epoch, .. } | Inbound::Closed { dpid, conn, epoch, .. }
                if self.conns.get(&dpid).and_then(|l| l.get(conn)).is_none_or(|c| c.epoch != epoch) =>
            {
                // A message of a connection a switch failure closed.
            }
            Inbound::Frame { dpid, conn, frame, .. } => {
                self.messages_from_controllers += 1;
                let keepalive = matches!(frame.header().msg_type, v13::types::ECHO_REQUEST | v13::types::ECHO_REPLY);
                if !keepalive {
                    self.last_activity = now;
                }
                // Decoded for the debug line only when it is written: the
                // switch model decodes the message once, on delivery.
                if tracing::enabled!(tracing::Level::DEBUG) {
                    if let Ok(msg) = frame.decode() {
                        tracing::debug!(dpid, conn, "controller -> switch: {}", sts_proxy::wire::Fingerprint::of(&msg));
                    }
                }
                let out = self.interposer.on_message(
                    ChannelId { dpid, controller: conn },
                    Direction::ControllerToSwitch,
                    frame,
                    now,
                );
                out.into_iter().for_each(|d| self.deliver(d));
            }
            Inbound::Closed { dpid, conn, why, .. } => {
                if let Some(c) = self.conns.get_mut(&dpid).and_then(|l| l.get_mut(conn)) {
                    c.open = false;
                }
                if let Some(sw) = self.net.switches.get_mut(&dpid) {
                    sw.forget_connection(conn);
                }
                if let Some(vt) = self.clock.virtual_time() {
                    vt.note(&format!("switch {dpid} / controller {conn}: connection closed: {why}"));
                }
                self.issues.push(ConnIssue { dpid, controller: conn, what: why });
            }
        }
    }

    /// Releases held messages (of one switch, or all) and delivers them in order.
    pub fn release(&mut self, dpid: Option<u64>) {
        let out = self.interposer.release(dpid, None, self.clock.now());
        out.into_iter().for_each(|d| self.deliver(d));
    }

    /// Delivers the queued message `seq` now, out of turn; false if no such
    /// message is queued.
    pub fn deliver_queued(&mut self, seq: u64) -> bool {
        let Some(d) = self.interposer.take_to_deliver(seq, self.clock.now()) else { return false };
        self.deliver(d);
        true
    }

    /// Drops the queued message `seq`; false if no such message is queued.
    pub fn drop_queued(&mut self, seq: u64) -> bool {
        self.interposer.take(seq).is_some()
    }

    /// Delivers the queued message `seq` `ms` from now (in its turn on its
    /// connection); false if no such message is queued.
    pub fn delay_queued(&mut self, seq: u64, ms: Millis) -> bool {
        let due = self.clock.now() + ms;
        self.interposer.set_due(seq, due)
    }

    fn tick(&mut self) {
        self.closing.retain(|m| m.tasks.load(std::sync::atomic::Ordering::Acquire) != 0);
        let now = self.clock.now();
        let due = self.interposer.due(now);
        due.into_iter().for_each(|d| self.deliver(d));
        let arrived = self.net.deliver_due(now);
        self.dispatch(arrived, None);
        if now >= self.last_tick + TICK_MS {
            self.last_tick = now;
            let out = self.net.tick(now);
            self.dispatch(out, None);
        }
    }

    /// Processes controller messages until `done` holds or `deadline` (ms on
    /// the run's clock) passes. Returns whether `done` held.
    ///
    /// On virtual time, whenever the run is idle, time jumps to the next thing
    /// due (the deadline, a delayed frame or message, the flow-timeout tick,
    /// or a controller's timer): nothing waits for real.
    pub async fn run_until(&mut self, deadline: Millis, mut done: impl FnMut(&NetRunner) -> bool) -> bool {
        let on_virtual_time = self.clock.virtual_time().is_some();
        loop {
            self.tick();
            if done(self) {
                return true;
            }
            let now = self.clock.now();
            if now >= deadline {
                return false;
            }
            let next_frame = self.net.next_due().unwrap_or(Millis::MAX);
            if on_virtual_time && self.rx.is_empty() {
                let next_message = self.interposer.next_due().unwrap_or(Millis::MAX);
                let target = deadline.min(next_frame).min(next_message).min(self.last_tick + TICK_MS);
                let activity = self.messages_from_controllers + self.messages_to_controllers;
                if self.clock.jump_if_idle_with(target, activity, &|| self.sts_quiet()) {
                    continue;
                }
            }
            let wake = self.clock.instant_at(deadline.min(now + POLL_MS).min(next_frame.max(now)));
            // On virtual time, look at the run again when a controller thread
            // enters a wait (it may be idle now, and time may jump), or soon.
            let vt = self.clock.virtual_time().cloned();
            let look = vt.as_ref().map_or(Duration::MAX, |v| v.retry_after());
            tokio::select! {
                inbound = self.rx.recv() => match inbound {
                    Some(i) => self.on_inbound(i),
                    None => tokio::time::sleep_until(wake).await,
                },
                _ = tokio::time::sleep_until(wake) => {}
                _ = self.fine.sleep(look), if on_virtual_time => {}
                _ = announced(vt.as_deref()) => {}
            }
        }
    }

    /// True when sts has nothing in flight towards or from its controllers:
    /// no message received and not handled, none queued and not written,
    /// none waiting in a socket for its reader, no close under way.
    fn sts_quiet(&self) -> bool {
        self.rx.is_empty()
            && self.closing.iter().all(|m| m.quiet())
            && self.conns.values().flatten().all(|c| c.meter.quiet())
    }

    /// How long the run stays as it is, when it is quiescent now: the time
    /// (run ms) of the first thing due in it, whichever comes first of a
    /// controller's timer, a delayed frame or message, a flow's expiry;
    /// `Millis::MAX` when nothing is. Before then nothing changes in the
    /// network or the controllers unless sts is told to act (an input).
    /// `None` when the run is not quiescent (a controller busy, something in
    /// flight), and always on real time.
    pub fn still_until(&self) -> Option<Millis> {
        if !self.rx.is_empty() {
            return None;
        }
        let activity = self.messages_from_controllers + self.messages_to_controllers;
        let timers = self.clock.idle_until(activity, &|| self.sts_quiet())?;
        let sts_due = [self.net.next_due(), self.interposer.next_due(), self.net.next_expiry()];
        Some(sts_due.into_iter().flatten().fold(timers, Millis::min))
    }

    /// True when nothing can happen in the run before `until` (run time, ms)
    /// unless something from outside it arrives: every controller process
    /// waits with its next timer later than that, and sts has no frame,
    /// message or flow expiry due by then. What a jump to `until` needs,
    /// known ahead of it; meaningful right after [`NetRunner::quiesce`].
    pub fn nothing_due_before(&self, until: Millis) -> bool {
        let Some(vt) = self.clock.virtual_time() else { return false };
        let now = self.clock.now();
        let left = Duration::from_millis(until.saturating_sub(now));
        let sts_due = [self.net.next_due(), self.interposer.next_due(), self.net.next_expiry()];
        self.rx.is_empty()
            && sts_due.iter().flatten().all(|&t| t > until)
            && vt.processes().iter().all(|&(_, waiting, deadline_in)| waiting && deadline_in.is_none_or(|d| d > left))
    }

    /// Processes messages, without letting time jump, until the run is
    /// quiescent: every controller waiting, nothing in flight (the point where
    /// checkpoints are safe). Gives up after `max` of real time. Always false
    /// on real time.
    pub async fn quiesce(&mut self, max: Duration) -> bool {
        if self.clock.virtual_time().is_none() {
            return false;
        }
        let give_up = tokio::time::Instant::now() + max;
        loop {
            while let Ok(i) = self.rx.try_recv() {
                self.on_inbound(i);
            }
            let activity = self.messages_from_controllers + self.messages_to_controllers;
            if self.rx.is_empty() && self.clock.is_idle(activity, &|| self.sts_quiet()) {
                return true;
            }
            if tokio::time::Instant::now() >= give_up {
                return false;
            }
            let vt = self.clock.virtual_time().cloned();
            let look = vt.as_ref().map_or(Duration::MAX, |v| v.retry_after());
            tokio::select! {
                inbound = self.rx.recv() => if let Some(i) = inbound { self.on_inbound(i) },
                _ = self.fine.sleep(look) => {}
                _ = announced(vt.as_deref()) => {}
            }
        }
    }

    /// Processes messages, without letting virtual time jump, until `done`
    /// holds or `max` of real time passes: while a controller answers
    /// something outside OpenFlow (a REST call, [`crate::policy`]), as if the
    /// request took no time. On real time the clock runs as always. Returns
    /// whether `done` held.
    pub async fn serve_until(&mut self, max: Duration, mut done: impl FnMut() -> bool) -> bool {
        let give_up = tokio::time::Instant::now() + max;
        loop {
            self.tick();
            while let Ok(i) = self.rx.try_recv() {
                self.on_inbound(i);
            }
            if done() {
                return true;
            }
            if tokio::time::Instant::now() >= give_up {
                return false;
            }
            tokio::select! {
                inbound = self.rx.recv() => if let Some(i) = inbound { self.on_inbound(i) },
                _ = tokio::time::sleep(Duration::from_millis(1)) => {}
            }
        }
    }

    /// Processes messages for `d`.
    pub async fn run_for(&mut self, d: Duration) {
        let deadline = self.clock.now() + d.as_millis() as Millis;
        self.run_until(deadline, |_| false).await;
    }

    /// Waits until every connection has finished its handshake and the
    /// controllers have been quiet for `quiet_ms`, for at most `max_ms`.
    pub async fn settle(&mut self, quiet_ms: Millis, max_ms: Millis) -> bool {
        self.settle_with(Settle { quiet_ms, min_wait_ms: 0, max_ms }, |_| {}).await
    }

    /// [`NetRunner::settle`] with a minimum wait and a progress callback (called
    /// on every loop iteration). Stops early, returning false, when a connection
    /// closed before its handshake: it will not recover.
    pub async fn settle_with(&mut self, s: Settle, mut progress: impl FnMut(&NetRunner)) -> bool {
        let start = self.clock.now();
        let deadline = start + s.max_ms.max(s.min_wait_ms);
        let total = self.connection_count();
        let mut lost = false;
        let settled = self
            .run_until(deadline, |r| {
                progress(r);
                lost = r.handshake_lost();
                let now = r.clock.now();
                lost || (r.handshakes.len() == total
                    && now >= start + s.min_wait_ms
                    && now >= r.last_activity + s.quiet_ms)
            })
            .await;
        settled && !lost
    }

    /// True if a connection closed (or broke) before its handshake finished.
    pub fn handshake_lost(&self) -> bool {
        self.issues.iter().any(|i| !self.handshakes.contains(&(i.dpid, i.controller)))
    }

    /// Fails (`up = false`) or recovers the link at `at`; both switch ends send
    /// PORT_STATUS to their controllers.
    pub fn set_link(&mut self, at: sts_mocknet::Endpoint, up: bool) {
        let out = self.net.set_link(at, up);
        self.dispatch(out, None);
    }

    /// Starts (`Some`) or ends (`None`) a data-plane fault on the link at
    /// `at`: frames crossing it are dropped or delayed.
    pub fn set_link_fault(&mut self, at: sts_mocknet::Endpoint, fault: Option<sts_mocknet::network::LinkFault>) {
        self.net.set_link_fault(at, fault);
    }

    /// Switches with no open controller connection (aside from failed
    /// switches and switches whose controllers all crashed on purpose).
    pub fn disconnected(&self) -> Vec<u64> {
        self.net
            .switches
            .keys()
            .filter(|d| {
                let conns = self.conns.get(d).map_or(&[][..], Vec::as_slice);
                let on_purpose = self.down.contains_key(d)
                    || (!conns.is_empty() && conns.iter().all(|c| self.controllers_down.contains(&c.addr)));
                !on_purpose && !conns.iter().any(|c| c.open)
            })
            .copied()
            .collect()
    }

    /// Notes that the controller at `addr` was crashed on purpose.
    pub fn controller_down(&mut self, addr: SocketAddr) {
        self.controllers_down.insert(addr);
    }

    /// Connects every live switch again to the (restarted) controller at
    /// `addr`, each with a fresh HELLO.
    pub async fn reconnect_controller(&mut self, addr: SocketAddr) -> std::io::Result<()> {
        self.controllers_down.remove(&addr);
        let targets: Vec<(u64, usize, u64)> = self
            .conns
            .iter()
            .filter(|(d, _)| !self.down.contains_key(d))
            .flat_map(|(&d, cs)| {
                cs.iter().enumerate().filter(|(_, c)| c.addr == addr).map(move |(local, c)| (d, local, c.epoch))
            })
            .collect();
        for (dpid, local, epoch) in targets {
            let hello = Bytes::from(self.net.switches[&dpid].hello().emit().expect("a HELLO always encodes"));
            let conn = open_conn(dpid, local, epoch + 1, addr, self.in_tx.clone(), hello).await?;
            if let Some(old) = self.conns.get_mut(&dpid).and_then(|l| l.get_mut(local)) {
                old.reader.abort();
                old.meter.close();
                self.closing.push(old.meter.clone());
                *old = conn;
            }
            self.handshakes.remove(&(dpid, local));
            // A new connection starts with the default role and async config.
            if let Some(sw) = self.net.switches.get_mut(&dpid) {
                sw.forget_connection(local);
            }
        }
        Ok(())
    }

    /// True if switch `dpid` is failed.
    pub fn is_down(&self, dpid: u64) -> bool {
        self.down.contains_key(&dpid)
    }

    /// Switch failure: the switch crashes. Its control connections close, its
    /// live links go down (the neighbours report PORT_STATUS) and its flow
    /// tables are lost.
    pub fn fail_switch(&mut self, dpid: u64) {
        if self.down.contains_key(&dpid) || !self.net.switches.contains_key(&dpid) {
            return;
        }
        for c in self.conns.get_mut(&dpid).into_iter().flatten() {
            c.open = false;
            c.reader.abort();
            c.tx = mpsc::unbounded_channel().0; // drops the writer: the socket closes
            c.meter.close();
            self.closing.push(c.meter.clone());
        }
        self.handshakes.retain(|(d, _)| *d != dpid);
        let ports: Vec<u32> = self.net.switches[&dpid].ports.keys().copied().collect();
        let mut taken = Vec::new();
        for p in ports {
            let e = sts_mocknet::Endpoint::Switch { dpid, port: p };
            if self.net.live_peer(e).is_some() && self.net.switches[&dpid].ports[&p].link_up {
                let out = self.net.set_link(e, false);
                self.dispatch(out, None);
                taken.push(e);
            }
        }
        self.net.reset_switch(dpid);
        self.down.insert(dpid, taken);
    }

    /// Switch recovery: the links its failure took down come back, and it
    /// connects to its controllers again (HELLO, a fresh handshake).
    pub async fn recover_switch(&mut self, dpid: u64) -> std::io::Result<()> {
        let Some(taken) = self.down.remove(&dpid) else { return Ok(()) };
        for e in taken {
            let out = self.net.set_link(e, true);
            self.dispatch(out, None);
        }
        let hello = Bytes::from(self.net.switches[&dpid].hello().emit().expect("a HELLO always encodes"));
        let old: Vec<(SocketAddr, u64)> =
            self.conns.get(&dpid).into_iter().flatten().map(|c| (c.addr, c.epoch)).collect();
        let mut fresh = Vec::new();
        for (local, (addr, epoch)) in old.into_iter().enumerate() {
            if self.controllers_down.contains(&addr) {
                // Its controller is down: it connects when the controller restarts.
                fresh.push(Conn::closed(addr, epoch + 1));
            } else {
                fresh.push(open_conn(dpid, local, epoch + 1, addr, self.in_tx.clone(), hello.clone()).await?);
            }
        }
        self.conns.insert(dpid, fresh);
        Ok(())
    }

    /// Moves host `i` to switch `to` and tells the controllers (PORT_STATUS).
    pub fn migrate_host(&mut self, i: usize, to: u64) {
        let out = self.net.migrate_host(i, to);
        self.dispatch(out, None);
    }

    /// Host `src` sends a ping to host `dst` without waiting for the reply.
    pub fn send_ping(&mut self, src: usize, dst: usize) {
        let dst_ip = self.net.hosts[dst].ip;
        let (_, frames) = self.net.hosts[src].ping(dst_ip);
        let out = self.net.host_send(src, frames, self.clock.now());
        self.dispatch(out, None);
    }

    /// Host `src` pings host `dst`; true if the reply arrives within `timeout_ms`.
    pub async fn ping(&mut self, src: usize, dst: usize, timeout_ms: Millis) -> bool {
        let dst_ip = self.net.hosts[dst].ip;
        let (seq, frames) = self.net.hosts[src].ping(dst_ip);
        let now = self.clock.now();
        let out = self.net.host_send(src, frames, now);
        self.dispatch(out, None);
        let deadline = now + timeout_ms;
        self.run_until(deadline, |r| r.net.hosts[src].echo_replies.contains(&(dst_ip, seq))).await
    }
}
