"""The path choices the mesh remembers (`Paths`), made by remote.py, and the priority bands
of the data links to a neighbour (`band_of`: docs/mesh.md, "Priorities").

Owns: the cache and its key types; the mapping of message priorities onto bands. Must not
touch: how choices are made (remote.py).
"""

from __future__ import annotations

from typing import Final

from .links import OutLink
from .table import AddressTable

Candidate = tuple[int, str, OutLink]  # (path cost, destination router, data link to its next hop)
# (destination routers, where the delivery comes from): the record of its router annotations
# (annotparse.Record: one per distinct section and link, so it fixes ingress, trace and the
# neighbour), or None for a delivery that entered the mesh here.
Key = tuple[frozenset[str], object]
PATHS_MAX: Final = 1024  # choices remembered per kind (then it starts afresh)
PRIORITY_DEFAULT: Final = 4  # a message without a header priority (messaging 3.2.1)
PRIORITY_TOP: Final = 9  # the anchors' ten levels: a header's 10-255 count as 9


class Remembered:
    """An anycast choice remembered where the deliveries that share it are at hand (remote.py):
    on an annotation record, or on the address entry for deliveries entering the mesh here, so
    that no Key is built and hashed per delivery. Valid while the Paths' `generation` (their
    clears: routes and data links) and the destinations (`remote`, the entry's set) are those
    it was made under."""

    __slots__ = ("generation", "remote", "known")

    def __init__(self) -> None:
        self.generation = -1
        self.remote: frozenset[str] | None = None
        self.known: tuple[list[Candidate], list[Candidate]] | None = None


def band_of(priority: int, bands: int) -> int:
    """The band (0 = lowest) of a message of `priority` when a neighbour has `bands` data
    links (1-10): the ten levels spread evenly, so the bands are monotone in the priority,
    every band gets some level, and ten bands are the anchors' one link per level."""
    if priority > PRIORITY_TOP:
        priority = PRIORITY_TOP
    elif priority < 0:
        priority = 0
    return priority * bands // (PRIORITY_TOP + 1)


class Paths:
    """The path choices made under the current routes and data links, by Key: deliveries
    between two routers nearly all share one, so the routes are consulted once per kind of
    delivery, not per delivery. Cleared when routes or data links change (the mesh and its
    edges call clear; remote.py also checks the routes' identity where it reads them); a data
    link that is gone since is noticed where a choice is used, and the choice made again.
    `generation` counts the clears, for the choices remembered on annotation records and
    address entries."""

    __slots__ = ("routes", "anycast", "multicast", "local", "bands", "table", "generation")

    def __init__(self, table: AddressTable) -> None:
        # A neighbour's default data link -> its data links by priority band, lowest first
        # (only neighbours with more than one band; kept by the mesh, not cleared with the
        # choices), and the address table (its configured priorities): here, where the compiled
        # choice code reads them natively, rather than on the mesh.
        self.bands: dict[OutLink, list[OutLink]] = {}
        self.table = table
        # the topology.routes.Routes they were made under (only its identity is compared: the
        # compiled build of this module does not see the topology package's types)
        self.routes: object = None
        # sorted candidates (valid for the ingress, else any: as skupper-router), and the
        # lowest-cost ones among them
        self.anycast: dict[Key, tuple[list[Candidate], list[Candidate]]] = {}
        self.multicast: dict[Key, list[OutLink]] = {}
        self.local: dict[tuple[str, str | None], bool] = {}
        # Counts the clears: a choice or loop check remembered outside these maps (on an
        # annotation record or an address entry: remote.py) holds while it is unchanged.
        self.generation = 0

    def clear(self) -> None:
        self.generation += 1
        self.anycast.clear()
        self.multicast.clear()
        self.local.clear()
