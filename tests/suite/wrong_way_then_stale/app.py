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

from common.learning import ProactiveLineRouter, host_mac, towards  # noqa: E402


class WrongWayThenStale(ProactiveLineRouter):
    def on_connection(self, dp, n):
        s2 = self.datapaths.get(2)
        if dp.id == 3 and n == 2 and s2 is not None:
            p = s2.ofproto_parser
            self.add_flow(s2, 50, p.OFPMatch(eth_dst=host_mac(1)), [p.OFPActionOutput(towards(2, 3))])
