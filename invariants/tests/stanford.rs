//! The Stanford backbone (the data-plane verification benchmark, in
//! `tests/data/stanford-backbone/`) loaded as a mock network and checked
//! update by update: the incremental verdicts against a full check, and the
//! loops reported against the real switch pipeline (`Network::probe`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sts_invariants::check::{Checker, Facts, Incremental, Invariant, Report};
use sts_invariants::header::{s, Cube, Header, Shape, Ternary, L3, PRESENT};
use sts_invariants::stanford::{RouterNet, Rule};

fn data(variant: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/stanford-backbone").join(variant)
}

fn loops(r: &Report) -> BTreeSet<Vec<String>> {
    r.violations.iter().filter(|v| v.invariant == Invariant::Loop).map(|v| v.elements.clone()).collect()
}

fn loop_checker() -> Checker {
    Checker { enabled: [Invariant::Loop].into_iter().collect(), ..Checker::default() }
}

/// A data set of the given `topo.txt` and `updates` in a fresh scratch
/// directory named after `name` (removed by the caller).
fn scratch_data_set(name: &str, topo: &str, updates: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sts-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch");
    std::fs::write(dir.join("topo.txt"), topo).expect("topo");
    std::fs::write(dir.join("updates"), updates).expect("updates");
    dir
}

/// The last report of `sts verify` over the first `upto` updates of `dir`,
/// and a check from scratch of the network they leave (both loading `dir`
/// afresh).
fn verified_and_from_scratch(dir: &Path, upto: usize) -> (Report, Report) {
    let mut rn = RouterNet::load(dir).expect("loads");
    let out = sts_invariants::verify::run(&mut rn, loop_checker(), Some(upto), |_| {}).expect("verifies");
    let mut fresh = RouterNet::load(dir).expect("loads");
    let (_, full) = sts_invariants::verify::full_check_at(&mut fresh, loop_checker(), upto).expect("checks");
    (out.last, full)
}

#[test]
fn both_variants_load_as_their_routers_acl_elements_and_updates() {
    let rn = RouterNet::load(&data("stanford-noacl")).expect("loads");
    assert_eq!((rn.routers(), rn.net.switches.len(), rn.updates.len()), (16, 16, 7680));
    // 74 directed links; each is a mock link between two ports of its own.
    assert_eq!(rn.net.switch_links().len(), 74);
    let rn = RouterNet::load(&data("stanford")).expect("loads");
    assert_eq!((rn.routers(), rn.updates.len()), (16, 9052));
    assert_eq!(rn.net.switches.len() - rn.routers(), 108, "one element per ACL and interface");
}

/// An IPv4 ICMP frame to `dst`, from nobody in particular.
fn frame_to(dst: u32) -> Vec<u8> {
    let shape = Shape::all().into_iter().find(|s| !s.tagged && matches!(s.l3, L3::Ipv4(_)));
    let cube = Cube::of_shape(shape.expect("an IPv4 shape"));
    let cube = cube.with(s::IPV4_DST, Ternary::exact(PRESENT | dst as u64));
    let h: Header = cube.expect("a header").witness().expect("non-empty");
    h.to_frame()
}

#[test]
fn incremental_loops_agree_with_a_full_check_and_the_dataplane() {
    let mut rn = RouterNet::load(&data("stanford-noacl")).expect("loads");
    let mut inc = Incremental::new(loop_checker());
    inc.cut_for(rn.values());
    inc.refresh_loop_witnesses = false;
    inc.check(&rn.net, &Facts::default());
    let updates = rn.updates.clone();
    let checkpoints = [400, 1500, 2600, 3840, 5200, 7680];
    let mut rng = ChaCha8Rng::seed_from_u64(44);
    let (mut looping_checkpoints, mut probes_looping) = (0, 0);
    for (i, u) in updates.iter().enumerate() {
        let changed = rn.apply(u).expect("applies");
        let report = inc.recheck(&rn.net, &Facts::default(), &changed);
        if !checkpoints.contains(&(i + 1)) {
            continue;
        }
        // The same loops as a check from scratch.
        let full = loop_checker().check(&rn.net, &Facts::default());
        assert_eq!(loops(&report), loops(&full), "after update {}", i + 1);
        // Every loop reported loops in the switches' own pipeline, with its witness frame.
        for v in report.violations.iter().filter(|v| v.invariant == Invariant::Loop) {
            let w = v.witness.as_ref().expect("a witness");
            let from = rn.net.hosts.iter().position(|h| h.name == w.from).expect("a router's host");
            let frame: Vec<u8> = (0..w.frame.len() / 2)
                .map(|k| u8::from_str_radix(&w.frame[2 * k..2 * k + 2], 16).expect("hex"))
                .collect();
            let probe = rn.net.clone().probe(from, frame, 0, 2_000);
            assert!(probe.looped, "after update {}: {} does not loop in the dataplane", i + 1, v.summary);
        }
        // Brute force over sampled destinations from every router: a loop
        // there means the checker reports one.
        // Destinations inside the prefixes installed so far (where loops can be).
        let prefixes: Vec<(u32, u8)> = updates[..=i]
            .iter()
            .filter_map(|u| match &u.rule {
                Rule::Forward { prefix, len, .. } if u.insert => Some((*prefix, *len)),
                _ => None,
            })
            .collect();
        let mut looped = false;
        let mut probing = rn.net.clone();
        for _ in 0..40 {
            let (prefix, len) = prefixes[rng.gen_range(0..prefixes.len())];
            let host_bits = if len == 0 { u32::MAX } else { u32::MAX.checked_shr(len as u32).unwrap_or(0) };
            let dst = prefix | (rng.gen::<u32>() & host_bits);
            for a in 0..rn.net.hosts.len() {
                let probe = probing.probe(a, frame_to(dst), 0, 2_000);
                looped |= probe.looped;
                probes_looping += probe.looped as u32;
            }
        }
        if looped {
            assert!(!loops(&report).is_empty(), "after update {}: the dataplane loops, the checker says not", i + 1);
        }
        looping_checkpoints += !loops(&report).is_empty() as u32;
    }
    assert!(looping_checkpoints >= 3, "the stream must make loops to check: {looping_checkpoints}");
    // Most classes an update moves do the same at every router as another
    // one (default routes): followed once for all, the verdicts above unchanged.
    let (followed, shared) = inc.followed;
    eprintln!("{shared} of {followed} classes followed again took another's walk");
    assert!(shared > followed / 2, "{shared} of {followed} classes took another's walk");
    assert!(probes_looping > 0, "some sampled header must loop");
}

#[test]
fn loops_confirmed_through_acls_loop_in_the_filtered_dataplane() {
    let mut rn = RouterNet::load(&data("stanford")).expect("loads");
    let out = sts_invariants::verify::run(&mut rn, loop_checker(), Some(2400), |_| {}).expect("verifies");
    let present: Vec<_> = out.last.violations.iter().filter(|v| v.invariant == Invariant::Loop).collect();
    assert!(!present.is_empty(), "loops stand after 2,400 updates");
    assert!(out.appeared.len() >= 10, "{} loops appeared", out.appeared.len());
    for v in present {
        let w = v.witness.as_ref().expect("a witness");
        let from = rn.net.hosts.iter().position(|h| h.name == w.from).expect("a router's host");
        let frame: Vec<u8> =
            (0..w.frame.len() / 2).map(|k| u8::from_str_radix(&w.frame[2 * k..2 * k + 2], 16).expect("hex")).collect();
        assert!(rn.net.clone().probe(from, frame, 0, 2_000).looped, "{} does not loop through the ACLs", v.summary);
    }
    // An ACL on a loop's path stops some: the unfiltered network has more.
    let unfiltered = rn.unfiltered.as_ref().expect("ACL elements");
    let all = loop_checker().check(unfiltered, &Facts::default());
    assert!(loops(&all).len() > loops(&out.last).len(), "{:?} vs {:?}", loops(&all), loops(&out.last));
}

/// What `sts verify` keeps confirming through the ACLs update after update
/// (forgetting only what an update can change: the classes it moved, the
/// destinations an ACL line meets, in the direction the line moves the
/// filter) is what a confirmation from scratch finds.
#[test]
fn loops_confirmed_update_by_update_are_those_confirmed_from_scratch() {
    for upto in [800, 2600, 4526, 6300] {
        let (last, full) = verified_and_from_scratch(&data("stanford"), upto);
        assert_eq!(loops(&last), loops(&full), "after update {upto}");
        if upto == 4526 {
            assert!(!loops(&full).is_empty(), "loops stand through the ACLs after update {upto}");
        }
    }
}

/// An ACL line added or taken away moves a confirmed loop in its direction
/// only: a permit line (or a deny line removed) can only open one, a deny
/// line (or a permit line removed) only close one. Update by update, the
/// loops kept are those a confirmation from scratch finds.
#[test]
fn acl_lines_open_and_close_a_loop_update_by_update() {
    // a → b through b's inbound ACL `1` on te1; b → a directly.
    let topo = "a te1 b_1_te1_in inport\nb_1_te1_in permit b te1\nb te1 a te1\n";
    let permit = "acl b_1 access-list 1 permit 0 255 any null null null any null null null 100";
    let deny = "acl b_1 access-list 1 deny 0 255 any null null null 10.0.0.0 0.255.255.255 null null 200";
    let updates = [
        "+ fwd a 167772160 8 te1 8".to_string(),
        "+ fwd b 167772160 8 te1 8".to_string(),
        format!("+ {permit}"),
        format!("+ {deny}"),
        format!("- {deny}"),
        format!("- {permit}"),
    ];
    let dir = scratch_data_set("acl-lines", topo, &(updates.join("\n") + "\n"));
    // The ACL without lines denies everything (Cisco's implicit deny).
    let expected = [false, false, true, false, true, false];
    for (k, &looping) in expected.iter().enumerate() {
        let (last, full) = verified_and_from_scratch(&dir, k + 1);
        assert_eq!(loops(&last), loops(&full), "after update {}: {}", k + 1, updates[k]);
        assert_eq!(!loops(&full).is_empty(), looping, "after update {}: {}", k + 1, updates[k]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A loop around a triangle never leaves a router through the interface it
/// came in on; a loop between two routers does, at both.
#[test]
fn a_loop_turns_back_where_a_router_sends_a_packet_out_of_its_ingress_interface() {
    let topo = "a te1 b te1\nb te1 a te1\nb te2 c te1\nc te1 b te2\nc te2 a te2\na te2 c te2\n";
    // 10/8 around the triangle a → b → c → a; 11/8 between a and b.
    let updates = "+ fwd a 167772160 8 te1 8\n+ fwd b 167772160 8 te2 8\n+ fwd c 167772160 8 te2 8\n\
                   + fwd a 184549376 8 te1 8\n+ fwd b 184549376 8 te1 8\n";
    let dir = scratch_data_set("turns-back", topo, updates);
    let mut rn = RouterNet::load(&dir).expect("loads");
    for u in rn.updates.clone() {
        rn.apply(&u).expect("applies");
    }
    let report = loop_checker().check(&rn.net, &Facts::default());
    let mut seen = Vec::new();
    for v in &report.violations {
        let names: Vec<String> = v.elements.iter().map(|e| rn.rename(e)).collect();
        let turns = rn.turns_back(&v.witness.as_ref().expect("a witness").path);
        seen.push((names, turns));
    }
    seen.sort();
    let pair = |r: &str, i: &str| (r.to_string(), i.to_string());
    assert_eq!(
        seen,
        vec![
            (vec!["a".into(), "b".into()], vec![pair("a", "te1"), pair("b", "te1")]),
            (vec!["a".into(), "b".into(), "c".into()], vec![]),
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Loops not explained (`Incremental::explain_loops` off, as `sts verify`
/// takes the unfiltered network's loops as candidates) are the same loops:
/// update by update the class engine finds the same cycles with the same
/// classes as when it explains them, and none stands as a violation.
#[test]
fn loops_found_without_explaining_them_are_the_explained_ones() {
    let mut rn = RouterNet::load(&data("stanford-noacl")).expect("loads");
    let engines = || {
        let mut inc = Incremental::new(loop_checker());
        inc.cut_for(rn.values());
        inc.refresh_loop_witnesses = false;
        inc
    };
    let (mut explained, mut found) = (engines(), engines());
    found.explain_loops = false;
    let first = explained.check(&rn.net, &Facts::default());
    assert!(found.check(&rn.net, &Facts::default()).violations.iter().all(|v| v.invariant != Invariant::Loop));
    assert_eq!(loops(&first).len(), explained.loop_cycles().len());
    let updates = rn.updates.clone();
    let mut looping = 0;
    for (i, u) in updates.iter().take(3000).enumerate() {
        let changed = rn.apply(u).expect("applies");
        let report = explained.recheck(&rn.net, &Facts::default(), &changed);
        let bare = found.recheck(&rn.net, &Facts::default(), &changed);
        let cycles = explained.loop_cycles();
        assert_eq!(found.loop_cycles(), cycles, "after update {}", i + 1);
        for c in &cycles {
            assert_eq!(found.loop_classes_of(c), explained.loop_classes_of(c), "after update {}", i + 1);
        }
        assert_eq!(loops(&report).len(), cycles.len(), "after update {}: every cycle explained", i + 1);
        assert!(loops(&bare).is_empty(), "after update {}: a loop stands unexplained", i + 1);
        looping += !cycles.is_empty() as usize;
    }
    assert!(looping > 100, "the stream must make loops to compare: {looping} updates");
}
