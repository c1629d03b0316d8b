"""Bug: stale routes after a link failure (a blackhole).

A proactive router for the four-switch ring s1-s2-s3-s4-s1, one host per
switch. At connection it installs a route to every host (shortest way round,
clockwise on ties) and answers ARP itself. It never listens to port status,
so when a link fails, routes over it stay: traffic is dropped at the dead port
although the other way round the ring is up.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from common.learning import LearningSwitch, answer_arp, host_mac  # noqa: E402

# Port numbers as sts wires the ring: port 1 is the host; links are listed
# (1,2) (2,3) (3,4) (4,1), each taking the next free port on both ends.
CLOCKWISE = {1: 2, 2: 3, 3: 3, 4: 3}  # the port towards the next switch
COUNTER = {1: 3, 2: 2, 3: 2, 4: 2}  # the port towards the previous one


def route(sw, dst):
    if sw == dst:
        return 1
    ahead = (dst - sw) % 4
    return CLOCKWISE[sw] if ahead <= 2 else COUNTER[sw]


class StaleRoutes(LearningSwitch):
    def on_switch(self, dp):
        parser = dp.ofproto_parser
        for h in range(1, 5):
            self.add_flow(dp, 10, parser.OFPMatch(eth_dst=host_mac(h)), [parser.OFPActionOutput(route(dp.id, h))])

    def on_packet(self, dp, in_port, eth, pkt):
        answer_arp(dp, in_port, pkt)
        return False  # never learn, never flood
