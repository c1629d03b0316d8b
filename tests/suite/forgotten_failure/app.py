"""Bug: a controller restart forgets a failed link (a blackhole). Ryu, OpenFlow 1.0.

A proactive router for the four-switch ring s1-s2-s3-s4-s1, one host per
switch: routes of priority 10 on the destination MAC, the shortest way round
(clockwise on ties), ARP answered by the controller. It follows port status:
when a link fails it reroutes every switch whose route changes the other way
round the ring, and when the link comes back it routes the short way again.
What it knows of failed links lives only in its memory. A restarted
controller starts from "every link is up" and, as each switch connects,
installs the routes of the intact ring, ignoring the port states the
switches' FEATURES_REPLY carries: traffic is sent into the link that is
still down.

Its minimal causal sequence: the failure of s1-s2, then the controller's
crash and its restart (3 inputs). The noise cannot do it: pings, crashes and
restarts while every link is up, and failures of s2-s3 or s3-s4 that recover
at once.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from common.ring import link_of, route  # noqa: E402
from ryu.base import app_manager  # noqa: E402
from ryu.controller import ofp_event  # noqa: E402
from ryu.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls  # noqa: E402
from ryu.lib.mac import haddr_to_bin  # noqa: E402
from ryu.lib.packet import arp, ethernet, ether_types, packet  # noqa: E402
from ryu.ofproto import ofproto_v1_0  # noqa: E402


def host_mac(i):
    return "00:00:00:00:00:%02x" % i


class ForgottenFailure(app_manager.RyuApp):
    OFP_VERSIONS = [ofproto_v1_0.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.datapaths = {}
        # BUG: the only record of failed links, lost with the process.
        self.down = set()

    def install(self, dp, dst, port):
        parser, ofp = dp.ofproto_parser, dp.ofproto
        # An ADD of the same match and priority replaces the entry's actions.
        dp.send_msg(parser.OFPFlowMod(datapath=dp, match=parser.OFPMatch(dl_dst=haddr_to_bin(host_mac(dst))),
                                      cookie=0, command=ofp.OFPFC_ADD, idle_timeout=0, hard_timeout=0,
                                      priority=10, actions=[parser.OFPActionOutput(port)]))

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_features(self, ev):
        dp = ev.msg.datapath
        self.datapaths[dp.id] = dp
        for h in range(1, 5):
            self.install(dp, h, route(dp.id, h, self.down))

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def on_port_status(self, ev):
        dp, desc = ev.msg.datapath, ev.msg.desc
        link = link_of(dp.id, desc.port_no)
        if link is None:
            return
        failed = bool(desc.state & dp.ofproto.OFPPS_LINK_DOWN)
        if failed == (link in self.down):
            return  # the other end's report of the same change
        before = set(self.down)
        if failed:
            self.down.add(link)
        else:
            self.down.discard(link)
        for sw, d in sorted(self.datapaths.items()):
            for h in range(1, 5):
                if route(sw, h, before) != route(sw, h, self.down):
                    self.install(d, h, route(sw, h, self.down))

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev):
        msg = ev.msg
        dp = msg.datapath
        pkt = packet.Packet(msg.data)
        a = pkt.get_protocol(arp.arp)
        if a is None or a.opcode != arp.ARP_REQUEST:
            return
        h = int(a.dst_ip.split(".")[-1])
        reply = packet.Packet()
        reply.add_protocol(ethernet.ethernet(ethertype=ether_types.ETH_TYPE_ARP, dst=a.src_mac, src=host_mac(h)))
        reply.add_protocol(arp.arp(opcode=arp.ARP_REPLY, src_mac=host_mac(h), src_ip="10.0.0.%d" % h,
                                   dst_mac=a.src_mac, dst_ip=a.src_ip))
        reply.serialize()
        parser, ofp = dp.ofproto_parser, dp.ofproto
        dp.send_msg(parser.OFPPacketOut(datapath=dp, buffer_id=0xffffffff, in_port=ofp.OFPP_NONE,
                                        actions=[parser.OFPActionOutput(msg.in_port)], data=reply.data))
