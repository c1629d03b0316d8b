"""Bug (a race): a path installed without a barrier.

On the first packet to a host, the app installs the route to that host on
every switch of the line s1-s2-...-s5 (the packet's own switch last) and sends
the packet on at once, with no barrier between the routes and the
PACKET_OUT. Nothing makes a downstream switch apply its route before the
packet reaches it; it usually does, because the route left the controller
first. The app takes a packet to a host it has routed, reported by a
switch from an inter-switch port, for a forwarding loop and pins a drop
rule for that host there (priority 20, above the route): if a route is
late, the packet that overtook it gets its destination blackholed at that
switch for good. (A routed host's packet from a host port is only late: it
is sent on along the route.)

A race: `sts explore` finds it from a clean run (tests/suite/make_trace.py
unbarriered_path writes one) by holding a downstream route's FLOW_MOD past
the packet's arrival.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from common.learning import LearningSwitch, answer_arp, host_number, line_route  # noqa: E402


class UnbarrieredPath(LearningSwitch):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.datapaths = {}
        self.routed = set()

    def on_switch(self, dp):
        self.datapaths[dp.id] = dp

    def on_packet(self, dp, in_port, eth, pkt):
        answer_arp(dp, in_port, pkt)
        dst = host_number(eth.dst)
        if dst is None:
            return False
        parser, ofp = dp.ofproto_parser, dp.ofproto
        match = parser.OFPMatch(eth_dst=eth.dst)
        actions = [parser.OFPActionOutput(line_route(dp.id, dst))]
        if dst in self.routed:
            if in_port != 1:
                # "Its route is everywhere: a packet for it here is looping."
                self.add_flow(dp, 20, match, [])
            else:
                dp.send_msg(parser.OFPPacketOut(datapath=dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=in_port,
                                                actions=actions, data=pkt.data))
            return False
        self.routed.add(dst)
        for sw in sorted(self.datapaths, key=lambda s: s == dp.id):
            other = self.datapaths[sw]
            self.add_flow(other, 10, other.ofproto_parser.OFPMatch(eth_dst=eth.dst),
                          [other.ofproto_parser.OFPActionOutput(line_route(sw, dst))])
        # No barrier: the packet may reach a switch before its route does.
        dp.send_msg(parser.OFPPacketOut(datapath=dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=in_port,
                                        actions=actions, data=pkt.data))
        return False
