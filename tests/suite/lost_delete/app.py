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

# Ring wiring as sts numbers it: port 1 is the host; (1,2) (2,3) (3,4) (4,1).
CLOCKWISE = {1: 2, 2: 3, 3: 3, 4: 3}  # the port towards the next switch
COUNTER = {1: 3, 2: 2, 3: 2, 4: 2}  # the port towards the previous one
NEXT = {1: 2, 2: 3, 3: 4, 4: 1}


def link_of(sw, port):
    """The ring link (a, b) with b = a's clockwise neighbour that `port` of
    switch `sw` belongs to, or None for the host port."""
    if port == CLOCKWISE[sw]:
        return (sw, NEXT[sw])
    if port == COUNTER[sw]:
        return (a_prev(sw), sw)
    return None


def a_prev(sw):
    return [a for a, b in NEXT.items() if b == sw][0]


def clockwise_links(sw, hops):
    out, at = [], sw
    for _ in range(hops):
        out.append((at, NEXT[at]))
        at = NEXT[at]
    return out


def counter_links(sw, hops):
    out, at = [], sw
    for _ in range(hops):
        out.append((a_prev(at), at))
        at = a_prev(at)
    return out


def route(sw, dst, down):
    """The port of `sw` towards host h<dst> with the links in `down` failed:
    the shortest way round (clockwise on ties), else the other way."""
    if sw == dst:
        return 1
    ahead = (dst - sw) % 4
    cw_ok = not set(clockwise_links(sw, ahead)) & down
    ccw_ok = not set(counter_links(sw, 4 - ahead)) & down
    if ahead <= 2:
        return CLOCKWISE[sw] if cw_ok or not ccw_ok else COUNTER[sw]
    return COUNTER[sw] if ccw_ok or not cw_ok else CLOCKWISE[sw]


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
