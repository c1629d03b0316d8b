"""Bug: a crash on a rarely used path that needs a particular pair of inputs.

Once a port has been *added* to some switch (a host plugged in somewhere new),
the app starts tracking h3 in a side table it never initialised for that
case; the next packet from h3 kills the controller process.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from common.learning import LearningSwitch, host_mac  # noqa: E402


class RarePairCrash(LearningSwitch):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.moved = False

    def on_port_status(self, dp, reason, desc):
        if reason == dp.ofproto.OFPPR_ADD:
            self.moved = True

    def on_packet(self, dp, in_port, eth, pkt):
        if self.moved and eth.src == host_mac(3):
            self.logger.error("rare path: h3 seen after a port was added; exiting")
            os._exit(1)
        return True
