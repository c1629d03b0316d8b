"""Bug: a firewall that blocks everything until it is configured (it never is).

A learning switch with a default-deny policy: at connection it installs, above
the learning entries, a rule that drops every IPv4 frame; the "allow" rules
were meant to come from a REST call nobody makes. ARP still works, so hosts
resolve each other, but no ping ever gets through: the violation is present
before any input, and no input causes it.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from os_ken.lib.packet import ether_types  # noqa: E402

from common.learning import LearningSwitch  # noqa: E402


class BlockedFromStart(LearningSwitch):
    def on_switch(self, dp):
        parser = dp.ofproto_parser
        # Default deny, never relaxed: an empty action list drops.
        self.add_flow(dp, 100, parser.OFPMatch(eth_type=ether_types.ETH_TYPE_IP), [])
