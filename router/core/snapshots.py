"""The values the routing core's read API (coreread.py) hands out: frozen snapshots of the
router's totals, a connection, a link and an address, their counters already summed.

Owns: the snapshot types, what each field means. Must not touch: the core's records (readers
such as management and flow records get these values, never InLink, OutLink or AddressEntry).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple


@dataclass(frozen=True, slots=True)
class RouterTotals:
    """Router-wide counters: deliveries counted where they entered (links up now and gone)."""

    addresses: int
    links: int
    connections: int  # opened and not closing
    presettled: int
    dropped_presettled: int
    accepted: int
    rejected: int
    released: int
    modified: int
    ingress: int  # deliveries received (from clients and other routers)
    egress: int  # deliveries sent to clients
    transit: int  # deliveries sent to other routers
    from_router: int  # messages the router itself sent
    dropped_from_router: int
    failed_logins: int
    failed_logins_delayed: int
    failed_login_hosts: int
    stuck_links: int
    unsettled_bound_reached: int
    buffered_bytes: int
    buffered_budget_bytes: int
    paused_connections: int
    released_over_budget: int
    flow_records_emitted: int = 0  # flow records sent or written (router.flow)
    flow_records_dropped: int = 0  # flow records dropped: the buffer or the hop samples were full
    redirected_to_fallback: int = 0  # deliveries sent to fallback destinations (router.core.fallback)


@dataclass(frozen=True, slots=True)
class ConnectionSnapshot:
    id: int
    container_id: str | None  # None before the peer's open
    host: str
    role: str
    outgoing: bool
    config_name: str  # the listener's (incoming) or connector's (outgoing)
    sasl_mechanism: str | None
    user: str | None
    tls_protocol: str | None  # None without TLS
    tls_cipher: str | None
    encrypted: bool
    properties: dict[str, Any] | None  # the peer's open properties (a copy)
    opened: bool
    closing: bool
    uptime_s: int  # since the peer's open (0 before it)
    last_delivery_s: int | None  # since a transfer last came in or went out (None: none yet)
    link_count: int
    session_count: int  # its sessions (ours and the peer's), begun and not yet ended both ways
    # Backpressure: the router sends it no more deliveries (its output has not drained); bytes
    # of its deliveries waiting for consumer credit; later frames of its deliveries held while
    # their consumers' output is blocked; frames waiting for it to open its session window.
    output_blocked: bool
    buffered_bytes: int
    held_frame_bytes: int
    window_held_bytes: int
    # Between routers (router.core.bandwindow): its sessions (priority bands) whose incoming
    # window this router has shut, and ours the peer has shut.
    shut_windows: int
    peer_shut_windows: int
    # Between routers (router.core.streamlinks): our streaming links to the peer now, and those
    # grown for a burst of large messages and given back idle since the connection opened.
    streaming_links: int
    streaming_links_reclaimed: int


@dataclass(frozen=True, slots=True)
class LinkSnapshot:
    id: int
    name: str
    incoming: bool  # a producer's link (or an inter-router link we receive on)
    between_routers: bool
    table_key: str | None  # its address's table key; None when anonymous or between routers
    address: str | None  # as attached, else its address's (None between routers)
    connection_id: int
    up: bool
    capacity: int
    undelivered: int  # out: deliveries waiting for its credit
    unsettled: int
    delivered: int
    presettled: int  # in only
    dropped_presettled: int  # in only
    accepted: int
    rejected: int
    released: int
    modified: int
    credit: int
    zero_credit_s: int | None  # since its credit dropped to zero (0 with credit; None: not timed)
    stuck: bool  # out: at its unsettled bound
    stuck_count: int
    size_hint: int | None  # in: the message size its window is sized by (None before one is known)
    # The max-message-size in force on it (0: none): out, the consumer's (nothing larger is sent
    # to it: router.core.sizelimits); in, the router's (a larger delivery is refused).
    max_message_size: int = 0
    # Flow records (router.flow): the neighbour router of a link between routers, and what is
    # counted only while flow records are on (bytes, the two log2 histograms).
    peer_router: str | None = None
    bytes: int = 0
    residence_hist: tuple[int, ...] = ()
    settle_hist: tuple[int, ...] = ()
    # Of `delivered` and `bytes`: the flow records' own messages (counted while records are on).
    records: int = 0
    records_bytes: int = 0
    # Grows with every delivery and outcome counted here: unchanged, nothing above moved (a
    # reader looking for change compares it: coreread's link_activity).
    activity: int = 0


@dataclass(frozen=True, slots=True)
class AddressSnapshot:
    table_key: str  # M<address> mobile, L<address> local, R<router>, T<x>
    address: str
    distribution: str
    remote_routers: tuple[str, ...]  # sorted
    in_process: bool
    consumers: int
    producers: int
    undelivered: int
    unsettled: int
    credit: int
    zero_credit_s: int | None  # since its last local consumer with credit ran out (None: no consumers, or not timed)
    ingress: int
    egress: int
    transit: int
    released: int
    dropped: int
    expired: int
    rejected: int
    accepted: int
    modified: int
    presettled: int
    # Counted only while flow records are on (router.core.flowcount).
    bytes: int = 0
    residence_hist: tuple[int, ...] = ()
    settle_hist: tuple[int, ...] = ()
    released_told: int = 0  # producers told released, by the router or a consumer
    redirected_to_fallback: int = 0  # deliveries to it sent to its fallback destinations instead
    activity: int = 0  # grows with every delivery and outcome counted here (coreread's address_activity)


class AddressCounts(NamedTuple):
    """What /metrics shows per address, without the rest of an AddressSnapshot (a scrape reads
    it for every address: a tuple, not a frozen dataclass, costs least to make)."""

    table_key: str
    address: str
    ingress: int
    egress: int
    transit: int
    consumers: int
    remote_routers: int
