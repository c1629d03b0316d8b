"""Bug: flow-table overflow where the error messages are ignored.

A two-table learner: table 0 sends IPv4 for a learned destination on to
table 1 (goto), table 1 outputs it; ARP always comes to the controller, which
learns hosts from it. Table 1 also holds two housekeeping drops. The
switch's tables hold four entries each, so table 1 fills first: for the
third host learned, the table-0 entry fits but the table-1 entry fails with
TABLE_FULL, an error the app never reads. That host's traffic then matches
in table 0, misses in table 1, and is dropped.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from common.learning import LearningSwitch  # noqa: E402


class IgnoredTableFull(LearningSwitch):
    def flow(self, dp, table, priority, match, actions=None, goto=None):
        parser, ofp = dp.ofproto_parser, dp.ofproto
        inst = []
        if actions is not None:
            inst.append(parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions))
        if goto is not None:
            inst.append(parser.OFPInstructionGotoTable(goto))
        dp.send_msg(parser.OFPFlowMod(datapath=dp, table_id=table, priority=priority, match=match, instructions=inst))

    def on_switch(self, dp):
        parser = dp.ofproto_parser
        for eth_type in (0x88CC, 0x86DD):  # LLDP, IPv6: dropped
            self.flow(dp, 1, 100, parser.OFPMatch(eth_type=eth_type), actions=[])

    def on_packet(self, dp, in_port, eth, pkt):
        parser, ofp = dp.ofproto_parser, dp.ofproto
        known = self.table(dp)
        if eth.src not in known:
            known[eth.src] = in_port
            # Neither FLOW_MOD's error, if any, is ever looked at.
            self.flow(dp, 0, 10, parser.OFPMatch(eth_type=0x0800, eth_dst=eth.src), goto=1)
            self.flow(dp, 1, 10, parser.OFPMatch(eth_dst=eth.src), actions=[parser.OFPActionOutput(in_port)])
        out = known.get(eth.dst, ofp.OFPP_FLOOD)
        actions = [parser.OFPActionOutput(out)]
        dp.send_msg(parser.OFPPacketOut(datapath=dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=in_port, actions=actions, data=pkt.data))
        return False
