"""Bug: overlapping flow entries from two modules.

Module A is the learning switch. Module B, a "ping monitor", mirrors pings to
h2 towards h2's port on s2 when it first sees one, but its match is far too
broad (all IPv4, priority 10): every IPv4 frame crossing s2 goes to h2.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from os_ken.lib.packet import ipv4  # noqa: E402

from common.learning import LearningSwitch, host_ip  # noqa: E402


class OverlappingModules(LearningSwitch):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.monitoring = False

    def on_packet(self, dp, in_port, eth, pkt):
        ip = pkt.get_protocol(ipv4.ipv4)
        if dp.id == 2 and ip is not None and ip.dst == host_ip(2) and not self.monitoring:
            self.monitoring = True
            parser = dp.ofproto_parser
            # Meant: ipv4_dst=h2. Written: every IPv4 frame.
            self.add_flow(dp, 10, parser.OFPMatch(eth_type=0x0800), [parser.OFPActionOutput(1)])
        return True
