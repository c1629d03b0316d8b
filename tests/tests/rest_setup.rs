//! Fresh controller copies forked from one snapshot each get a REST API of
//! their own: two runs of os-ken's rest_firewall side by side in one engine
//! answer on different ports, and a policy applied to one leaves the other
//! as it was.

use std::path::Path;

use sts_engine::config::Config;

/// s1's firewall log entry (priority 0): its instructions, as text.
fn log_entry(s: &sts_engine::session::Session) -> String {
    let t = &s.runner.net.switches[&1].tables[0];
    format!("{:?}", t.entries().iter().filter(|e| e.priority == 0).map(|e| &e.instructions).collect::<Vec<_>>())
}

#[test]
fn side_by_side_copies_have_their_own_rest_api() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/osken-firewall.toml");
    let config = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let base = std::env::temp_dir().join(format!("sts-e2e-rest-{}", std::process::id()));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let engine = sts_e2e::engine();
        let (dir_a, dir_b) = (base.join("a"), base.join("b"));
        let (a, b) = tokio::join!(
            sts_engine::session::start(engine, &config, &dir_a),
            sts_engine::session::start(engine, &config, &dir_b),
        );
        let (mut a, b) = (a.unwrap_or_else(|e| panic!("{e}")), b.unwrap_or_else(|e| panic!("{e}")));
        let (pa, pb) = (a.controllers[0].aux_port(), b.controllers[0].aux_port());
        assert_ne!(pa, pb, "each copy's REST API on a port of its own");
        // The firewall's log entry (priority 0), the same in both.
        let before = log_entry(&a);
        assert_eq!(before, log_entry(&b));
        assert!(a.apply_policy("log-off").await.unwrap(), "applied");
        // No settling here: what the request set off is through when
        // `apply` returns (under load the controller used to answer before
        // its FLOW_MODs left its send queue).
        assert_ne!(log_entry(&a), before, "a's switches changed");
        assert_eq!(log_entry(&b), before, "b's did not");
        // Its prerequisite was applied: log-on may follow.
        assert!(a.apply_policy("log-on").await.unwrap());
        assert_eq!(a.applied_policies, ["log-off", "log-on"]);
    });
}
