//! The server's connections: accepted here, each served by hyper (HTTP/1.1)
//! with a time limit on request heads, and kept within a cap that holds
//! before anyone has authenticated.
//!
//! - A connection must send a whole request head within
//!   [`HEAD_TIMEOUT`] of opening, and of its previous answer (hyper restarts
//!   the clock on a kept-alive connection): idle and slow-header
//!   connections are closed.
//! - A connection is *trusted* once one of its requests passed the
//!   [door](crate::door). At most [`MAX_UNTRUSTED`] untrusted connections
//!   are kept: a new one closes the oldest untrusted one. So however many
//!   connections someone without the token opens, a client with it gets
//!   in at once, and the server holds no more than that many descriptors
//!   for them.
//! - All connections together stay under half the descriptor limit; beyond
//!   it a new connection is closed at once (after an untrusted one made room
//!   if it could).
//!
//! Request bodies have their own limit (`api::BODY_TIMEOUT`), enforced
//! where they are read.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tower::ServiceExt;

/// Time a connection has to send a request head (when new, or idle between requests).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(15);

/// Connections kept open that no request with the token came through yet.
pub const MAX_UNTRUSTED: usize = 256;

/// A connection's mark: set once a request on it passed the door.
#[derive(Clone, Default)]
pub struct Trust(Arc<AtomicBool>);

impl Trust {
    pub fn grant(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
    fn granted(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

struct Entry {
    trust: Trust,
    evict: Arc<Notify>,
}

/// The open connections, oldest first (ids only grow).
#[derive(Default)]
struct Table {
    next: u64,
    open: BTreeMap<u64, Entry>,
}

impl Table {
    /// Makes room for a new connection: closes the oldest untrusted one
    /// when there are [`MAX_UNTRUSTED`], or when the total is at `max`.
    /// False when the new one cannot be kept.
    fn make_room(&mut self, max: usize) -> bool {
        let untrusted = self.open.values().filter(|e| !e.trust.granted()).count();
        if untrusted >= MAX_UNTRUSTED || self.open.len() >= max {
            if let Some((&id, _)) = self.open.iter().find(|(_, e)| !e.trust.granted()) {
                if let Some(e) = self.open.remove(&id) {
                    e.evict.notify_one();
                }
            }
        }
        self.open.len() < max
    }
}

/// Most connections open at once: half the descriptor limit, the rest left
/// to the store, proxies and job pipes.
pub fn max_connections() -> usize {
    let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).map_or(1024, |(s, _)| s);
    ((soft / 2) as usize).clamp(64, 100_000)
}

/// Serves `router` on `listener` until `stop` turns true; then stops
/// accepting, lets open connections finish their request within `grace`,
/// and closes them.
pub async fn run(listener: TcpListener, router: Router, mut stop: tokio::sync::watch::Receiver<bool>, grace: Duration) {
    let table = Arc::new(Mutex::new(Table::default()));
    let max = max_connections();
    let closing = Arc::new(Notify::new());
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|s| *s) => break,
        };
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of descriptors, most likely: the next accept may work once some close.
                tracing::warn!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (id, trust, evict) = {
            let mut t = table.lock().unwrap_or_else(|e| e.into_inner());
            if !t.make_room(max) {
                drop(stream);
                continue;
            }
            let id = t.next;
            t.next += 1;
            let entry = Entry { trust: Trust::default(), evict: Arc::new(Notify::new()) };
            let (trust, evict) = (entry.trust.clone(), entry.evict.clone());
            t.open.insert(id, entry);
            (id, trust, evict)
        };
        while tasks.try_join_next().is_some() {}
        let (router, table, closing) = (router.clone(), table.clone(), closing.clone());
        tasks.spawn(async move {
            let _ = stream.set_nodelay(true);
            let service = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(trust.clone());
                let router = router.clone();
                async move { Ok::<_, Infallible>(infallible(router.oneshot(req.map(axum::body::Body::new)).await)) }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(HEAD_TIMEOUT).max_buf_size(64 * 1024);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = evict.notified() => {}
                _ = closing.notified() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(grace, conn.as_mut()).await;
                }
            }
            table.lock().unwrap_or_else(|e| e.into_inner()).open.remove(&id);
        });
    }
    drop(listener);
    closing.notify_waiters();
    let _ =
        tokio::time::timeout(grace + Duration::from_millis(500), async { while tasks.join_next().await.is_some() {} })
            .await;
    tasks.abort_all();
}

fn infallible<T>(r: Result<T, Infallible>) -> T {
    match r {
        Ok(t) => t,
        Err(e) => match e {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untrusted_connections_make_room_oldest_first_trusted_ones_stay() {
        let mut t = Table::default();
        let add = |t: &mut Table, trusted: bool| {
            let id = t.next;
            t.next += 1;
            let trust = Trust::default();
            if trusted {
                trust.grant();
            }
            t.open.insert(id, Entry { trust, evict: Arc::new(Notify::new()) });
            id
        };
        let kept = add(&mut t, true);
        let first_untrusted = add(&mut t, false);
        for _ in 1..MAX_UNTRUSTED {
            add(&mut t, false);
        }
        assert!(t.make_room(100_000));
        assert!(!t.open.contains_key(&first_untrusted), "the oldest untrusted one went");
        assert!(t.open.contains_key(&kept));
        assert_eq!(t.open.len(), MAX_UNTRUSTED);
        // At the total cap with only trusted connections, nothing can go: refused.
        let mut full = Table::default();
        for _ in 0..4 {
            add(&mut full, true);
        }
        assert!(!full.make_room(4));
        assert_eq!(full.open.len(), 4);
    }
}
