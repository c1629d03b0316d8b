//! Topology discovery through the mock network: os-ken's `--observe-links`
//! sends LLDP out of every port with PACKET_OUT and learns links from the
//! PACKET_INs on the far side. It must find exactly the topology's links, as
//! its REST API reports them.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::Path;

use sts_engine::config::Config;

fn http_get(port: u16, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("REST API reachable");
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default()
}

#[test]
fn os_ken_observe_links_discovers_exactly_the_topology() {
    let toml = r#"
[network]
topology = "tree"
depth = 2
fanout = 2
openflow = "1.3"

[[controllers]]
kind = "os-ken"
args = ["--observe-links", "--wsapi-host", "127.0.0.1", "--wsapi-port", "{aux_port}"]
apps = ["os_ken.app.rest_topology", "os_ken.app.simple_switch_13"]

[pingall]
min_wait_ms = 4000
settle_ms = 6000
"#;
    let config = Config::from_toml(toml, Path::new("discovery.toml")).unwrap();
    let dir = std::env::temp_dir().join(format!("sts-e2e-discovery-{}", std::process::id()));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = rt.block_on(sts_engine::pingall::run(sts_e2e::engine(), &config, &dir)).unwrap_or_else(|e| panic!("{e}"));

    let body = http_get(run.controllers[0].aux_port(), "/v1.0/topology/links");
    let links: serde_json::Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("bad REST reply {body:?}: {e}"));
    let found: BTreeSet<((u64, u32), (u64, u32))> = links
        .as_array()
        .expect("a list of links")
        .iter()
        .map(|l| {
            let end = |e: &serde_json::Value| {
                (
                    u64::from_str_radix(e["dpid"].as_str().unwrap(), 16).unwrap(),
                    u32::from_str_radix(e["port_no"].as_str().unwrap(), 16).unwrap(),
                )
            };
            (end(&l["src"]), end(&l["dst"]))
        })
        .collect();
    // The mock network's links, in both directions (os-ken lists each direction).
    let expected: BTreeSet<_> = run.runner.net.switch_links().into_iter().flat_map(|(a, b)| [(a, b), (b, a)]).collect();
    assert_eq!(expected.len(), 4, "tree(2,2) has two switch links");
    assert_eq!(found, expected, "os-ken discovered {found:?}, the network has {expected:?}");
}
