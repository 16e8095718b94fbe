"""The link-state database: my own link state and what I know of every other router.

Owns: my link state and its seq; one record per known remote router (instance, link state,
advertised seq, newest RA seen and the neighbour it first arrived from, last time heard); the
instance rules (a newer instance is a restart: flush; an older one is stale: ignore); the
provisional link states that make routers known only by reference reachable; ageing out routers
not heard from. Must not touch: mobile addresses (mobile.py), request routing and timers
(node.py), route computation (routes.py), I/O.

Reference §3.2-§3.3: LS DB = {router: LinkState(ls_seq, peers)}, my entry built from
HELLO-confirmed neighbours; a remote link state with no RA for remoteLsMaxAge (60 s) is removed;
a changed instance means a restart (flush and re-request); "a fake LS is added for known peers
that have no LS yet" so their link state can be requested through the peer that lists them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from .graph import LinkState
from .messages import RouterAdvert

Key = tuple[int, int]  # (instance, ls seq): compared lexicographically


class Seen(enum.Enum):
    """What a message's (router, instance) tells us about that router."""

    STALE = "stale"  # an instance older than the one we hold: ignore the message
    KNOWN = "known"
    NEW = "new"  # first heard of (or first heard *from*, after being known by reference)
    RESTARTED = "restarted"  # a newer instance: everything held for the old one was flushed


@dataclass(slots=True)
class RemoteRouter:
    """What I know of one other router. `instance` is None while it is known only because some
    link state lists it."""

    router_id: str
    instance: int | None
    last_heard: float
    link_state: LinkState | None = None
    adv_ls_seq: int = 0  # newest ls seq the router is known to have reached
    ra: RouterAdvert | None = None  # newest RA seen (its ra_seq de-duplicates floods)
    ra_from: str | None = None  # the neighbour that RA first arrived from

    @property
    def ls_seq(self) -> int:
        return 0 if self.link_state is None else self.link_state.seq


class LinkStateDb:
    """Link states of the whole network as this router knows them."""

    def __init__(self, me: str, instance: int) -> None:
        self.me = me
        self.instance = instance
        self.own = LinkState(seq=0, peers={})
        self.routers: dict[str, RemoteRouter] = {}

    def set_own(self, peers: Mapping[str, int]) -> bool:
        """Replace my peers; True (and seq + 1) if they changed."""
        if dict(peers) == dict(self.own.peers):
            return False
        self.own = LinkState(seq=self.own.seq + 1, peers=peers)
        return True

    def observe(self, origin: str, instance: int, now: float) -> Seen:
        """Apply the instance rules for a message speaking for `origin` at `instance`."""
        record = self.routers.get(origin)
        if record is None:
            self.routers[origin] = RemoteRouter(origin, instance, now)
            return Seen.NEW
        if record.instance is None:
            record.instance, record.last_heard = instance, now
            return Seen.NEW
        if instance < record.instance:
            return Seen.STALE
        if instance > record.instance:
            self.routers[origin] = RemoteRouter(origin, instance, now)
            return Seen.RESTARTED
        return Seen.KNOWN

    def accept_ra(self, advert: RouterAdvert, from_neighbour: str, now: float) -> bool:
        """Record an RA of a router already observed; False for one already seen (a duplicate
        of a flood, or an old one overtaken on another path)."""
        record = self.routers[advert.router_id]
        if record.ra is not None and advert.ra_seq <= record.ra.ra_seq:
            return False
        record.ra, record.ra_from, record.last_heard = advert, from_neighbour, now
        record.adv_ls_seq = max(record.adv_ls_seq, advert.ls_seq)
        return True

    def advertise(self, origin: str, ls_seq: int) -> None:
        record = self.routers[origin]
        record.adv_ls_seq = max(record.adv_ls_seq, ls_seq)

    def offer(self, origin: str, link_state: LinkState) -> bool:
        """Store a link state of an observed router if it is newer than the one held."""
        record = self.routers[origin]
        record.adv_ls_seq = max(record.adv_ls_seq, link_state.seq)
        if record.link_state is not None and link_state.seq <= record.link_state.seq:
            return False
        record.link_state = link_state
        return True

    def held_key(self, origin: str) -> Key | None:
        """(instance, seq) of the link state held for `origin` (mine included), if any."""
        if origin == self.me:
            return (self.instance, self.own.seq)
        record = self.routers.get(origin)
        if record is None or record.instance is None or record.link_state is None:
            return None
        return (record.instance, record.link_state.seq)

    def wanted(self, origin: str) -> Key | None:
        """The (instance, seq) to request for `origin`, or None when what is held is current.
        A router known only by reference wants any link state: (0, 1)."""
        record = self.routers.get(origin)
        if record is None:
            return None
        if record.instance is None:
            return (0, 1)
        if record.adv_ls_seq > record.ls_seq:
            return (record.instance, record.adv_ls_seq)
        return None

    def link_states(self) -> dict[str, LinkState]:
        """Every link state held, mine included, plus a provisional one for each router that is
        listed by someone but whose own link state is not held: it lists back exactly the
        routers that list it, at their cost, so the link is two-way until the real one comes."""
        states: dict[str, LinkState] = {self.me: self.own}
        for origin, record in self.routers.items():
            if record.link_state is not None:
                states[origin] = record.link_state
        provisional: dict[str, dict[str, int]] = {}
        for origin, state in states.items():
            for peer, cost in state.peers.items():
                if peer not in states:
                    provisional.setdefault(peer, {})[origin] = cost
        for peer, peers in provisional.items():
            states[peer] = LinkState(seq=0, peers=peers)
        return states

    def add_referenced(self, ids: list[str], now: float) -> list[str]:
        """Create records for routers known only by reference; returns the new ones."""
        created = []
        for origin in ids:
            if origin != self.me and origin not in self.routers:
                self.routers[origin] = RemoteRouter(origin, None, now)
                created.append(origin)
        return created

    def expire(self, now: float, max_age_s: float) -> list[str]:
        """Remove routers not heard from (no RA) for `max_age_s`; returns their ids."""
        gone = [rid for rid, rec in self.routers.items() if now - rec.last_heard > max_age_s]
        for origin in gone:
            del self.routers[origin]
        return gone
