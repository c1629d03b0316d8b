//! A rewind puts the controllers' files back. faucet reads its
//! configuration from a file that policies edit (`{dir}/faucet-0.yaml`); a
//! copy resumed from a checkpoint taken before a policy must find the file
//! as it was then, or its next reload (or a restart) would read an edit
//! from a run that, for it, never happened. Real faucet, real checkpoints.

use std::path::{Path, PathBuf};

use sts_engine::config::Config;
use sts_engine::replay::{Replayer, Step};
use sts_engine::Engine;
use sts_trace::Trace;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the workspace")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_puts_back_the_files_a_policy_edited() {
    let dir = std::env::temp_dir().join(format!("sts-rewind-files-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    // faucet on a line of three with the VLAN-move example's policies.
    let text = std::fs::read_to_string(workspace().join("examples/traces/faucet-slow-packet-in/config.toml"))
        .expect("the example's config");
    let config = Config::from_toml(&text, &dir.join("config.toml")).unwrap_or_else(|e| panic!("{e}"));
    let lines = [
        r#"{"format":"sts-trace","version":3}"#,
        r#"{"seq":1,"t_ms":1000,"external":{"type":"ping","src":"h1","dst":"h3"}}"#,
        r#"{"seq":2,"t_ms":1300,"external":{"type":"policy","name":"split"}}"#,
        r#"{"seq":3,"t_ms":1600,"external":{"type":"ping","src":"h3","dst":"h2"}}"#,
    ];
    std::fs::write(dir.join("inputs.jsonl"), lines.join("\n") + "\n").expect("the trace written");
    let trace = Trace::load(&dir.join("inputs.jsonl")).unwrap_or_else(|e| panic!("{e}"));
    let engine = Engine::silent();
    let mut r = Replayer::start(&engine, &config, &trace, &dir.join("run"), 1).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(r.step().await.unwrap_or_else(|e| panic!("{e}")), Step::Injected { index: 0, .. }));
    let yaml = r.session().files_dir.join("faucet-0.yaml");
    let before = std::fs::read_to_string(&yaml).expect("faucet's configuration");
    // Checkpointed before the policy, which then edits the file.
    let mut mark = r.checkpoint().await.unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(r.step().await.unwrap_or_else(|e| panic!("{e}")), Step::Injected { index: 1, .. }));
    let split = std::fs::read_to_string(&yaml).expect("faucet's configuration");
    assert!(split != before && split.contains("native_vlan: other"), "the policy edited it:\n{split}");
    // Back to before the policy: the file as it was, and the policy again
    // edits it as the first time.
    r.rewind(&mut mark).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(std::fs::read_to_string(&yaml).expect("faucet's configuration"), before);
    assert!(matches!(r.step().await.unwrap_or_else(|e| panic!("{e}")), Step::Injected { index: 1, .. }));
    assert_eq!(std::fs::read_to_string(&yaml).expect("faucet's configuration"), split);
    drop(r);
    drop(mark);
    let _ = std::fs::remove_dir_all(&dir);
}
