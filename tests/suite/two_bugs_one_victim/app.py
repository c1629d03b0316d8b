"""Two bugs, one victim: a pinned rule and stale routes both starve h2.

A proactive router for the line s1-s2-s3 (one host per switch): at each
connection it installs a route of priority 10 to every host, and answers ARP
itself. Two bugs:

- **pinned rule** (the one the trace was recorded for): when s3 connects a
  second time, the app "restores" a quarantine of h2 that was never meant to
  outlive a test, a rule of priority 50 at s1 that drops everything to h2.
  Its minimal causal sequence: s3 down, s3 up (2 inputs).
- **stale routes**: the routes are never recomputed, so when h2 moves from s2
  to s3, traffic to h2 still goes to its old port. One input: the migration.

Both blackhole h2. A minimizer that only keeps "h2 is the victim" drops the
reconnection and keeps the migration: it swaps the bug it was given for the
simpler one. The culprits (s1, priority 50, drops; s2, priority 10, a down
link) tell them apart.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from common.learning import ProactiveLineRouter, host_mac  # noqa: E402


class TwoBugsOneVictim(ProactiveLineRouter):
    def on_connection(self, dp, n):
        s1 = self.datapaths.get(1)
        if dp.id == 3 and n == 2 and s1 is not None:
            self.add_flow(s1, 50, s1.ofproto_parser.OFPMatch(eth_dst=host_mac(2)), [])
