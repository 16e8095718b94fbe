"""Choosing paths to other routers for one delivery (docs/mesh.md, "Forwarding rules").

Owns: the decisions, as functions of the routes (topology.routes.Routes), the delivery's router
annotations and the inter-router data links:
- anycast `closest`: the lowest-cost router with consumers (round robin among equal costs);
  `balanced`: the lowest (path cost + this address's unsettled deliveries on that link);
- multicast: one copy per distinct next hop over the routers with consumers;
- loop prevention (reference §2.8): never back to the neighbour it came from nor to a router in
  its trace; a delivery from another router goes only to destinations for which its ingress
  router is a valid origin, and for multicast only when it came through the neighbour the
  ingress's canonical path uses (`Routes.upstream`), which makes copies exactly-once even on
  redundant meshes; local delivery of a multicast copy is checked the same way;
- remembering the choices (`Paths`, paths.py): by destination routers and annotation record,
  under the routes and data links they were made with, so a kind of delivery consults the
  routes once;
- the priority band: a choice names a neighbour's default data link; the delivery goes on the
  link of its band instead (`on_band`: its effective priority is the address's configured one,
  else its header's, else 4; docs/mesh.md, "Priorities"), unless that link is gone or not yet
  answered by the peer (then on the default link, as to a router with one data link).
It reads the mesh as a ports.MeshPaths (its routes, data links and remembered paths).
Must not touch: sending (sending.py, multicast.py), message bytes, the protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..amqp.endpoints import ACTIVE
from .delivery import Forward, Meta
from .links import OutLink
from .paths import PATHS_MAX, PRIORITY_DEFAULT, Candidate, Key, Paths, Remembered, band_of
from .streamlinks import instead, large, nothing_ahead

if TYPE_CHECKING:
    from .ports import MeshPaths

Choice = tuple[OutLink, int, bool]  # (data link, value, it can take a delivery now)


def usable(out: OutLink) -> bool:
    return (
        out.link.credit > 0 and out.streaming is None and not out.conn.output_blocked and not out.gone
        and not out.window_shut
    )  # fmt: skip


def usable_for(out: OutLink, fwd: Forward) -> bool:
    """`out` can take `fwd` now: itself, or for a large message a free streaming link of its
    neighbour (which _send takes instead: streamlinks.py) when no delivery waits for `out`,
    which it would overtake."""
    if usable(out):
        return True
    streams = out.streams
    return streams is not None and large(fwd) and nothing_ahead(out) and instead(streams) is not None


def priority(paths: Paths, fwd: Forward) -> int:
    """The delivery's effective priority: its address's configured priority, else its header's
    (messaging 3.2.1), else the default 4 (reference 2.5, as the anchors)."""
    entry = fwd.entry
    table = paths.table
    if table.priority_rules and entry.key[0] == "M":
        configured = table.priority_for(entry.address)
        if configured is not None:
            return configured
    view = fwd.view  # peek read the header (None: a first frame cut inside the properties)
    if view is not None and view.priority is not None:
        return view.priority
    return PRIORITY_DEFAULT


def on_band(paths: Paths, out: OutLink, fwd: Forward) -> OutLink:
    """The data link to `out`'s neighbour (`out`: its default one) for `fwd`'s priority band;
    `out` itself when the neighbour has one band, or the band's link is gone or the peer has
    not answered its attach (yet, or ever: a peer may refuse it)."""
    bands = out.bands  # (paths.bands' entry for `out`)
    if bands is None:
        return out
    link = bands[band_of(priority(paths, fwd), len(bands))]
    if link is out or link.gone or link.link.state.remote is not ACTIVE:
        return out
    return link


def _origin(meta: Meta | None) -> tuple[str | None, str | None, tuple[str, ...]]:
    """(ingress router, neighbour it came from, trace); the ingress is None when the delivery
    entered the mesh here (from a client, or from an edge router: then it came from that edge)."""
    if meta is None:
        return None, None, ()
    return meta.ingress, meta.came_from, meta.trace


def _gone(candidates: list[Candidate]) -> bool:
    for candidate in candidates:
        if candidate[2].gone:
            return True
    return False


def _paths(mesh: MeshPaths, paths: Paths | None = None) -> Paths:
    """The mesh's Paths (`paths` when the caller holds them), cleared if the routes changed."""
    if paths is None:
        paths = mesh.paths
    if paths.routes is not mesh.routes:
        paths.clear()
        paths.routes = mesh.routes
    return paths


def _candidates(mesh: MeshPaths, fwd: Forward) -> list[Candidate]:
    routes, links = mesh.routes, mesh.links
    ingress, came_from, trace = _origin(fwd.meta)
    candidates: list[Candidate] = []
    fallback: list[Candidate] = []
    for router in fwd.entry.remote:
        hop = routes.next_hops.get(router)
        if hop is None or hop == came_from or hop in trace:
            continue
        out = links.get(hop)
        if out is None or out.gone:  # the peer may end the data link's session: then no path
            continue
        cost = routes.costs[router]
        if ingress is not None and not routes.is_valid_origin(router, ingress):
            fallback.append((cost, router, out))
            continue
        candidates.append((cost, router, out))
    # As skupper-router: when no destination is valid for the ingress (routes are changing),
    # any router holding the address will do (trace and came-from still exclude loops).
    chosen = candidates or fallback
    chosen.sort()
    return chosen


def anycast(mesh: MeshPaths, fwd: Forward, balanced: bool, paths: Paths | None = None) -> Choice | None:
    """The best path to another router for `fwd`, or None when there is none. `paths`: the
    mesh's (the forwarder holds it: reading it from the mesh is a lookup by name)."""
    entry = fwd.entry
    if paths is None:
        paths = mesh.paths
    meta = fwd.meta
    record = meta.record if meta is not None else None
    remote = entry.remote
    # First the choice remembered on the annotation record (or, for a delivery entering the mesh
    # here, on the entry); it is the choice the maps hold for its key.
    memo = record.remembered if record is not None else entry.remembered
    if memo is None:
        memo = Remembered()
        if record is not None:
            record.remembered = memo
        else:
            entry.remembered = memo
    known = memo.known if memo.generation == paths.generation and memo.remote is remote else None
    # (usually one best path: checked without a call)
    if known is None or (known[1][0][2].gone if len(known[1]) == 1 else _gone(known[1])):
        known = _known(mesh, paths, fwd, (remote, record))
        memo.generation, memo.remote, memo.known = paths.generation, remote, known  # (after any clear)
    candidates, best = known
    if not candidates:
        return None
    if not balanced:
        cost, _, out = best[entry.rr % len(best)]
        entry.rr += 1
        if paths.bands:
            out = on_band(paths, out, fwd)
        return out, cost, usable_for(out, fwd)
    counts = entry.remote_out
    choice: Choice | None = None
    for cost, _, out in candidates:
        if out.gone:  # a data link went since the choice was made: make it again
            key: Key = (remote, record)
            if key in paths.anycast:
                del paths.anycast[key]
            memo.generation = -1
            return anycast(mesh, fwd, balanced, paths)
        if paths.bands:
            out = on_band(paths, out, fwd)
        count = entry.out_last_count if entry.out_last is out else counts.get(out)  # (usually the last link)
        value = cost + (count.n if count is not None else 0)
        ok = usable_for(out, fwd)
        if choice is None or (ok and not choice[2]) or (ok == choice[2] and value < choice[1]):
            choice = (out, value, ok)
    return choice


def _known(mesh: MeshPaths, paths: Paths, fwd: Forward, key: Key) -> tuple[list[Candidate], list[Candidate]]:
    """The anycast candidates for `key` and the lowest-cost ones among them, from the maps or
    made now (the maps cleared first if the routes changed)."""
    _paths(mesh, paths)
    known = paths.anycast.get(key)
    if known is None or (known[1][0][2].gone if len(known[1]) == 1 else _gone(known[1])):
        candidates = _candidates(mesh, fwd)
        best = [c for c in candidates if c[0] == candidates[0][0]] if candidates else []
        if len(paths.anycast) >= PATHS_MAX:
            paths.anycast.clear()
        known = paths.anycast[key] = (candidates, best)
    return known


def multicast(mesh: MeshPaths, fwd: Forward) -> list[OutLink]:
    """The data links to send a multicast copy on: one per distinct next hop."""
    paths = _paths(mesh)
    meta = fwd.meta
    key: Key = (fwd.entry.remote, meta.record if meta is not None else None)
    known = paths.multicast.get(key)
    if known is not None:
        for out in known:
            if out.gone:
                break
        else:
            return _banded(paths, known, fwd) if paths.bands else known
    routes, links = mesh.routes, mesh.links
    ingress, came_from, trace = _origin(meta)
    hops: set[str] = set()
    for router in fwd.entry.remote:
        hop = routes.next_hops.get(router)
        if hop is None or hop in hops or hop == came_from or hop in trace:
            continue
        if ingress is not None and routes.upstream(router, ingress) != came_from:
            continue  # another router forwards this origin's traffic to `router`
        hops.add(hop)
    chosen = [links[hop] for hop in sorted(hops) if hop in links and not links[hop].gone]
    if len(paths.multicast) >= PATHS_MAX:
        paths.multicast.clear()
    paths.multicast[key] = chosen
    return _banded(paths, chosen, fwd) if paths.bands else chosen


def _banded(paths: Paths, chosen: list[OutLink], fwd: Forward) -> list[OutLink]:
    """`chosen` (default data links) on `fwd`'s priority band (a new list)."""
    return [on_band(paths, out, fwd) for out in chosen]


def local_ok(mesh: MeshPaths, meta: Meta | None) -> bool:
    """May a multicast copy from another router be delivered here? Only if it came the way the
    ingress router's canonical path to this router goes (otherwise it is a duplicate)."""
    ingress, came_from, _ = _origin(meta)
    if ingress is None or mesh.edge:
        return True
    paths = _paths(mesh)
    key = (ingress, came_from)
    ok = paths.local.get(key)
    if ok is None:
        if len(paths.local) >= PATHS_MAX:
            paths.local.clear()
        ok = paths.local[key] = mesh.routes.upstream(mesh.me, ingress) == came_from
    return ok


def looped(mesh: MeshPaths, meta: Meta, paths: Paths | None = None) -> bool:
    """The trace shows a loop: this router is in it, or it is longer than radius + 1 (an edge
    router keeps no routes: it only takes what its uplink sends and never sends it back).
    `paths`: the mesh's, as for anycast."""
    if paths is None:
        paths = mesh.paths
    record = meta.record
    if record is not None and record.checked_under == paths.generation:  # known for this trace
        return record.looped
    _paths(mesh, paths)  # (new routes: the radius may have changed)
    routes = mesh.routes
    result = not mesh.edge and (mesh.me in meta.trace or len(meta.trace) > routes.radius + 1)
    if record is not None:
        record.checked_under, record.looped = paths.generation, result
    return result
