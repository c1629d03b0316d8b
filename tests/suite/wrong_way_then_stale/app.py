"""The wrong way, then a stale route: two bugs on one path.

A proactive router for the line s1-s2-s3 (one host per switch): at each
connection it installs a route of priority 10 to every host, and answers ARP
itself. Two bugs:

- **pinned detour** (the one the trace was recorded for): when s3 connects a
  second time, the app "restores" a test detour at s2, a rule of priority 50
  that sends everything for h1 towards s3, the wrong way. s3's own route for
  h1 points back at s2, where the frame came from, so s3 drops it: the frame
  dies downstream, on an ordinary route. Its minimal causal sequence: s3
  down, s3 up (2 inputs).
- **stale routes**: the routes are never recomputed, so when h3 moves from s3
  to s1, traffic to h3 still goes to its old port. One input: the migration.

The last rule the detoured frame meets is a route of priority 10, the same
kind of rule that drops the stale traffic: judged by the last rule, the two
bugs look alike and a minimizer keeps the migration (1 input) instead of the
reconnection. The first wrong turn (s2's detour) tells them apart.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from common.learning import LINE_TOWARDS_HIGHER, LearningSwitch, answer_arp, host_mac, line_route  # noqa: E402

class WrongWayThenStale(LearningSwitch):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.connections = {}
        self.datapaths = {}

    def on_switch(self, dp):
        parser = dp.ofproto_parser
        self.datapaths[dp.id] = dp
        n = self.connections.get(dp.id, 0) + 1
        self.connections[dp.id] = n
        for h in range(1, 4):
            self.add_flow(dp, 10, parser.OFPMatch(eth_dst=host_mac(h)), [parser.OFPActionOutput(line_route(dp.id, h))])
        s2 = self.datapaths.get(2)
        if dp.id == 3 and n == 2 and s2 is not None:
            p = s2.ofproto_parser
            self.add_flow(s2, 50, p.OFPMatch(eth_dst=host_mac(1)), [p.OFPActionOutput(LINE_TOWARDS_HIGHER[2])])

    def on_packet(self, dp, in_port, eth, pkt):
        answer_arp(dp, in_port, pkt)
        return False  # never learn, never flood
