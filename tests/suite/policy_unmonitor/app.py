"""Bug: ending a monitoring policy wipes every flow (a blackhole).

A learning switch with a REST API for monitoring hosts (`PUT /monitor/hN`
sends copies of hN's frames to the controller, `DELETE /monitor/hN` stops).
Stopping deletes hN's monitoring rules with a FLOW_MOD whose match was meant
to be `eth_src=hN` but is empty, in every table: the table-miss entries go
too, so nothing new reaches the controller and every pair not yet learned,
then every pair at all (the learned flows went with it), is dropped. Needs
two policy changes, in order: monitor a host, then stop monitoring it; the
stop makes sense only after the start (the config's `after`).
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from os_ken.app.wsgi import ControllerBase, WSGIApplication, route  # noqa: E402
from webob import Response  # noqa: E402

from common.learning import LearningSwitch, host_mac  # noqa: E402


class MonitorApi(ControllerBase):
    def __init__(self, req, link, data, **config):
        super().__init__(req, link, data, **config)
        self.app = data["app"]

    @route("monitor", "/monitor/{host}", methods=["PUT"])
    def start(self, req, host, **_kwargs):
        return self.app.start_monitoring(host)

    @route("monitor", "/monitor/{host}", methods=["DELETE"])
    def stop(self, req, host, **_kwargs):
        return self.app.stop_monitoring(host)


def answer(status, **body):
    return Response(status=status, content_type="application/json", body=json.dumps(body).encode())


class PolicyUnmonitor(LearningSwitch):
    _CONTEXTS = {"wsgi": WSGIApplication}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        kwargs["wsgi"].register(MonitorApi, {"app": self})
        self.switches = {}
        self.monitored = set()

    def on_switch(self, dp):
        self.switches[dp.id] = dp

    def start_monitoring(self, host):
        if not host.startswith("h") or not host[1:].isdigit():
            return answer(400, error="hosts are h1, h2 ...")
        mac = host_mac(int(host[1:]))
        for dp in self.switches.values():
            parser, ofp = dp.ofproto_parser, dp.ofproto
            copy = [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)]
            self.add_flow(dp, 20, parser.OFPMatch(eth_src=mac), copy)
        self.monitored.add(host)
        return answer(200, monitored=sorted(self.monitored))

    def stop_monitoring(self, host):
        if host not in self.monitored:
            return answer(404, error="%s is not monitored" % host)
        for dp in self.switches.values():
            parser, ofp = dp.ofproto_parser, dp.ofproto
            # BUG: meant OFPMatch(eth_src=host_mac(...)); this deletes every
            # entry of every table, the table-miss entry included.
            dp.send_msg(parser.OFPFlowMod(datapath=dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL,
                                          out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY, match=parser.OFPMatch()))
        self.monitored.discard(host)
        return answer(200, monitored=sorted(self.monitored))
