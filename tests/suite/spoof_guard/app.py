"""Bug (a race): a moved host taken for a spoofer.

A routing app for the line s1-s2-...-s5 with address guarding, as campus
deployments run it. It learns where each host is from the first frame the
host sends on a host port (never from the links between switches), installs
a route to it on every switch (priority 10 on eth_dst), answers ARP itself
and floods only to find a host it does not know. It watches the ports: when
a switch reports a port down (PORT_STATUS), the hosts on it are forgotten
and their routes deleted, so that a host that moved is learned again where
it speaks next. An address heard on another host port while its host is
still known elsewhere is taken for a spoofer: the app pins a drop rule for
that address on that port (priority 30 on in_port and eth_src) and keeps it.

The bug: "the old port's PORT_STATUS comes before the host's first frame
from its new place". It usually does: the old switch reports the unplugged
port at once, and a host takes a while to speak again after a move. Nothing
makes it: two switches' connections are not ordered. If the old switch's
report is late, the moved host is blocked at its new port for good (its
frames never reach the controller again).

A race between a PORT_STATUS and a PACKET_IN of two switches: `sts explore`
finds it from a clean run (tests/suite/make_trace.py spoof_guard writes one)
by holding the old switch's connection past the host's first PACKET_IN at
the new one. The run's other messages are pings' and their copies, which
only delay traffic when held.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from os_ken.lib.packet import arp  # noqa: E402

from common.learning import LearningSwitch, answer_arp, host_number, towards  # noqa: E402

SIZE = 5


def trunk(sw, port):
    """Whether port `port` of s<sw> links two switches of the line."""
    return port == 2 or (port == 3 and 1 < sw < SIZE)


class SpoofGuard(LearningSwitch):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.datapaths = {}
        # Host address -> (switch, port) it was heard on.
        self.location = {}

    def on_switch(self, dp):
        self.datapaths[dp.id] = dp

    def on_port_status(self, dp, reason, desc):
        if not desc.state & dp.ofproto.OFPPS_LINK_DOWN:
            return
        gone = sorted(mac for mac, at in self.location.items() if at == (dp.id, desc.port_no))
        for mac in gone:
            del self.location[mac]
            for other_id in sorted(self.datapaths):
                other = self.datapaths[other_id]
                parser, ofp = other.ofproto_parser, other.ofproto
                other.send_msg(parser.OFPFlowMod(datapath=other, command=ofp.OFPFC_DELETE, out_port=ofp.OFPP_ANY,
                                                 out_group=ofp.OFPG_ANY, match=parser.OFPMatch(eth_dst=mac)))

    def route(self, mac, sw, port):
        for other_id in sorted(self.datapaths):
            other = self.datapaths[other_id]
            out = port if other_id == sw else towards(other_id, sw)
            self.add_flow(other, 10, other.ofproto_parser.OFPMatch(eth_dst=mac),
                          [other.ofproto_parser.OFPActionOutput(out)])

    def send(self, dp, in_port, out_port, data):
        parser, ofp = dp.ofproto_parser, dp.ofproto
        dp.send_msg(parser.OFPPacketOut(datapath=dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=in_port,
                                        actions=[parser.OFPActionOutput(out_port)], data=data))

    def on_packet(self, dp, in_port, eth, pkt):
        here = (dp.id, in_port)
        if not trunk(dp.id, in_port) and host_number(eth.src) is not None:
            known = self.location.get(eth.src)
            if known is None:
                self.location[eth.src] = here
                self.route(eth.src, *here)
            elif known != here:
                # BUG: its old port not reported down *yet* is taken as
                # still in use: a move taken for a spoof.
                self.logger.info("spoof: %s on s%d port %d, known at s%d port %d", eth.src, dp.id, in_port, *known)
                parser = dp.ofproto_parser
                self.add_flow(dp, 30, parser.OFPMatch(in_port=in_port, eth_src=eth.src), [])
                return False
        if pkt.get_protocol(arp.arp) is not None:
            answer_arp(dp, in_port, pkt)
            return False
        at = self.location.get(eth.dst)
        if at is None:
            out = dp.ofproto.OFPP_FLOOD
        else:
            out = at[1] if at[0] == dp.id else towards(dp.id, at[0])
        self.send(dp, in_port, out, pkt.data)
        return False
