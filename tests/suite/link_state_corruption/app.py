"""Bug: state corrupted on a link-down that crashes later, on the port-up.

On a port going down the app drops the port's counter; on the port coming back
it increments that counter, which no longer exists: KeyError in the handler.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from common.learning import LearningSwitch  # noqa: E402


class LinkStateCorruption(LearningSwitch):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.flaps = {}

    def on_port_status(self, dp, reason, desc):
        key = (dp.id, desc.port_no)
        link_down = desc.state & dp.ofproto.OFPPS_LINK_DOWN
        if link_down:
            self.flaps.pop(key, None)
        else:
            self.flaps[key] += 1  # KeyError: dropped when the link went down
