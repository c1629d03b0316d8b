//! A generic TCP relay for traffic between controller peers (the cluster
//! links of a distributed controller), so sts can partition a pair of
//! controllers, and heal it, without root or firewall rules.
//!
//! A controller is configured to reach its peer through the relay's address
//! instead of the peer's own. While the relay is *blocked* no byte crosses it
//! in either direction: bytes already read wait, new connections are accepted
//! but not connected onwards. When it *heals*, everything waiting flows on in
//! order, as TCP would after a partition shorter than its timeouts. Nothing is
//! dropped.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running relay; dropping it stops it and closes its connections.
pub struct Relay {
    addr: SocketAddr,
    target: SocketAddr,
    blocked: watch::Sender<bool>,
    relayed: Arc<AtomicU64>,
    accept: JoinHandle<()>,
}

impl Relay {
    /// Listens on `listen` (port 0: any free port) and relays every
    /// connection to `target`.
    pub async fn start(listen: SocketAddr, target: SocketAddr) -> std::io::Result<Relay> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let (blocked, _) = watch::channel(false);
        let relayed = Arc::new(AtomicU64::new(0));
        let (watch_tx, counter) = (blocked.clone(), relayed.clone());
        let accept = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((inbound, _)) = listener.accept().await {
                let (mut gate, counter) = (watch_tx.subscribe(), counter.clone());
                connections.spawn(async move {
                    if gate.wait_for(|b| !*b).await.is_err() {
                        return;
                    }
                    let Ok(outbound) = TcpStream::connect(target).await else { return };
                    let _ = inbound.set_nodelay(true);
                    let _ = outbound.set_nodelay(true);
                    let (ir, iw) = inbound.into_split();
                    let (or, ow) = outbound.into_split();
                    tokio::select! {
                        _ = pump(ir, ow, gate.clone(), counter.clone()) => {}
                        _ = pump(or, iw, gate, counter) => {}
                    }
                });
            }
        });
        Ok(Relay { addr, target, blocked, relayed, accept })
    }

    /// Where peers connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the relay forwards to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// Partitions: no byte crosses until [`Relay::heal`].
    pub fn block(&self) {
        self.blocked.send_replace(true);
    }

    /// Ends a partition: waiting bytes and connections go on, in order.
    pub fn heal(&self) {
        self.blocked.send_replace(false);
    }

    /// True while partitioned.
    pub fn is_blocked(&self) -> bool {
        *self.blocked.borrow()
    }

    /// Bytes relayed so far, both directions.
    pub fn relayed_bytes(&self) -> u64 {
        self.relayed.load(Ordering::Relaxed)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        // Aborting the accept task drops its JoinSet, which aborts every
        // connection task and closes their sockets.
        self.accept.abort();
    }
}

/// Copies `from` to `to`, holding what it read while the gate is blocked.
async fn pump(
    mut from: impl AsyncReadExt + Unpin,
    mut to: impl AsyncWriteExt + Unpin,
    mut gate: watch::Receiver<bool>,
    counter: Arc<AtomicU64>,
) {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if gate.wait_for(|b| !*b).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// An echo server; returns its address.
    async fn echo_server() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn read_exactly(s: &mut TcpStream, n: usize, within: Duration) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; n];
        tokio::time::timeout(within, s.read_exact(&mut buf)).await.ok()?.ok()?;
        Some(buf)
    }

    #[tokio::test]
    async fn a_blocked_relay_passes_nothing_and_healing_delivers_everything_in_order() {
        let relay = Relay::start("127.0.0.1:0".parse().unwrap(), echo_server().await).await.unwrap();
        let mut peer = TcpStream::connect(relay.addr()).await.unwrap();
        peer.write_all(b"before ").await.unwrap();
        assert_eq!(read_exactly(&mut peer, 7, Duration::from_secs(2)).await.as_deref(), Some(&b"before "[..]));

        relay.block();
        assert!(relay.is_blocked());
        peer.write_all(b"during ").await.unwrap();
        peer.write_all(b"the partition").await.unwrap();
        assert_eq!(read_exactly(&mut peer, 1, Duration::from_millis(300)).await, None, "nothing crosses a partition");

        relay.heal();
        assert_eq!(
            read_exactly(&mut peer, 20, Duration::from_secs(2)).await.as_deref(),
            Some(&b"during the partition"[..])
        );
        assert_eq!(relay.relayed_bytes(), 2 * 27);
    }

    #[tokio::test]
    async fn a_connection_made_during_a_partition_goes_through_on_healing() {
        let relay = Relay::start("127.0.0.1:0".parse().unwrap(), echo_server().await).await.unwrap();
        relay.block();
        let mut peer = TcpStream::connect(relay.addr()).await.unwrap();
        peer.write_all(b"hello").await.unwrap();
        assert_eq!(read_exactly(&mut peer, 5, Duration::from_millis(300)).await, None);
        relay.heal();
        assert_eq!(read_exactly(&mut peer, 5, Duration::from_secs(2)).await.as_deref(), Some(&b"hello"[..]));
    }

    #[tokio::test]
    async fn dropping_the_relay_closes_its_connections() {
        let relay = Relay::start("127.0.0.1:0".parse().unwrap(), echo_server().await).await.unwrap();
        let mut peer = TcpStream::connect(relay.addr()).await.unwrap();
        peer.write_all(b"x").await.unwrap();
        assert!(read_exactly(&mut peer, 1, Duration::from_secs(2)).await.is_some());
        drop(relay);
        let mut buf = [0u8; 1];
        let closed = tokio::time::timeout(Duration::from_secs(2), peer.read(&mut buf)).await;
        assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
    }
}
