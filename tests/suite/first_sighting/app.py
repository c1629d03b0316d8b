"""Bug (a race): a host located by the first switch to report it.

The switches flood unknown traffic themselves and copy it to the
controller (table-miss: to the controller, then flood), as hybrid
deployments do. The app places a host at the first (switch, port) that
reports its address, installs a route to it on every switch of the line
s1-s2-s3 (priority 10 on eth_dst) and never moves it. The host's own switch
reports first when the copies reach the controller in the order the frame
travelled, which is the usual order but not a promised one: two switches'
connections are not ordered. If a neighbour's copy comes first, the host is
placed on an inter-switch port, and the routes to it point back and forth
between two switches: a forwarding loop.

A race: `sts explore` finds it from a clean run (tests/suite/make_trace.py
first_sighting writes one) by holding the host switch's PACKET_IN past its
neighbour's.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from common.learning import LearningSwitch, towards  # noqa: E402


class FirstSighting(LearningSwitch):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.datapaths = {}
        self.location = {}

    def on_switch(self, dp):
        self.datapaths[dp.id] = dp
        parser, ofp = dp.ofproto_parser, dp.ofproto
        # Replaces the base class's table-miss rule: copy up, then flood.
        self.add_flow(dp, 0, parser.OFPMatch(),
                      [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER),
                       parser.OFPActionOutput(ofp.OFPP_FLOOD)])

    def on_packet(self, dp, in_port, eth, pkt):
        if eth.src in self.location or int(eth.src.split(":")[0], 16) & 1:
            return False
        # "The first switch to see a new address is the host's own."
        self.location[eth.src] = (dp.id, in_port)
        for sw in sorted(self.datapaths):
            other = self.datapaths[sw]
            out = in_port if sw == dp.id else towards(sw, dp.id)
            self.add_flow(other, 10, other.ofproto_parser.OFPMatch(eth_dst=eth.src),
                          [other.ofproto_parser.OFPActionOutput(out)])
        return False
