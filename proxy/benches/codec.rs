//! Codec throughput on a realistic message mix: what a proxy sees between a
//! learning-switch controller and its switches (PACKET_IN/OUT with small
//! frames, FLOW_MODs with OXM matches, echoes, port status, flow statistics).
//!
//! Run: `cargo bench -p sts-proxy --bench codec`. Results: docs/benchmarks.md.

use bytes::{Bytes, BytesMut};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use sts_proxy::wire::v13::{self, BasicOxm, Field};
use sts_proxy::wire::{v10, Body, FixedStr, Mac, Message, OfpCodec};
use tokio_util::codec::Decoder;

fn frame(len: usize, seed: u8) -> Bytes {
    let mut f: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
    f[12] = 0x08; // IPv4 ethertype
    f[13] = 0x00;
    Bytes::from(f)
}

fn flow_mod13(i: u32) -> Message {
    Message::new(
        i,
        Body::V13(v13::Msg::FlowMod(v13::FlowMod {
            cookie: i as u64,
            cookie_mask: 0,
            table_id: 0,
            command: 0,
            idle_timeout: 60,
            hard_timeout: 0,
            priority: 1,
            buffer_id: v13::NO_BUFFER,
            out_port: v13::port::ANY,
            out_group: v13::GROUP_ANY,
            flags: 0,
            r#match: v13::Match::new([
                BasicOxm::exact(Field::InPort, (i % 4) as u128 + 1),
                BasicOxm::exact(Field::EthDst, 0x0000_0000_0002),
                BasicOxm::exact(Field::EthSrc, 0x0000_0000_0001),
            ]),
            instructions: vec![v13::Instruction::ApplyActions(vec![v13::Action::Output { port: 2, max_len: 0xffe5 }])],
        })),
    )
}

fn packet_in13(i: u32) -> Message {
    Message::new(
        i,
        Body::V13(v13::Msg::PacketIn(v13::PacketIn {
            buffer_id: v13::NO_BUFFER,
            total_len: 98,
            reason: 0,
            table_id: 0,
            cookie: 0,
            r#match: v13::Match::new([BasicOxm::exact(Field::InPort, 1)]),
            data: frame(98, i as u8),
        })),
    )
}

fn packet_out13(i: u32) -> Message {
    Message::new(
        i,
        Body::V13(v13::Msg::PacketOut(v13::PacketOut {
            buffer_id: v13::NO_BUFFER,
            in_port: 1,
            actions: vec![v13::Action::Output { port: v13::port::FLOOD, max_len: 0 }],
            data: frame(98, i as u8),
        })),
    )
}

fn flow_mod10(i: u32) -> Message {
    let m = v10::Match {
        wildcards: v10::wildcards::NW_TOS,
        in_port: 1,
        dl_src: Mac([0, 0, 0, 0, 0, 1]),
        dl_dst: Mac([0, 0, 0, 0, 0, 2]),
        dl_type: 0x0800,
        ..v10::Match::default()
    };
    Message::new(
        i,
        Body::V10(v10::Msg::FlowMod(v10::FlowMod {
            r#match: m,
            cookie: 0,
            command: 0,
            idle_timeout: 60,
            hard_timeout: 0,
            priority: 0x8000,
            buffer_id: v10::NO_BUFFER,
            out_port: v10::port::NONE,
            flags: 0,
            actions: vec![v10::Action::Output { port: 2, max_len: 0 }],
        })),
    )
}

fn flow_stats13(i: u32) -> Message {
    let stats = (0..10)
        .map(|k| v13::multipart::FlowStats {
            table_id: 0,
            duration_sec: k,
            duration_nsec: 0,
            priority: 1,
            idle_timeout: 60,
            hard_timeout: 0,
            flags: 0,
            cookie: 0,
            packet_count: 10,
            byte_count: 1000,
            r#match: v13::Match::new([BasicOxm::exact(Field::InPort, 1), BasicOxm::exact(Field::EthDst, k as u128)]),
            instructions: vec![v13::Instruction::ApplyActions(vec![v13::Action::Output { port: 2, max_len: 0 }])],
        })
        .collect();
    Message::new(
        i,
        Body::V13(v13::Msg::MultipartReply(v13::MultipartReply {
            flags: 0,
            body: v13::multipart::ReplyBody::Flow(stats),
        })),
    )
}

fn port_status13(i: u32) -> Message {
    Message::new(
        i,
        Body::V13(v13::Msg::PortStatus(v13::PortStatus {
            reason: v13::port_reason::MODIFY,
            desc: v13::Port {
                port_no: 1,
                hw_addr: Mac([0xa, 0, 0, 0, 0, 1]),
                name: FixedStr::new("s1-eth1"),
                config: 0,
                state: v13::port_state::LINK_DOWN,
                curr: 0,
                advertised: 0,
                supported: 0,
                peer: 0,
                curr_speed: 0,
                max_speed: 0,
            },
        })),
    )
}

/// The mix, weighted like a learning switch's control traffic.
fn mix() -> Vec<Message> {
    let mut out = Vec::new();
    for i in 0..1000u32 {
        out.push(packet_in13(i));
        out.push(packet_out13(i));
        out.push(flow_mod13(i));
        if i % 4 == 0 {
            out.push(flow_mod10(i));
        }
        if i % 10 == 0 {
            out.push(Message::new(i, Body::V13(v13::Msg::EchoRequest(Bytes::new()))));
            out.push(port_status13(i));
        }
        if i % 50 == 0 {
            out.push(flow_stats13(i));
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    let msgs = mix();
    let stream: Vec<u8> = msgs.iter().flat_map(|m| m.emit().unwrap()).collect();
    // The same bytes for the peers beside it (scripts/bench-codec-peers).
    if let Some(path) = std::env::var_os("STS_CODEC_MIX") {
        std::fs::write(&path, &stream).expect("write the mix");
    }
    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Bytes(stream.len() as u64));

    g.bench_function("frame", |b| {
        b.iter(|| {
            let mut buf = BytesMut::from(&stream[..]);
            let mut n = 0;
            while let Some(f) = OfpCodec.decode(&mut buf).unwrap() {
                n += f.bytes().len();
            }
            black_box(n)
        })
    });
    g.bench_function("frame+decode", |b| {
        b.iter(|| {
            let mut buf = BytesMut::from(&stream[..]);
            let mut n = 0;
            while let Some(f) = OfpCodec.decode(&mut buf).unwrap() {
                n += f.decode().unwrap().xid as usize;
            }
            black_box(n)
        })
    });
    g.bench_function("encode", |b| {
        b.iter(|| {
            let mut n = 0;
            for m in &msgs {
                n += m.emit().unwrap().len();
            }
            black_box(n)
        })
    });
    g.bench_function("fingerprint", |b| {
        b.iter(|| {
            let mut n = 0;
            for m in &msgs {
                n += sts_proxy::wire::Fingerprint::of(m).0.len();
            }
            black_box(n)
        })
    });
    g.finish();
    eprintln!("mix: {} messages, {} bytes, mean {} bytes/message", msgs.len(), stream.len(), stream.len() / msgs.len());
}

criterion_group!(benches, bench);
criterion_main!(benches);
