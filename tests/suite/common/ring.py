"""The four-switch ring s1-s2-s3-s4-s1 as sts wires it (one host per switch,
on port 1; links (1,2) (2,3) (3,4) (4,1), each taking the next free port on
both ends), and routes round it. Plain Python: the suite's ring routers
(os-ken or Ryu) share it.
"""

CLOCKWISE = {1: 2, 2: 3, 3: 3, 4: 3}  # the port towards the next switch
COUNTER = {1: 3, 2: 2, 3: 2, 4: 2}  # the port towards the previous one
NEXT = {1: 2, 2: 3, 3: 4, 4: 1}
PREV = {b: a for a, b in NEXT.items()}


def link_of(sw, port):
    """The ring link (a, NEXT[a]) that `port` of switch `sw` belongs to, or
    None for the host port."""
    if port == CLOCKWISE[sw]:
        return (sw, NEXT[sw])
    if port == COUNTER[sw]:
        return (PREV[sw], sw)
    return None


def links_from(sw, hops, step):
    """The links `hops` steps from `sw` cross, going to `step[sw]` each time
    (NEXT: clockwise, PREV: the other way)."""
    out, at = [], sw
    for _ in range(hops):
        out.append((at, NEXT[at]) if step is NEXT else (PREV[at], at))
        at = step[at]
    return out


def route(sw, dst, down):
    """The port of `sw` towards host h<dst> with the links in `down` failed:
    the shortest way round (clockwise on ties), else the other way."""
    if sw == dst:
        return 1
    ahead = (dst - sw) % 4
    cw_ok = not set(links_from(sw, ahead, NEXT)) & down
    ccw_ok = not set(links_from(sw, 4 - ahead, PREV)) & down
    if ahead <= 2:
        return CLOCKWISE[sw] if cw_ok or not ccw_ok else COUNTER[sw]
    return COUNTER[sw] if ccw_ok or not cw_ok else CLOCKWISE[sw]
