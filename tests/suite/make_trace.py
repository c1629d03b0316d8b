#!/usr/bin/env python3
"""Writes one bug-suite case as an experiment directory: the case's config
and a trace whose external events are the case's known minimal causal
sequence (MCS) hidden among EXTRA extraneous inputs, with the violation the
MCS causes as the trace's last record: its victim and its culprit (what
causes it, as sts names it: the same bug is the same culprit). The race
cases (unbarriered_path, first_sighting, spoof_guard) write a clean run instead,
with no violation: their bug needs an order of messages, which `sts explore`
finds.

    tests/suite/make_trace.py CASE EXTRA SEED OUTDIR

The extraneous inputs are chosen so that they cannot cause the bug on their
own (they never touch what the bug needs); the optimal MCS size is printed.
"""

import json
import os
import random
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
STEP_MS = 150
START_MS = 1000


def ping(a, b):
    return {"type": "ping", "src": "h%d" % a, "dst": "h%d" % b}


def port(s, p):
    return {"switch": s, "port": p}


def link(kind, a, b):
    return {"type": kind, "a": a, "b": b}


def case_events(case, extra, rng):
    """(config name, [(event, gap_ms)], violation, optimal size)."""
    noise, mcs = [], []
    if case == "rare_pair_crash":
        # h1 h2 h3 on s1 s2 s3, h4 on s1. Needs: a port added (h4 moves), then h3 heard.
        before = int(extra * 0.7)
        for _ in range(before):
            # Never h3: the bug needs a packet from h3 to reach the controller,
            # which flows installed by earlier pings would prevent.
            noise.append(ping(*rng.choice([(1, 2), (2, 1)])))
        mcs.append({"type": "host_migrate", "host": "h4", "from": 1, "to": 3})
        after = [ping(*rng.choice([(1, 2), (2, 1)])) for _ in range(extra - before)]
        events = noise + mcs[:1] + after + [ping(1, 3)]
        return events, {"invariant": "liveness", "elements": ["c0"], "culprit": "c0 is not running", "summary": "controller c0 is not running"}, 2
    if case == "link_state_corruption":
        # Needs: a link down, then up. Noise: pings and dataplane faults (no port change).
        l12 = (port(1, 2), port(2, 2))
        l23 = (port(2, 3), port(3, 2))
        events = []
        for _ in range(extra):
            r = rng.random()
            if r < 0.8:
                events.append(ping(*rng.sample([1, 2, 3], 2)))
            else:
                a, b = rng.choice([l12, l23])
                events.append({"type": "dataplane_delay", "a": a, "b": b, "ms": 50})
                events.append({"type": "dataplane_delay_end", "a": a, "b": b})
        at = rng.randrange(len(events) // 3, len(events))
        a, b = rng.choice([l12, l23])
        events[at:at] = [link("link_down", a, b), link("link_up", a, b)]
        return events, {"invariant": "controller-errors", "elements": ["c0"], "culprit": "KeyError at app.py:26 in on_port_status", "summary": "KeyError on port up"}, 2
    if case == "overlapping_modules":
        # h1 h2 h3 on s1 s2 s3, h4 on s1. Needs: IPv4 to h2 seen at s2. Then
        # every IPv4 frame h2 sends meets the overlapping rule on its own
        # switch and goes back out its ingress port: h2 -> h1 is blackholed
        # with no other input. (This case first claimed an optimum of 2, with
        # h1 <-> h3 flows; sts minimize found the single ping, and it is right.)
        events = [ping(*rng.choice([(1, 3), (3, 1), (4, 3), (3, 4), (1, 4), (4, 1)])) for _ in range(extra)]
        events.append(ping(4, 2))
        return events, {"invariant": "blackhole", "elements": ["h2", "h1"], "culprit": "s2 table 0: a rule of priority 10 on eth_type", "summary": "IPv4 at s2 goes to h2's port"}, 1
    if case == "handshake_race":
        # Needs: s2 reconnects, then a packet-in at s2 within half a second.
        events = [ping(*rng.sample([1, 2, 3], 2)) for _ in range(extra)]
        at = rng.randrange(len(events) // 3, len(events))
        race = [({"type": "switch_down", "switch": 2}, STEP_MS), ({"type": "switch_up", "switch": 2}, 300), (ping(1, 3), 50)]
        timed = [(e, STEP_MS) for e in events]
        timed[at:at] = race
        # Pings right after the reconnection would join the race: keep them away.
        for i in range(at + 3, min(at + 6, len(timed))):
            timed[i] = (timed[i][0], 600 if i == at + 3 else STEP_MS)
        return timed, {"invariant": "controller-errors", "elements": ["c0"], "culprit": "KeyError at app.py:25 in table", "summary": "KeyError in the handshake window"}, 3
    if case == "stale_routes":
        # The ring s1-s2-s3-s4. Needs: link s1-s2 down for good. Noise: pings,
        # and quick flaps of the other links (back before anything persists).
        ring = {(1, 2): (port(1, 2), port(2, 2)), (2, 3): (port(2, 3), port(3, 2)), (3, 4): (port(3, 3), port(4, 2)), (4, 1): (port(4, 3), port(1, 3))}
        timed = []
        for _ in range(extra):
            if rng.random() < 0.85:
                timed.append((ping(*rng.sample([1, 2, 3, 4], 2)), STEP_MS))
            else:
                a, b = ring[rng.choice([(2, 3), (3, 4), (4, 1)])]
                timed.append((link("link_down", a, b), STEP_MS))
                timed.append((link("link_up", a, b), 100))
        a, b = ring[(1, 2)]
        at = rng.randrange(len(timed) // 2, len(timed) + 1)
        # Flaps after the failure would cut the ring in two: only pings follow it.
        timed = timed[:at] + [(link("link_down", a, b), STEP_MS)] + [(e, g) for e, g in timed[at:] if e["type"] == "ping"]
        return timed, {"invariant": "blackhole", "elements": ["h2", "h1"], "culprit": "s2 table 0: a rule of priority 10 on eth_dst", "summary": "routes over the failed link s1-s2"}, 1
    if case == "ignored_table_full":
        # One switch, five hosts, four entries per table; the app learns hosts
        # from ARP. Noise: pings between h1 and h2 only (two hosts learned:
        # everything fits). The MCS: any of them, then h3 pings h4: h3 is the
        # third host learned, and its table-1 entry does not fit.
        events = [ping(*rng.choice([(1, 2), (2, 1)])) for _ in range(extra)]
        events.append(ping(3, 4))
        return events, {"invariant": "blackhole", "elements": ["h1", "h3"], "culprit": "s1 table 1: no rule matches", "summary": "h3's route did not fit in table 1"}, 2
    if case == "blocked_from_start":
        # Three hosts on a line; every IPv4 frame is dropped from the start.
        # The optimal sequence is empty: no input causes the blackhole.
        events = [ping(*rng.sample([1, 2, 3], 2)) for _ in range(extra)]
        return events, {"invariant": "blackhole", "elements": ["h2", "h1"], "culprit": "s2 table 0: a rule of priority 100 on eth_type", "summary": "IPv4 dropped by the default-deny rule"}, 0
    if case == "several_victims":
        # The line s1-s2-s3. Needs: s2 reconnecting twice (its third
        # connection installs a drop-everything rule). Every host crossing s2
        # is then a victim; h2 is one only if s1 learned where h2 is before,
        # so a ping between h1 and h2 comes first, and the trace's violation
        # names h2. Keeping that ping (victim h2) is not needed for the bug.
        events = [ping(*rng.sample([1, 2], 2))] + [ping(*rng.sample([1, 2, 3], 2)) for _ in range(extra - 1)]
        at = rng.randrange(max(1, len(events) // 3), len(events))
        flaps = [{"type": "switch_down", "switch": 2}, {"type": "switch_up", "switch": 2}] * 2
        events[at:at] = flaps
        culprit = "s2 table 0: a match-all rule of priority 100"
        return events, {"invariant": "blackhole", "elements": ["h1", "h2"], "culprit": culprit,
                        "summary": "everything crossing s2 dropped after its third connection"}, 4
    if case == "two_bugs_one_victim":
        # The line s1-s2-s3. The bug of the trace: s3 reconnects, and the app
        # pins a drop rule for h2 at s1. Also in the trace, earlier (in the
        # half delta debugging tries first): h2 moving to s3, the app's other
        # bug (stale routes), which starves h2 too.
        events = [ping(*rng.sample([1, 2, 3], 2)) for _ in range(extra)]
        at = rng.randrange(len(events) // 2 + 1, len(events))
        events[at:at] = [{"type": "switch_down", "switch": 3}, {"type": "switch_up", "switch": 3}]
        earlier = rng.randrange(len(events) // 8, len(events) // 3)
        events[earlier:earlier] = [{"type": "host_migrate", "host": "h2", "from": 2, "to": 3}]
        culprit = "s1 table 0: a rule of priority 50 on eth_dst"
        return events, {"invariant": "blackhole", "elements": ["h1", "h2"], "culprit": culprit,
                        "summary": "h2 quarantined at s1 after s3 reconnected"}, 2
    if case == "wrong_way_then_stale":
        # The line s1-s2-s3. The bug of the trace: s3 reconnects, and the app
        # pins a detour at s2 that sends h1's traffic towards s3, where it
        # dies on an ordinary route. Also in the trace, earlier (in the half
        # delta debugging tries first): h3 moving to s1, the app's other bug
        # (stale routes), whose drops are on such a route too.
        events = [ping(*rng.sample([1, 2, 3], 2)) for _ in range(extra)]
        at = rng.randrange(len(events) // 2 + 1, len(events))
        events[at:at] = [{"type": "switch_down", "switch": 3}, {"type": "switch_up", "switch": 3}]
        earlier = rng.randrange(len(events) // 8, len(events) // 3)
        events[earlier:earlier] = [{"type": "host_migrate", "host": "h3", "from": 3, "to": 1}]
        culprit = "s2 table 0: a rule of priority 50 on eth_dst"
        return events, {"invariant": "blackhole", "elements": ["h2", "h1"], "culprit": culprit,
                        "summary": "h1's traffic sent the wrong way at s2 after s3 reconnected"}, 2
    if case == "policy_unmonitor":
        # The line s1-s2-s3. Needs two policy changes, in order: monitor h1,
        # then stop monitoring it (which wipes every flow). Noise: pings and
        # monitoring h2 (never stopped).
        events = []
        for _ in range(extra):
            if rng.random() < 0.8:
                events.append(ping(*rng.sample([1, 2, 3], 2)))
            else:
                events.append({"type": "policy", "name": "monitor-h2"})
        start = rng.randrange(0, len(events) // 2)
        events[start:start] = [{"type": "policy", "name": "monitor-h1"}]
        stop = rng.randrange(start + 1, len(events) + 1)
        events[stop:stop] = [{"type": "policy", "name": "unmonitor-h1"}]
        return events, {"invariant": "blackhole", "elements": ["h1", "h2"], "culprit": "s1 table 0: no rule matches",
                        "summary": "every flow deleted when monitoring h1 stopped"}, 2
    if case == "lost_delete":
        # The ring s1-s2-s3-s4. Needs: the next FLOW_MOD to s1 lost (armed
        # early), then link s1-s2 down (the reroute's delete is the one lost).
        # Noise: pings, lost PACKET_OUTs anywhere, lost FLOW_MODs armed on s3
        # (whose routes never change).
        events = []
        for _ in range(extra):
            r = rng.random()
            if r < 0.8:
                events.append(ping(*rng.sample([1, 2, 3, 4], 2)))
            elif r < 0.9:
                events.append({"type": "control_drop", "switch": rng.choice([1, 2, 3, 4]), "msg_type": "packet_out"})
            else:
                events.append({"type": "control_drop", "switch": 3, "msg_type": "flow_mod"})
        events.insert(rng.randrange(0, len(events) // 3 + 1), {"type": "control_drop", "switch": 1, "msg_type": "flow_mod"})
        events.insert(rng.randrange(len(events) // 2, len(events) + 1), link("link_down", port(1, 2), port(2, 2)))
        return events, {"invariant": "blackhole", "elements": ["h1", "h2"], "culprit": "s1 table 0: a rule of priority 10 on eth_dst",
                        "summary": "the reroute's delete of s1's route to h2 was lost"}, 2
    if case == "forgotten_failure":
        # The ring s1-s2-s3-s4 on Ryu, OpenFlow 1.0. Needs: link s1-s2 down
        # (never recovered), then the controller's crash and restart. Noise:
        # pings, crash-restart pairs anywhere (harmless while every link is
        # up, a second occurrence of the cause's tail after the failure), and
        # failures of s2-s3 or s3-s4 that recover at the next input.
        crash = ({"type": "controller_crash", "controller": "c0"}, STEP_MS)
        restart = ({"type": "controller_restart", "controller": "c0"}, 1000)
        events = []
        for _ in range(extra):
            r = rng.random()
            if r < 0.75:
                events.append(ping(*rng.sample([1, 2, 3, 4], 2)))
            elif r < 0.9:
                a, b = rng.choice([(port(2, 3), port(3, 2)), (port(3, 3), port(4, 2))])
                events.append([link("link_down", a, b), link("link_up", a, b)])
            else:
                events.append([crash, restart])
        at = rng.randrange(len(events) // 4, len(events) // 2 + 1)
        events.insert(at, link("link_down", port(1, 2), port(2, 2)))
        events.insert(rng.randrange(at + 1, len(events) + 1), [crash, restart])
        flat = [e for group in events for e in (group if isinstance(group, list) else [group])]
        return flat, {"invariant": "blackhole", "elements": ["h1", "h2"], "culprit": "s1 table 0: a rule of priority 10 on eth_dst",
                      "summary": "the restarted controller routes into the link that is still down"}, 3
    if case == "two_causes":
        # The line s1-s2-s3. One bug with two causes: three monitoring
        # policies on h1 (audit, rate limit, mirror: all in the first half,
        # which delta debugging tries first), or h1 isolated while the guest
        # VLAN is on (2 policies, split across the halves: the optimum).
        # Noise: pings and other hosts' policies (never three on one host).
        def policy(name):
            return {"type": "policy", "name": name}
        events = []
        for _ in range(extra):
            if rng.random() < 0.75:
                events.append(ping(*rng.sample([1, 2, 3], 2)))
            else:
                events.append(policy(rng.choice(["audit-h2", "rate-limit-h2", "mirror-h3"])))
        # Delta debugging's first half is the first (extra + 5) // 2 inputs.
        n1 = max((extra + 5) // 2 - 4, 0)
        first, rest = events[:n1], events[n1:]
        for name in ["audit-h1", "rate-limit-h1", "mirror-h1", "isolate-h1"]:
            first.insert(rng.randrange(len(first) + 1), policy(name))
        rest.insert(rng.randrange(len(rest) + 1), policy("guest-vlan"))
        events = first + rest
        return events, {"invariant": "blackhole", "elements": ["h2", "h1"], "culprit": "s1 table 0: a rule of priority 30 on eth_dst",
                        "summary": "every frame to h1 dropped at s1 by the policy compiler's fallback"}, 2
    if case in ("unbarriered_path", "first_sighting"):
        # Races: the trace is a clean run (no violation), pings among the
        # three hosts of the line; the bug needs an order of messages that
        # timing decides (`sts explore` tries them). Optimal: any one ping.
        # The line s1-...-s5, a host on each.
        events = [ping(*rng.sample([1, 2, 3, 4, 5], 2)) for _ in range(max(extra, 1))]
        if case == "first_sighting":
            # Links that take 20 ms (a campus, not a rack): a frame's copies
            # reach the controller in the order the frame travelled, unless
            # a message is held. (With instant links the controller reads
            # three copies at once, in any order: the race fires by itself.)
            slow = [{"type": "dataplane_delay", "a": a, "b": b, "ms": 20}
                    for a, b in [(port(n, 2 if n == 1 else 3), port(n + 1, 2)) for n in range(1, 5)]]
            events = slow + events
        return events, None, 1
    if case == "spoof_guard":
        # A race: a clean run of pings among the line's five hosts, one of
        # which (heard from before) moves to another switch halfway and
        # pings 300 ms later; its old switch reports the unplugged port at
        # once. Optimal: its earlier ping, the move and its ping after.
        hosts = [1, 2, 3, 4, 5]
        events = [ping(*rng.sample(hosts, 2)) for _ in range(max(extra, 1))]
        moved = rng.choice(hosts)
        to = rng.choice([s for s in hosts if s != moved])
        others = [h for h in hosts if h != moved]
        at = len(events) // 2
        events.insert(rng.randrange(at + 1), ping(moved, rng.choice(others)))
        events[at + 1:at + 1] = [{"type": "host_migrate", "host": "h%d" % moved, "from": moved, "to": to},
                                 (ping(moved, rng.choice(others)), 300)]
        return events, None, 3
    raise SystemExit("unknown case %r" % case)


def main():
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    case, extra, seed, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    rng = random.Random(seed)
    events, violation, optimal = case_events(case, extra, rng)
    timed = [e if isinstance(e, tuple) else (e, STEP_MS) for e in events]
    os.makedirs(out, exist_ok=True)
    shutil.copy(os.path.join(HERE, case, "config.toml"), os.path.join(out, "config.toml"))
    # The config names its app relative to itself: point it at the suite.
    with open(os.path.join(out, "config.toml")) as f:
        text = f.read().replace('apps = ["app.py"]', 'apps = ["%s"]' % os.path.join(HERE, case, "app.py"))
    with open(os.path.join(out, "config.toml"), "w") as f:
        f.write(text)
    t = START_MS
    lines = [json.dumps({"format": "sts-trace", "version": 1, "seed": seed})]
    for seq, (e, gap) in enumerate(timed, 1):
        t += gap if seq > 1 else 0
        lines.append(json.dumps({"seq": seq, "t_ms": t, "external": e}))
    if violation is not None:
        lines.append(json.dumps({"seq": len(timed) + 1, "t_ms": t + 1500, "violation": violation}))
    with open(os.path.join(out, "trace.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(json.dumps({"case": case, "inputs": len(timed), "optimal": optimal}))


if __name__ == "__main__":
    main()
