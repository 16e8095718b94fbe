"""How one router reacts to each control message: the protocol's rules, without the public API.

Owns: `TopologyProtocol` (named so as not to shadow typing.Protocol), the reactions of one
router's protocol engine: HELLO -> two-way neighbours and my link state; RA -> flood on, pull a
newer link state (LSR) or address set (MAR), compare digests; LSR/MAR -> answer from a good copy
or pass on towards the owner, leaving a breadcrumb; LSU/MAU -> store, answer the breadcrumbs;
and the periodic route computation and ageing out of routers. It builds on ProtocolState
(protocolstate.py: the state, and the steps these rules are made of, restart handling included).
Must not touch: the public API, timers and events (node.py builds on this class), I/O, the clock.
Comments cite the reference (reference §3.2, §3.3) and docs/mesh-protocol.md.
"""

from __future__ import annotations

from .messages import Hello, LinkStateRequest, LinkStateUpdate, MobileAddressRequest, MobileAddressUpdate
from .messages import RouterAdvert
from .protocolstate import ProtocolState
from .routes import compute_routes


class TopologyProtocol(ProtocolState):
    """Message handlers and periodic work of one router (see TopologyNode for the API)."""

    # --- message handlers -------------------------------------------------------------------------

    def _on_hello(self, neighbour: str, message: Hello) -> None:
        if message.router_id != neighbour:
            self.counters.ignored_foreign += 1
            return
        if self._neighbours.hello(neighbour, message, self._now):
            self._send(neighbour, self._hello())
        self._refresh_own()

    def _on_ra(self, neighbour: str, message: RouterAdvert) -> None:
        origin = message.router_id
        if origin == self.router_id:
            self._own_echo(message.instance)
            return
        if not self._observe(origin, message.instance) or not self._ls.accept_ra(message, neighbour, self._now):
            return
        self._flood_on(message, neighbour)  # reference §3.2: RA is flooded to every router
        self._note_advert(origin, message.instance, message.ls_seq, message.mobile_seq, message.digest, owner=True)

    def _on_lsr(self, neighbour: str, message: LinkStateRequest) -> None:
        target, key = message.target, (message.target_instance, message.ls_seq)
        if message.router_id == self.router_id:
            return  # my own request came back round a loop
        held = self._ls.held_key(target)
        if held is not None and (target == self.router_id or held >= key):
            self._send(neighbour, self._lsu(target))  # the owner, or a copy at least as new
            return
        self._ls_requests.add_crumb(target, neighbour, key, self._now)
        if self._ls_requests.should_send(target, key, self._now):
            onward = self._toward(target, neighbour)
            if onward is not None:
                self._ls_requests.mark_sent(target, key, self._now)
                self._send(onward, message)

    def _on_lsu(self, neighbour: str, message: LinkStateUpdate) -> None:
        origin = message.router_id
        if origin == self.router_id or not self._observe(origin, message.instance):
            return
        if self._ls.offer(origin, message.link_state):
            self._routes_dirty()
        held = self._ls.held_key(origin)
        if held is not None:
            for asker in self._ls_requests.take_crumbs(origin, held):
                self._send(asker, self._lsu(origin))
        self._note_advert(
            origin, message.instance, message.link_state.seq, message.mobile_seq, message.digest, owner=False
        )

    def _on_mar(self, neighbour: str, message: MobileAddressRequest) -> None:
        target, key = message.target, (message.target_instance, message.mobile_seq)
        if message.router_id == self.router_id:
            return
        if target == self.router_id:
            self._send(neighbour, self._mobile.own_full(self.router_id, self.instance))
            return
        held = self._mobile.verified_key(target)
        if held is not None and held >= key:
            self._send(neighbour, self._mobile.full_update(target))
            return
        self._mobile_requests.add_crumb(target, neighbour, key, self._now)
        if self._mobile_requests.should_send(target, key, self._now):
            onward = self._toward(target, neighbour)
            if onward is not None:
                self._mobile_requests.mark_sent(target, key, self._now)
                self._send(onward, message)

    def _on_mau(self, neighbour: str, message: MobileAddressUpdate) -> None:
        origin = message.router_id
        if origin == self.router_id:
            self._own_echo(message.instance)
            return
        if not self._observe(origin, message.instance):
            return
        reason = None
        if message.exist is None:
            if not self._mobile.should_flood(origin, message.instance, message.mobile_seq):
                return
            self._flood_on(message, neighbour)
            outcome = self._mobile.apply(origin, message)
            reason = {"gap": "gap", "drift": "digest"}.get(outcome)
        elif self._mobile.apply(origin, message) == "corrupt":
            self.counters.corrupt += 1
        held = self._mobile.verified_key(origin)
        if held is not None:
            for asker in self._mobile_requests.take_crumbs(origin, held):
                self._send(asker, self._mobile.full_update(origin))
        self._request_mobile(origin, reason)

    # --- periodic work ----------------------------------------------------------------------------

    def _recompute(self) -> None:
        """Routes from the link-state DB (reference §3.3), then publish addresses of reachable
        routers and ask for the link state of routers known only by reference."""
        self._routes_due = None
        self.counters.route_computations += 1
        states = self._ls.link_states()
        self._routes = compute_routes(states, self.router_id)
        self._mobile.set_reachable(self._routes.reachable)
        unknown = [rid for rid in states if rid not in self._ls.routers and rid != self.router_id]
        for target in self._ls.add_referenced(sorted(unknown), self._now):
            self._request_ls(target)

    def _sweep(self) -> None:
        """Remove routers not heard from for remote_ls_max_age_s (reference §3.2)."""
        for origin in self._ls.expire(self._now, self.config.remote_ls_max_age_s):
            self._mobile.forget(origin)
            self._ls_requests.forget(origin)
            self._mobile_requests.forget(origin)
            self._routes_dirty()
        self._ls_requests.expire(self._now)
        self._mobile_requests.expire(self._now)
