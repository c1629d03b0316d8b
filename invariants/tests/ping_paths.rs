//! `ping_paths` (the console's `path`): on a routed fat-tree every ping is
//! delivered along a path the tables choose; after a routing loop is
//! planted, the same ping loops; a walk that ends at a missing rule says so.

use sts_invariants::check::ping_paths;
use sts_invariants::testnet::{routed_fat_tree, routing_loop};

#[test]
fn a_ping_is_walked_through_the_tables_to_where_it_ends() {
    let mut net = routed_fat_tree(4, false);
    let (a, b) = (net.hosts.len() - 1, 0);
    let paths = ping_paths(&net, a, b);
    assert_eq!(paths.len(), 1, "one ICMP echo, one walk: {paths:?}");
    let p = &paths[0];
    assert_eq!(p.from, net.hosts[a].name);
    assert_eq!(p.end, format!("is delivered to {}", net.hosts[b].name));
    // Edge, aggregation, core, aggregation, edge: across pods.
    assert_eq!(p.path.len(), 5, "{p:?}");
    assert!(p.path.iter().all(|hop| hop.contains(" in ") && hop.contains("priority")), "{p:?}");

    // Host 0 (pod 0) is reached through a loop from the other pods.
    routing_loop(&mut net, 4, b, 1);
    let looped = ping_paths(&net, a, b);
    assert!(looped.iter().any(|p| p.end.starts_with("loops through")), "{looped:?}");
}
