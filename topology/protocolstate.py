"""The state of one router's protocol engine, and the steps its reactions are made of.

Owns: `ProtocolState`, what one router's protocol engine holds (neighbour table, link states,
mobile addresses, pending requests, routes, deadlines, what waits to be sent or reported), and
the steps every rule of protocol.py is built from: sending and flooding, the HELLO, RA and LSU
this router sends, marking routes dirty, the instance rules (restarts, stale messages, a
duplicate id), requesting a router's newer link state (LSR) or address set (MAR) from the
neighbour towards it.
Must not touch: which message triggers what (protocol.py), the public API, timers and events
(node.py), I/O, the clock.
Comments cite the reference (reference §3.2, §3.3) and docs/mesh-protocol.md.
"""

from __future__ import annotations

from collections.abc import Callable

from .config import TopologyConfig
from .events import AddressResync, Counters, DuplicateRouterId, RouterRestarted, TopologyEvent
from .linkstate import Key, LinkStateDb, Seen
from .messages import ControlMessage, Hello, LinkStateRequest, LinkStateUpdate, MobileAddressRequest, RouterAdvert
from .mobile import MobileDb
from .neighbours import NeighbourTable
from .requests import RequestTable
from .routes import Routes, compute_routes

Outgoing = tuple[str | None, ControlMessage]
NEVER = float("inf")


class ProtocolState:
    """The protocol state of one router and the steps its rules are made of (the rules:
    TopologyProtocol; the API: TopologyNode)."""

    def __init__(self, router_id: str, instance: int, config: TopologyConfig | None = None) -> None:
        if not isinstance(router_id, str) or not router_id:
            raise ValueError(f"router id must be a non-empty string: {router_id!r}")
        if isinstance(instance, bool) or not isinstance(instance, int) or not 0 <= instance < 2**63:
            raise ValueError(f"instance must be an int in [0, 2**63): {instance!r}")
        self.router_id, self.instance = router_id, instance
        self.config = cfg = config or TopologyConfig()
        self.counters = Counters()
        self._neighbours = NeighbourTable(router_id, cfg.hello_interval_s, cfg.dead_interval_s)
        self._ls = LinkStateDb(router_id, instance)
        self._mobile = MobileDb()
        self._ls_requests = RequestTable(cfg.request_retry_s)
        self._mobile_requests = RequestTable(cfg.request_retry_s)
        self._routes: Routes = compute_routes({}, router_id)
        self._out: list[Outgoing] = []
        self._events: list[TopologyEvent] = []
        self._now = float("-inf")  # the latest time an input gave us
        self._ra_seq = 0
        self._dup_reported = -1
        # Deadlines; -inf: at the first tick.
        self._next_hello = self._next_ra = self._next_sweep = float("-inf")
        self._flux_until = float("-inf")
        self._routes_due: float | None = None
        self._next_request = NEVER

    # --- output helpers ---------------------------------------------------------------------------

    def _send(self, to: str | None, message: ControlMessage) -> None:
        self._out.append((to, message))
        sent = self.counters.sent
        sent[message.OPCODE] = sent.get(message.OPCODE, 0) + 1

    def _flood_on(self, message: ControlMessage, came_from: str) -> None:
        """Pass a flooded message to every neighbour but the one it came from."""
        for neighbour in self._neighbours.connected:
            if neighbour != came_from:
                self._out.append((neighbour, message))

    def _hello(self) -> Hello:
        ms = max(1, round(self.config.hello_interval_s * 1000))
        return Hello(router_id=self.router_id, instance=self.instance, seen=self._neighbours.heard(),
                     hello_interval_ms=ms)  # fmt: skip

    def _advert(self) -> RouterAdvert:
        return RouterAdvert(
            router_id=self.router_id, instance=self.instance, ra_seq=self._ra_seq,
            ls_seq=self._ls.own.seq, mobile_seq=self._mobile.local_seq, digest=self._mobile.local.digest,
        )  # fmt: skip

    def _lsu(self, origin: str) -> LinkStateUpdate:
        if origin == self.router_id:
            seq, digest = self._mobile.local_seq, self._mobile.local.digest
            return LinkStateUpdate(router_id=origin, instance=self.instance, link_state=self._ls.own,
                                   mobile_seq=seq, digest=digest)  # fmt: skip
        record = self._ls.routers[origin]
        assert record.instance is not None and record.link_state is not None
        seq, digest = self._mobile.advert(origin)
        return LinkStateUpdate(router_id=origin, instance=record.instance, link_state=record.link_state,
                               mobile_seq=seq, digest=digest)  # fmt: skip

    def _toward(self, target: str, avoid: str | None) -> str | None:
        """The neighbour to pass a request for `target` to: the one the target's newest RA came
        from (that path worked moments ago), else the route's next hop, else the target itself."""
        record = self._ls.routers.get(target)
        connected = self._neighbours.connected
        for candidate in (record.ra_from if record else None, self._routes.next_hops.get(target), target):
            if candidate is not None and candidate != avoid and candidate in connected:
                return candidate
        return None

    # --- state changes ----------------------------------------------------------------------------

    def _clock(self, now: float | None) -> None:
        if now is not None:
            self._now = now

    def _changed(self) -> None:
        """My link state or address set changed: RA at once, then often for a while."""
        self._next_ra = min(self._next_ra, self._now)
        self._flux_until = self._now + self.config.flux_period_s

    def _routes_dirty(self) -> None:
        if self._routes_due is None:
            self._routes_due = self._now + self.config.route_delay_s

    def _refresh_own(self) -> None:
        before = set(self._ls.own.peers)
        if self._ls.set_own(self._neighbours.two_way()):
            self._changed()
            self._routes_dirty()
            # Database summary: a new two-way neighbour gets the newest RA of every router I
            # know, verbatim (so floods still de-duplicate), and pulls what it lacks from me.
            for neighbour in sorted(set(self._ls.own.peers) - before):
                for record in self._ls.routers.values():
                    if record.ra is not None and record.router_id != neighbour:
                        self._out.append((neighbour, record.ra))

    def _observe(self, origin: str, instance: int) -> bool:
        """Apply the instance rules (reference §3.2: a changed instance is a restart); False if
        the message is from an older instance and must be ignored."""
        old = self._ls.routers.get(origin)
        seen = self._ls.observe(origin, instance, self._now)
        if seen is Seen.STALE:
            self.counters.ignored_stale += 1
            return False
        if seen is Seen.RESTARTED:
            assert old is not None and old.instance is not None
            self._mobile.forget(origin)
            self._ls_requests.forget(origin)
            self._mobile_requests.forget(origin)
            self._events.append(RouterRestarted(router_id=origin, old_instance=old.instance, new_instance=instance))
            self._routes_dirty()
        return True

    def _own_echo(self, instance: int) -> None:
        """A message speaking for my id: my own flood coming back, or a duplicate router id."""
        if instance > self.instance and instance != self._dup_reported:
            self._dup_reported = instance
            self._events.append(DuplicateRouterId(router_id=self.router_id, instance=instance))

    # --- requests ---------------------------------------------------------------------------------

    def _request_ls(self, target: str) -> None:
        self._pull(self._ls_requests, target, self._ls.wanted(target), lambda key: LinkStateRequest(
            router_id=self.router_id, instance=self.instance, target=target,
            target_instance=key[0], ls_seq=key[1],
        ))  # fmt: skip

    def _request_mobile(self, target: str, reason: str | None) -> None:
        key = self._mobile.wanted(target)
        if key is not None and target not in self._mobile_requests.wanted and reason is not None:
            self.counters.resync_gap += reason == "gap"
            self.counters.resync_digest += reason == "digest"
            self._events.append(AddressResync(router_id=target, reason=reason))
        self._pull(self._mobile_requests, target, key, lambda key: MobileAddressRequest(
            router_id=self.router_id, instance=self.instance, target=target,
            target_instance=key[0], mobile_seq=key[1], have_seq=self._mobile.held_seq(target),
        ))  # fmt: skip

    def _pull(self, requests: RequestTable, target: str, key: Key | None,
              request: Callable[[Key], ControlMessage]) -> None:  # fmt: skip
        """Ask the neighbour towards `target` for what we lack of it (`key`: the instance and
        sequence wanted; None: nothing is wanted any more), at most once per retry interval."""
        if key is None:
            requests.wanted.discard(target)
            return
        requests.wanted.add(target)
        self._next_request = min(self._next_request, self._now + self.config.request_retry_s)
        if requests.should_send(target, key, self._now):
            neighbour = self._toward(target, None)
            if neighbour is not None:
                requests.mark_sent(target, key, self._now)
                self._send(neighbour, request(key))

    def _note_advert(self, origin: str, instance: int, ls_seq: int, mobile_seq: int, digest: bytes,
                     *, owner: bool) -> None:  # fmt: skip
        """An RA (`owner`) or LSU told us where `origin` is: pull what we lack, check the digest."""
        self._ls.advertise(origin, ls_seq)
        self._request_ls(origin)
        self._mobile.advertised(origin, instance, mobile_seq, digest, owner=owner)
        held = self._mobile.held_seq(origin)
        self._request_mobile(origin, "digest" if held == mobile_seq else None)
