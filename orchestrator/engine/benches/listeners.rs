//! The cost of asking which sockets listen on a port (what sts polls while
//! a controller starts), by netlink `sock_diag` and by reading
//! `/proc/net/tcp{,6}`, on a machine without and with 2,000 extra TIME-WAIT
//! sockets (made here: connections closed first by their client).
//!
//!     cargo bench -p sts-engine --bench listeners

use std::net::{TcpListener, TcpStream};

use criterion::{criterion_group, criterion_main, Criterion};

/// `n` sockets in TIME-WAIT: each a loopback connection its client closes first.
fn time_wait(n: usize) -> TcpListener {
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap();
    for _ in 0..n {
        let client = TcpStream::connect(addr).unwrap();
        let (accepted, _) = server.accept().unwrap();
        drop(client);
        drop(accepted);
    }
    server
}

fn bench(c: &mut Criterion) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    for extra in [0usize, 2_000] {
        let _held = time_wait(extra);
        let mut g = c.benchmark_group(format!("listeners/{extra} TIME-WAIT"));
        g.bench_function("sock_diag", |b| b.iter(|| sts_engine::listeners::sock_diag(port).unwrap()));
        g.bench_function("proc_net_tcp", |b| b.iter(|| sts_engine::listeners::proc_net_tcp(port)));
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
