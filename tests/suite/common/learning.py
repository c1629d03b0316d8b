"""A plain OpenFlow 1.3 learning switch that the suite's buggy apps extend.

Each bug app subclasses LearningSwitch and overrides a hook; the bug lives in
the hook, the rest is the usual MAC learning (flows with no timeouts).
"""

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib.packet import arp, ethernet, ether_types, packet
from os_ken.ofproto import ofproto_v1_3


def host_mac(i):
    """The MAC sts gives host h<i>."""
    return "00:00:00:00:00:%02x" % i


def host_ip(i):
    """The IPv4 address sts gives host h<i>."""
    return "10.0.0.%d" % i


# Port numbers as sts wires a line s1-s2-...: port 1 is the host, then the
# links (1,2) (2,3) ... in order, each taking the next free port on both
# ends: towards s(n-1) is port 2, towards s(n+1) port 3 (port 2 on s1).
def towards(sw, target):
    """The port of switch s<sw> of a line towards switch s<target>."""
    return 2 if target < sw or sw == 1 else 3


def line_route(sw, dst):
    """The port of switch s<sw> of a line towards host h<dst> (one host per
    switch, where it started)."""
    return 1 if sw == dst else towards(sw, dst)


def host_number(mac):
    """N for the address sts gives host h<N>, else None."""
    octets = mac.split(":")
    if octets[:5] != ["00"] * 5 or octets[5] == "00":
        return None
    return int(octets[5], 16)


def answer_arp(dp, in_port, pkt):
    """Answers an ARP request for h<N> from the controller (proxy ARP), as
    proactive routers that never flood do."""
    a = pkt.get_protocol(arp.arp)
    if a is None or a.opcode != arp.ARP_REQUEST:
        return
    h = int(a.dst_ip.split(".")[-1])
    reply = packet.Packet()
    reply.add_protocol(ethernet.ethernet(ethertype=ether_types.ETH_TYPE_ARP, dst=a.src_mac, src=host_mac(h)))
    reply.add_protocol(arp.arp(opcode=arp.ARP_REPLY, src_mac=host_mac(h), src_ip=host_ip(h),
                               dst_mac=a.src_mac, dst_ip=a.src_ip))
    reply.serialize()
    parser, ofp = dp.ofproto_parser, dp.ofproto
    dp.send_msg(parser.OFPPacketOut(datapath=dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                                    actions=[parser.OFPActionOutput(in_port)], data=reply.data))


class LearningSwitch(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.mac_to_port = {}

    def add_flow(self, dp, priority, match, actions):
        parser, ofp = dp.ofproto_parser, dp.ofproto
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
        dp.send_msg(parser.OFPFlowMod(datapath=dp, priority=priority, match=match, instructions=inst))

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _features(self, ev):
        dp = ev.msg.datapath
        parser, ofp = dp.ofproto_parser, dp.ofproto
        self.add_flow(dp, 0, parser.OFPMatch(), [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)])
        self.on_switch(dp)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _port_status(self, ev):
        msg = ev.msg
        self.on_port_status(msg.datapath, msg.reason, msg.desc)

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _packet_in(self, ev):
        msg = ev.msg
        dp = msg.datapath
        parser, ofp = dp.ofproto_parser, dp.ofproto
        in_port = msg.match["in_port"]
        pkt = packet.Packet(msg.data)
        eth = pkt.get_protocols(ethernet.ethernet)[0]
        if eth.ethertype == ether_types.ETH_TYPE_LLDP:
            return
        if self.on_packet(dp, in_port, eth, pkt) is False:
            return
        table = self.table(dp)
        table[eth.src] = in_port
        out_port = table.get(eth.dst, ofp.OFPP_FLOOD)
        actions = [parser.OFPActionOutput(out_port)]
        if out_port != ofp.OFPP_FLOOD:
            self.add_flow(dp, 1, parser.OFPMatch(in_port=in_port, eth_dst=eth.dst, eth_src=eth.src), actions)
        dp.send_msg(parser.OFPPacketOut(datapath=dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=in_port, actions=actions, data=msg.data))

    # Hooks for the bug apps.

    def table(self, dp):
        return self.mac_to_port.setdefault(dp.id, {})

    def on_switch(self, dp):
        pass

    def on_port_status(self, dp, reason, desc):
        pass

    def on_packet(self, dp, in_port, eth, pkt):
        return True


class ProactiveLineRouter(LearningSwitch):
    """A proactive router for the line s1-s2-s3 (one host per switch): at each
    connection it installs a route of priority 10 to every host and answers
    ARP itself; it never learns or floods. Bug apps override
    `on_connection(dp, n)`, called after the routes with the switch's
    connection count (2 on its first reconnection)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.connections = {}
        self.datapaths = {}

    def on_switch(self, dp):
        parser = dp.ofproto_parser
        self.datapaths[dp.id] = dp
        n = self.connections.get(dp.id, 0) + 1
        self.connections[dp.id] = n
        for h in range(1, 4):
            self.add_flow(dp, 10, parser.OFPMatch(eth_dst=host_mac(h)), [parser.OFPActionOutput(line_route(dp.id, h))])
        self.on_connection(dp, n)

    def on_connection(self, dp, n):
        pass

    def on_packet(self, dp, in_port, eth, pkt):
        answer_arp(dp, in_port, pkt)
        return False  # never learn, never flood
