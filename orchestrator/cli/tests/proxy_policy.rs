//! `sts proxy`'s fault policy: dropped types never arrive, delayed types
//! arrive late and keep the connection's order, other types pass.

use std::time::{Duration, Instant};

use sts_proxy::wire::{v13, Body, Message};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn emit(xid: u32, m: v13::Msg) -> Vec<u8> {
    Message::new(xid, Body::V13(m)).emit().unwrap()
}

/// Reads whole OpenFlow messages until `n` arrived or `limit` passed: (xid,
/// type name, when).
async fn read_messages(s: &mut TcpStream, n: usize, limit: Duration) -> Vec<(u32, &'static str, Duration)> {
    let start = Instant::now();
    let mut buf = Vec::new();
    let mut got = Vec::new();
    while got.len() < n {
        let mut chunk = [0u8; 4096];
        let Ok(Ok(k)) = tokio::time::timeout(limit.saturating_sub(start.elapsed()), s.read(&mut chunk)).await else {
            break;
        };
        if k == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..k]);
        while buf.len() >= 8 && buf.len() >= u16::from_be_bytes([buf[2], buf[3]]) as usize {
            let len = u16::from_be_bytes([buf[2], buf[3]]) as usize;
            let xid = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
            got.push((xid, sts_proxy::wire::type_name(buf[0], buf[1]), start.elapsed()));
            buf.drain(..len);
        }
    }
    got
}

/// A proxy with `policy` between a switch and a controller (both sockets
/// of this test): the proxy's task, the switch's end, the controller's end.
async fn start(
    policy: Vec<sts_proxy::interpose::Rule>,
) -> (tokio::task::JoinHandle<std::io::Result<()>>, TcpStream, TcpStream) {
    let controller = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ctl_addr = controller.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let proxy = tokio::spawn(async move {
        sts_proxy::standalone::run(
            "127.0.0.1:0".parse().unwrap(),
            ctl_addr,
            None,
            policy,
            64,
            sts_engine::clock::Clock::start().now_fn(),
            Some(tx),
        )
        .await
    });
    let proxy_addr = rx.await.unwrap();
    let switch = TcpStream::connect(proxy_addr).await.unwrap();
    let (ctl, _) = controller.accept().await.unwrap();
    (proxy, switch, ctl)
}

#[tokio::test]
async fn drop_and_delay_rules_apply_and_order_is_kept() {
    let policy =
        sts_proxy::standalone::parse_fault_rules(&["barrier_request".into()], &["flow_mod=150".into()]).unwrap();
    let (proxy, mut switch, mut ctl) = start(policy).await;

    // Controller -> switch: FLOW_MOD (delayed), GET_CONFIG (queued behind it),
    // BARRIER (dropped), ECHO (whitelisted: keepalives overtake, so a slowed
    // connection is not declared dead).
    let mut burst = emit(1, v13::Msg::FlowMod(v13::FlowMod::add(0, 1, v13::Match::default(), vec![])));
    burst.extend(emit(2, v13::Msg::GetConfigRequest));
    burst.extend(emit(3, v13::Msg::BarrierRequest));
    burst.extend(emit(4, v13::Msg::EchoRequest(Default::default())));
    ctl.write_all(&burst).await.unwrap();
    let got = read_messages(&mut switch, 4, Duration::from_millis(1500)).await;
    let order: Vec<(u32, &str)> = got.iter().map(|(x, t, _)| (*x, *t)).collect();
    assert_eq!(
        order,
        vec![(4, "echo_request"), (1, "flow_mod"), (2, "get_config_request")],
        "barrier dropped, order kept"
    );
    // The proxy's clock counts whole milliseconds (a message received at
    // 10.9 ms is due at 160 ms): the delay is 150 ms to within one.
    assert!(got[1].2 >= Duration::from_millis(149), "the FLOW_MOD was delayed: {:?}", got[1].2);

    // Switch -> controller: untouched types pass at once.
    switch.write_all(&emit(9, v13::Msg::BarrierReply)).await.unwrap();
    let back = read_messages(&mut ctl, 1, Duration::from_millis(1500)).await;
    assert_eq!(back.iter().map(|(x, t, _)| (*x, *t)).collect::<Vec<_>>(), vec![(9, "barrier_reply")]);
    proxy.abort();
}

/// A bandwidth rule (`--bandwidth 20`: 20 KB/s) spaces the messages of a
/// burst by their length: ten 1,000-byte PACKET_OUTs (10 KB) arrive over
/// half a second, in order, the first after 50 ms, while a small
/// message the other way is not stuck behind them (a pipe per direction).
#[tokio::test]
async fn a_bandwidth_rule_paces_a_burst_by_its_bytes() {
    let policy = vec![sts_proxy::interpose::Rule {
        action: sts_proxy::interpose::Action::Bandwidth(20_000),
        ..Default::default()
    }];
    let (proxy, mut switch, mut ctl) = start(policy).await;
    let packet_out = |xid| {
        let data = vec![0u8; 1000 - 24].into();
        let m =
            emit(xid, v13::Msg::PacketOut(v13::PacketOut { buffer_id: u32::MAX, in_port: 1, actions: vec![], data }));
        assert_eq!(m.len(), 1000);
        m
    };
    let burst: Vec<u8> = (1..=10).flat_map(packet_out).collect();
    let sent = Instant::now();
    ctl.write_all(&burst).await.unwrap();
    switch.write_all(&emit(99, v13::Msg::BarrierReply)).await.unwrap();
    let back = read_messages(&mut ctl, 1, Duration::from_millis(1500)).await;
    assert_eq!(back.len(), 1);
    // Behind the burst's 500 ms it would come last; in its own pipe it is through in one crossing.
    assert!(back[0].2 < Duration::from_millis(300), "the other direction has its own pipe: {:?}", back[0].2);
    let got = read_messages(&mut switch, 10, Duration::from_millis(3000)).await;
    let whole = sent.elapsed();
    assert_eq!(got.iter().map(|(x, _, _)| *x).collect::<Vec<_>>(), (1..=10).collect::<Vec<u32>>(), "in order");
    // 1,000 bytes at 20,000 bytes/s: 50 ms each.
    assert!(got[0].2 >= Duration::from_millis(45), "the first crossed its pipe: {:?}", got[0].2);
    assert!(whole >= Duration::from_millis(495), "ten crossed one after another: {whole:?}");
    assert!(got[9].2 - got[0].2 >= Duration::from_millis(445), "{got:?}");
    proxy.abort();
}

#[test]
fn bad_policies_are_refused_with_the_known_types() {
    let e = sts_proxy::standalone::parse_fault_rules(&["flowmod".into()], &[]).unwrap_err();
    assert!(e.contains("--drop \"flowmod\"") && e.contains("flow_mod"), "{e}");
    let e = sts_proxy::standalone::parse_fault_rules(&[], &["flow_mod".into()]).unwrap_err();
    assert!(e.contains("TYPE=MS"), "{e}");
    let e = sts_proxy::standalone::parse_fault_rules(&[], &["flow_mod=soon".into()]).unwrap_err();
    assert!(e.contains("milliseconds"), "{e}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["proxy", "--listen", "127.0.0.1:0", "--controller", "127.0.0.1:6653", "--drop", "nonsense"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown message type"));
}
