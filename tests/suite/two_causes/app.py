"""One bug, two causes: a host quarantined by either of two policy paths.

A proactive router for the line s1-s2-s3 (one host per switch, routes of
priority 10, ARP answered by the controller) with a REST API of per-host
policies (`PUT /policy/NAME/hN`, and `PUT /guest-vlan` for the site). Its
policy compiler has one bug with two ways in: both end in a rule of priority
30 on s1 that matches everything for h1 and does nothing with it, so every
frame to h1 is dropped at its own switch:

- **isolation on the guest VLAN** (2 policy changes, any order): isolating
  h1 while the guest VLAN is on compiles the isolation against the guest
  VLAN's match, which is empty in this version: a drop of all h1's traffic
  instead of its guest traffic.
- **the per-host budget** (3 policy changes, any order): a host with three
  monitoring policies (audit, rate limit, mirror) overflows the compiler's
  rule budget for it, and the fallback is the same drop.

Other hosts' policies are harmless (never three on one host). A trace that
holds the budget path in its first half and the isolation path split across
the halves makes delta debugging stop at the longer path: its result is
1-minimal but not the smallest.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from os_ken.app.wsgi import ControllerBase, WSGIApplication, route  # noqa: E402
from webob import Response  # noqa: E402

from common.learning import ProactiveLineRouter, host_mac  # noqa: E402

MONITORS = ("audit", "rate-limit", "mirror", "isolate")


def answer(status, **body):
    return Response(status=status, content_type="application/json", body=json.dumps(body).encode())


class PolicyApi(ControllerBase):
    def __init__(self, req, link, data, **config):
        super().__init__(req, link, data, **config)
        self.app = data["app"]

    @route("policy", "/policy/{name}/{host}", methods=["PUT"])
    def host_policy(self, req, name, host, **_kwargs):
        return self.app.add_policy(name, host)

    @route("policy", "/guest-vlan", methods=["PUT"])
    def guest_vlan(self, req, **_kwargs):
        return self.app.set_guest_vlan()


class TwoCauses(ProactiveLineRouter):
    _CONTEXTS = {"wsgi": WSGIApplication}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        kwargs["wsgi"].register(PolicyApi, {"app": self})
        self.policies = {}  # host number -> set of policy names
        self.guest_vlan = False

    def add_policy(self, name, host):
        if name not in MONITORS or not host.startswith("h") or not host[1:].isdigit():
            return answer(400, error="policies: %s; hosts h1, h2 ..." % ", ".join(MONITORS))
        self.policies.setdefault(int(host[1:]), set()).add(name)
        self.compile()
        return answer(200, policies={("h%d" % h): sorted(p) for h, p in self.policies.items()})

    def set_guest_vlan(self):
        self.guest_vlan = True
        self.compile()
        return answer(200, guest_vlan=True)

    def compile(self):
        for h, names in self.policies.items():
            isolated_on_guest = "isolate" in names and self.guest_vlan
            over_budget = len(names & {"audit", "rate-limit", "mirror"}) == 3
            dp = self.datapaths.get(h)
            if dp is not None and (isolated_on_guest or over_budget):
                # BUG: the guest VLAN's match (and the budget's fallback) is
                # empty here: all of hN's traffic, dropped at its switch.
                parser = dp.ofproto_parser
                self.add_flow(dp, 30, parser.OFPMatch(eth_dst=host_mac(h)), [])
