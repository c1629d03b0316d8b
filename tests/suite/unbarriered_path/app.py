"""Bug (a race): a path barriered one hop short.

On the first packet to a host, the app installs the route to that host on
every switch of the line s1-s2-...-s5 (the destination's own switch first,
the packet's own last), then sends a BARRIER_REQUEST to each switch the
packet crosses and sends the packet on only when all of them have answered
(a switch answers a barrier once it has applied everything sent before it).
The app tells a late route from a loop: a packet for a routed host that a
switch reports from an inter-switch port is sent on along the route while
that switch's route is unconfirmed, and taken for a forwarding loop once it
is confirmed, when the app pins a drop rule for that host there (priority
20, above the route). The bug: the barriers stop one hop short (the
destination's own switch "only delivers to the host's port"), yet the whole
path is counted as confirmed when they answer. The destination switch's
route left the controller first and usually arrives long before the
packet; nothing makes it. If it is late, the packet that overtook it gets
its destination blackholed at that switch for good.

A race on one message of each route: `sts explore` finds it from a clean
run (tests/suite/make_trace.py unbarriered_path writes one) by holding the
destination switch's route past the packet's arrival. Every other route is
either barriered before its packet leaves or unconfirmed (a packet meeting
it late is sent on): holding it only delays traffic.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from os_ken.controller import ofp_event  # noqa: E402
from os_ken.controller.handler import MAIN_DISPATCHER, set_ev_cls  # noqa: E402

from common.learning import LearningSwitch, answer_arp, host_number, line_route  # noqa: E402


class UnbarrieredPath(LearningSwitch):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.datapaths = {}
        self.routed = set()
        # Switches whose route to a host is known applied: host -> switches.
        self.confirmed = {}
        # Packets waiting for barriers: (switch, barrier xid) -> the
        # packet's entry, [outstanding barriers, switch, in_port, output
        # port, data, destination host, path].
        self.waiting = {}

    def on_switch(self, dp):
        self.datapaths[dp.id] = dp

    def packet_out(self, dp, in_port, out_port, data):
        parser, ofp = dp.ofproto_parser, dp.ofproto
        dp.send_msg(parser.OFPPacketOut(datapath=dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=in_port,
                                        actions=[parser.OFPActionOutput(out_port)], data=data))

    def on_packet(self, dp, in_port, eth, pkt):
        answer_arp(dp, in_port, pkt)
        dst = host_number(eth.dst)
        if dst is None:
            return False
        parser = dp.ofproto_parser
        if dst in self.routed:
            if in_port != 1 and dp.id in self.confirmed.get(dst, ()):
                # "Its route here is confirmed: a packet for it here is looping."
                self.add_flow(dp, 20, parser.OFPMatch(eth_dst=eth.dst), [])
            else:
                # A late route (or the host's own port): send it on.
                self.packet_out(dp, in_port, line_route(dp.id, dst), pkt.data)
            return False
        self.routed.add(dst)
        for sw in sorted(self.datapaths, key=lambda s: (s != dst, s == dp.id, s)):
            other = self.datapaths[sw]
            self.add_flow(other, 10, other.ofproto_parser.OFPMatch(eth_dst=eth.dst),
                          [other.ofproto_parser.OFPActionOutput(line_route(sw, dst))])
        # The switches the packet crosses, its own first, the destination's last.
        step = 1 if dst > dp.id else -1
        path = list(range(dp.id, dst + step, step))
        # BUG: one hop short ("the last hop only delivers to the host's
        # port"), yet confirm() counts the whole path as applied.
        hops = [sw for sw in path[:-1] if sw in self.datapaths]
        entry = [set(), dp, in_port, line_route(dp.id, dst), pkt.data, dst, path]
        for sw in hops:
            other = self.datapaths[sw]
            req = other.ofproto_parser.OFPBarrierRequest(other)
            other.set_xid(req)
            entry[0].add((sw, req.xid))
            self.waiting[(sw, req.xid)] = entry
            other.send_msg(req)
        if not hops:
            self.confirm(entry)
        return False

    def confirm(self, entry):
        """Every barrier of the packet answered: its path's routes counted
        as applied (the destination's own among them: the bug) and the
        packet sent on."""
        _, dp, in_port, out_port, data, dst, path = entry
        self.confirmed.setdefault(dst, set()).update(path)
        self.packet_out(dp, in_port, out_port, data)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _barrier_reply(self, ev):
        key = (ev.msg.datapath.id, ev.msg.xid)
        entry = self.waiting.pop(key, None)
        if entry is None:
            return
        entry[0].discard(key)
        if not entry[0]:
            self.confirm(entry)
