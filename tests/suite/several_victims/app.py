"""Bug: a drop-everything rule on a switch's third connection (several victims).

A learning switch that counts each switch's connections and, on the third,
installs a match-all rule of priority 100 with no actions: "safe mode" after
a flapping switch, meant to be lifted by an operator who never comes. Every
host whose traffic crosses that switch is blackholed, so which host a run
names as the victim depends on what the hosts sent before; the bug does not.
Its minimal causal sequence is the switch's two reconnections (4 inputs),
and no traffic.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from common.learning import LearningSwitch  # noqa: E402


class SeveralVictims(LearningSwitch):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.connections = {}

    def on_switch(self, dp):
        n = self.connections.get(dp.id, 0) + 1
        self.connections[dp.id] = n
        if n == 3:
            parser = dp.ofproto_parser
            self.add_flow(dp, 100, parser.OFPMatch(), [])
