"""Bug: a race between the handshake and the first packet-in.

The app builds a switch's MAC table half a second after the switch connects
(it "waits for the port list"). A packet-in in that window finds no table:
KeyError in the handler. At start-up the network is quiet for longer than
that, so only a switch that reconnects and sees traffic at once hits it.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from os_ken.lib import hub  # noqa: E402

from common.learning import LearningSwitch  # noqa: E402


class HandshakeRace(LearningSwitch):
    def on_switch(self, dp):
        self.mac_to_port.pop(dp.id, None)
        hub.spawn_after(0.5, self.mac_to_port.setdefault, dp.id, {})

    def table(self, dp):
        return self.mac_to_port[dp.id]  # KeyError inside the window
