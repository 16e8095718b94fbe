"""Fallback destinations: where deliveries to an address go while it has no consumer anywhere in
the mesh (the anchors' `enableFallback`, Qpid Dispatch DISPATCH-1337).

An address rule with `enable_fallback: true` marks the entries of its addresses
(AddressEntry.fallback_enabled, set when an entry is made, like its distribution). The fallback
destinations of address `x` are the consumers of the mobile address `_$fallback/x`
(router.core.table: FALLBACK): out auto-links with `fallback: true`, and receivers that attach
with the source capability `qd.fallback`. The mesh advertises that address and edge routers
report it like any other, so fallback destinations on other routers and edges are reached with
no change to what routers tell each other.

Owns: what becomes of a delivery that would be released for want of a destination, in the two
places that decide so (its first frame, forwarding.py; deliveries waiting at an address that
lost its last destination, waiting.reroute): diverted to the fallback destinations when the
address has some, re-addressed (its x-opt-qd.to becomes the fallback address, so that the next
router routes it there too; consumers get the message without router annotations, as always);
a producer's credit while its address has no destination but a fallback one (credit.py asks);
and the producers and waiting deliveries of an address told when its fallback destinations come
or go (the mesh and edges call fallback_changed). A producer that takes what a fallback holds
(InLink.from_fallback: an in auto-link with `fallback: true`, or a client's sender with the
target capability qd.fallback) gets credit only while the address has a regular destination,
and its deliveries never go to a fallback: the queue drains to consumers when they return,
never into itself. Nothing here runs while deliveries find
destinations, nor at all for addresses no rule gives fallback destinations.
A layer of the forwarder (see forwarding.py): multicast.py < fallback.py < waiting.py.
Must not touch: choosing among consumers (sending.py), reading frames (forwarding.py), the
queues of waiting deliveries (waiting.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import annotate
from .addressentry import AddressEntry
from .delivery import Forward
from .links import InLink
from .multicast import Multicast
from .table import FALLBACK, AddressTable
from .ttl import reduce_ttl

if TYPE_CHECKING:
    from .bounds import Bounds
    from .mesh import Mesh
    from .touched import Touched


class Fallback(Multicast):
    """See the module docstring."""

    def __init__(self, table: AddressTable, bounds: Bounds, mesh: Mesh, touched: Touched, router_id: str) -> None:
        super().__init__(table, bounds, mesh, touched, router_id)
        self.redirected_to_fallback = 0  # deliveries diverted (the router's deliveriesRedirectedToFallback)

    def reroute(self, entry: AddressEntry) -> None:
        """Route again what waits at `entry` (waiting.py)."""
        raise NotImplementedError

    # --- where a delivery with no destination goes -----------------------------------------------

    def _fallback_key(self, entry: AddressEntry) -> str:
        return "M" + FALLBACK + entry.key[1:]

    def _fallback_reachable(self, entry: AddressEntry) -> bool:
        """`entry` (fallback enabled) has a fallback destination now, here or on another router
        (on an edge router: one the uplink says the mesh has, maybe with no entry here)."""
        key = self._fallback_key(entry)
        found = self.table.entries.get(key)
        if found is not None:
            return found.has_destination
        return len(self.table.remote_for(key)) != 0

    def _fallback_credit(self, inl: InLink, entry: AddressEntry) -> bool:
        """May producer `inl` have credit while its address `entry` (fallback enabled) has no
        destination? Only for a fallback destination, and never to feed a fallback's own
        messages back to one."""
        return not inl.from_fallback and self._fallback_reachable(entry)

    def _divert(self, fwd: Forward, readdressable: bool) -> bool:
        """`fwd`'s address has no destination: if it has a fallback destination, `fwd` goes there
        (its entry becomes the fallback's; the caller routes it, and _readdress makes it travel
        as such). False: it has nowhere to go. `readdressable`: its first frame was read as far
        as its annotations (otherwise it could not carry the fallback address to another router)."""
        entry = fwd.entry
        inl = fwd.in_link
        # Without its producer it cannot be told from a fallback's own message (and no one
        # would hear its outcome): it is released as before.
        if not entry.fallback_enabled or inl is None or inl.from_fallback or not readdressable:
            return False
        if not self._fallback_reachable(entry):
            return False
        target = self.table.get_or_create(FALLBACK + entry.key[1:])
        if target is None or not target.has_destination:
            return False
        entry.redirected += 1
        self.redirected_to_fallback += 1
        fwd.entry = target
        return True

    def _readdress(self, fwd: Forward) -> None:
        """`fwd`, diverted, is routed by the fallback address wherever it goes: its x-opt-qd.to
        names it. A delivery from another router enters the mesh again here, as a delivery to
        that address: its ingress, trace and the neighbour it came from no longer bar a path
        (the fallback may be back where it came from), which cannot loop, as a fallback address
        has no fallback (one diversion per delivery at most); its record of the annotations no
        longer describes it, so its section for the next router is written anew."""
        to = fwd.entry.key[1:]
        meta = fwd.meta
        if meta is None:
            view = fwd.view
            assert view is not None  # (_divert's `readdressable`)
            fwd.meta = annotate.for_client_delivery(view, to, True)
        else:
            meta.to, meta.explicit_to, meta.record = to, True, None
            meta.ingress, meta.trace, meta.came_from = None, (), None

    def _reroute_to_fallback(self, fwd: Forward) -> bool:
        """A waiting delivery whose address lost its last destination: to the fallback
        destinations if there are any (waiting.reroute); False: released by the caller."""
        if not self._divert(fwd, fwd.view is not None or fwd.meta is not None):
            return False
        fwd.entry.deliveries_ingress += 1
        self._readdress(fwd)
        reduce_ttl(fwd, self.now)  # it waited (ttl.py)
        self._route(fwd)
        return True

    # --- fallback destinations coming and going --------------------------------------------------

    def fallback_changed(self, key: str) -> None:
        """The fallback destinations of table key `key` ("M_$fallback/x") may have come or gone
        (here, on other routers or, on an edge router, in the mesh): the producers of `x` get
        credit or lose it, and what waits at `x` with no destination left goes there."""
        if not key.startswith(FALLBACK, 1):
            return
        base = self.table.entries.get("M" + key[1 + len(FALLBACK) :])
        if base is None or not base.fallback_enabled:
            return
        for producer in base.producers:
            self.credit_dirty(producer)
        if base.pending and not base.has_destination:
            self.reroute(base)
