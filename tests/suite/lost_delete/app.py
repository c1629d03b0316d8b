"""Bug: a lost FLOW_MOD delete leaves a route over a failed link (a blackhole).

A proactive router for the four-switch ring s1-s2-s3-s4-s1, one host per
switch (routes of priority 10, the shortest way round, clockwise on ties; ARP
answered by the controller). Unlike `stale_routes` it does listen to port
status: when a link fails it recomputes the routes on the ring without that
link and, on every switch whose route to a host changes, deletes the old
route (a strict delete of the priority-10 entry) and installs the new one as
a backup route of priority 5. The app trusts the delete: it never asks for a
barrier or reads back the table. When the delete is lost on its way, the old
priority-10 route stays above the new one and traffic is still sent out of
the dead port.

Its minimal causal sequence: the loss of the next FLOW_MOD to s1 (the
fuzzer's `control_drop`), then the failure of s1-s2 (2 inputs). The noise
cannot do it: pings, lost PACKET_OUTs (an ARP answer lost costs one ping
only), and lost FLOW_MODs armed on s3, whose routes never change.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from common.learning import LearningSwitch, answer_arp, host_mac  # noqa: E402
from common.ring import link_of, route  # noqa: E402

class LostDelete(LearningSwitch):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.datapaths = {}
        self.down = set()

    def on_switch(self, dp):
        self.datapaths[dp.id] = dp
        parser = dp.ofproto_parser
        for h in range(1, 5):
            self.add_flow(dp, 10, parser.OFPMatch(eth_dst=host_mac(h)), [parser.OFPActionOutput(route(dp.id, h, set()))])

    def on_port_status(self, dp, reason, desc):
        link = link_of(dp.id, desc.port_no)
        if link is None or not desc.state & dp.ofproto.OFPPS_LINK_DOWN or link in self.down:
            return
        before = set(self.down)
        self.down.add(link)
        for sw, d in sorted(self.datapaths.items()):
            parser, ofp = d.ofproto_parser, d.ofproto
            for h in range(1, 5):
                old, new = route(sw, h, before), route(sw, h, self.down)
                if old == new:
                    continue
                # BUG: no barrier, no read-back: a lost delete goes unnoticed.
                d.send_msg(parser.OFPFlowMod(datapath=d, command=ofp.OFPFC_DELETE_STRICT, priority=10,
                                             out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                                             match=parser.OFPMatch(eth_dst=host_mac(h))))
                self.add_flow(d, 5, parser.OFPMatch(eth_dst=host_mac(h)), [parser.OFPActionOutput(new)])

    def on_packet(self, dp, in_port, eth, pkt):
        answer_arp(dp, in_port, pkt)
        return False  # never learn, never flood
