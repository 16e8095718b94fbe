"""Inter-router connections: recognising the peer router, and the links between two routers.

Owns: the connection properties a router puts in its open (`mesh.role`, `mesh.version`,
`mesh.cost`: docs/mesh.md, "Connection roles and properties"), the checks on the peer's open
(a router on a client listener, a client on a router listener, a bad or duplicate router id, a
bad cost: each refused with a clear condition), and the links each router attaches on an
inter-router connection: one control link (`qd.router` capability; HELLO, RA, ... as AMQP
messages) and data links (`qd.router-data`, anonymous target: every routed delivery) per
direction: one per priority band (docs/mesh.md, "Priorities"), each in a session of its own
(the control link too: a band's window can be shut alone, router.core.bandwindow). Each
router attaches its own sending links and answers the peer's: the setup is symmetric, so it
does not matter which side connected, and the number of bands is the sender's choice (the
receiver takes any data link, up to one per priority level).
Must not touch: the topology protocol (router.core.mesh drives it), routing decisions.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from ..amqp import errors as E
from ..amqp.endpoints import ACTIVE, CLOSED
from ..amqp.link import Link
from ..amqp.messaging import Source, Target
from ..amqp.performatives import Error
from ..config.models import COST_MAX, PRIORITY_LEVELS, STREAMING_LINKS_MAX
from .addressentry import AddressEntry
from .annotparse import Seen
from .bandwindow import control_session, data_session
from .connections import ConnState
from .links import STREAM_LINK, InLink, OutLink
from .paths import PRIORITY_DEFAULT, band_of

if TYPE_CHECKING:
    from .ports import Credit

ROLE_PROPERTY = "mesh.role"  # normal (or absent), inter-router, edge
VERSION_PROPERTY = "mesh.version"  # of the inter-router link setup below
COST_PROPERTY = "mesh.cost"  # this end's configured cost; the link's is the max of both ends'
# 2: a router may detach a streaming link it attached (given back idle: router.core.streamreclaim);
# a router of version 1 takes that for a broken connection, so links to it are never given back.
MESH_VERSION = 2
GIVE_BACK_VERSION = 2
CONTROL_CAPABILITY = "qd.router"
DATA_CAPABILITY = "qd.router-data"
STREAM_CAPABILITY = "qd.router-stream"  # beside DATA_CAPABILITY: a streaming link (router.core.streamlinks)
CONTROL_CREDIT = 256  # control messages in flight per direction (topped up at half)
DATA_WINDOW_MIN = 1000  # the data link's credit window: max(this, 4 x link capacity)
DATA_LINKS_IN_MAX = PRIORITY_LEVELS  # data links a peer may attach on one connection (one per level)


class Peer:
    """The router at the other end of one inter-router connection."""

    __slots__ = ("id", "conn", "cost", "control_out", "data_out", "bands", "streams", "streams_base",
                 "streams_reclaimed", "data_in", "streams_in", "queue", "partial", "partial_size", "dropped", "edge",
                 "version")  # fmt: skip

    def __init__(self, router_id: str, conn: ConnState, cost: int) -> None:
        self.id = router_id
        self.conn = conn
        self.cost = cost  # max(mine, theirs)
        self.control_out: Link | None = None
        self.data_out: OutLink | None = None  # the default priority's data link (the only one of an edge)
        # Our data link of each priority band, lowest first (data_out among them); None: one band.
        self.bands: list[OutLink] | None = None
        # Our streaming links to it (router.core.streamlinks), each in a session of its own: the
        # live ones (a link that went away, given back idle or detached by the peer, is not here).
        self.streams: list[OutLink] = []
        self.streams_base = 0  # how many attach_links made (router.streaming_links): never given back
        self.streams_reclaimed = 0  # grown ones given back idle (router.core.streamreclaim; management)
        self.data_in = 0  # data links the peer attached (bounded: DATA_LINKS_IN_MAX)
        self.streams_in = 0  # streaming links the peer attached (bounded: STREAMING_LINKS_MAX)
        self.queue: deque[bytes] = deque()  # encoded control messages waiting for credit
        self.partial: list[bytes] = []  # a multi-frame control message arriving
        self.partial_size = 0  # its bytes so far
        self.dropped = 0  # control messages dropped because the queue was full
        self.edge = False  # an edge connection (router.core.edge), not a neighbour in the mesh
        # The mesh version its open announced (check_open has checked it is a positive integer).
        version = _open_properties(conn).get(VERSION_PROPERTY)
        self.version = version if isinstance(version, int) and not isinstance(version, bool) else 1

    def __repr__(self) -> str:
        return f"Peer({self.id!r}, conn #{self.conn.id}, cost {self.cost})"


class ControlIn:
    """Context of the control link on which a peer sends us control messages."""

    __slots__ = ("peer",)

    def __init__(self, peer: Peer) -> None:
        self.peer = peer


class ControlOut:
    """Context of our control link to a peer."""

    __slots__ = ("peer",)

    def __init__(self, peer: Peer) -> None:
        self.peer = peer


def open_properties(base: dict[str, Any], state: ConnState) -> dict[str, Any]:
    """What our open carries on `state`: the router's properties (`base`), plus role, version
    and cost on a connection between routers."""
    properties = dict(base)
    if state.role in ("inter-router", "edge"):
        properties.update({ROLE_PROPERTY: state.role, VERSION_PROPERTY: MESH_VERSION, COST_PROPERTY: state.cost})
    return properties


def _refusal(description: str, condition: str = E.NOT_ALLOWED) -> Error:
    return Error(condition=condition, description=description)


def _open_properties(state: ConnState) -> dict[str, Any]:
    """The peer's open's connection properties by name (none before its open)."""
    remote = state.engine.remote_open
    return {str(k): v for k, v in (remote.properties or {}).items()} if remote is not None else {}


def check_open(state: ConnState, router_id: str, mode: str) -> tuple[Error | None, int]:
    """Check the peer's open on `state` at router `router_id` of `mode`: (an error to close
    with, or None; the link cost)."""
    remote = state.engine.remote_open
    assert remote is not None
    props = _open_properties(state)
    claimed = props.get(ROLE_PROPERTY)
    what = f"{'connector' if state.outgoing else 'listener'} {state.listener.name!r}"
    if state.role in ("normal", "route-container"):  # clients, brokers and services
        if claimed in ("inter-router", "edge"):
            return _refusal(f"{what} is for clients (role {state.role}): connect a router with role "
                            f"{claimed} to a listener with that role"), 0  # fmt: skip
        return None, 0
    if claimed != state.role:
        return _refusal(f"{what} is for routers with role {state.role}: the peer's open must carry "
                        f"the connection property {ROLE_PROPERTY}={state.role!r} (got {claimed!r})"), 0  # fmt: skip
    if state.role == "inter-router" and mode != "interior":
        return _refusal(f"router {router_id} is not an interior router (mode {mode})"), 0
    version = props.get(VERSION_PROPERTY)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        return _refusal(f"{VERSION_PROPERTY} must be a positive integer: {version!r}", E.INVALID_FIELD), 0
    peer_id = remote.container_id
    if not peer_id or "/" in peer_id or len(peer_id) > 255:
        return _refusal(f"a router's container-id is its router id (1-255 characters, no '/'): {peer_id!r}",
                        E.INVALID_FIELD), 0  # fmt: skip
    if peer_id == router_id:
        return _refusal(f"the peer has this router's id {peer_id!r}: router ids must be unique"), 0
    cost = props.get(COST_PROPERTY, 1)
    if isinstance(cost, bool) or not isinstance(cost, int) or not 1 <= cost <= COST_MAX:
        return _refusal(f"{COST_PROPERTY} must be an integer in [1, {COST_MAX}]: {cost!r}", E.INVALID_FIELD), 0
    return None, max(int(cost), state.cost)


def attach_links(router_id: str, peer: Peer, now: float, bands: int = 1, streams: int = 0) -> None:
    """Attach our sending links to `peer`: control in a session of our own, the data link of
    each band (one with `bands` 1) in a session of its own (their deliveries never queue behind
    each other's, and the peer can stop one band by shutting its session's window without
    stopping the control link: router.core.bandwindow), and `streams` streaming links, each in
    a session of its own too (router.core.streamlinks)."""
    conn = peer.conn
    session = conn.engine.begin_session()
    control = session.attach_sender(f"{router_id}>{peer.id}/control", source=Source(address=None),
                                    target=Target(address=None, capabilities=(CONTROL_CAPABILITY,)))  # fmt: skip
    control.context = ControlOut(peer)
    peer.control_out = control
    default = band_of(PRIORITY_DEFAULT, bands)
    links: dict[int, OutLink] = {}
    for band in [default, *(b for b in range(bands) if b != default)]:  # /data first: a peer keeps it
        name = f"{router_id}>{peer.id}/data" if band == default else f"{router_id}>{peer.id}/data.{band}"
        links[band] = _data_link(peer, name, (DATA_CAPABILITY,), now)
    peer.data_out = links[default]
    peer.bands = [links[band] for band in range(bands)] if bands > 1 else None
    if bands > 1:
        for band, out in links.items():
            out.band = band  # its frames wait for higher bands' while the output is blocked (holding.py)
    if streams:
        for _ in range(streams):
            add_stream_link(router_id, peer, now)
        peer.streams_base = streams
        for out in links.values():
            out.streams = peer.streams  # (Sending._send reads it there; one list, grown in place)


def add_stream_link(router_id: str, peer: Peer, now: float) -> OutLink:
    """One more streaming link to `peer` (router.core.streamlinks), named with the lowest index
    no link of the connection carries: names stay bounded as links are given back and grown
    again (a link given back keeps its name until the peer answers its detach)."""
    prefix = f"{router_id}>{peer.id}/stream."
    taken = {link.name for session in peer.conn.engine.sessions for link in session.links}
    index = 0
    while f"{prefix}{index}" in taken:
        index += 1
    out = _data_link(peer, f"{prefix}{index}", (DATA_CAPABILITY, STREAM_CAPABILITY), now)
    out.band = STREAM_LINK
    peer.streams.append(out)
    return out


def _data_link(peer: Peer, name: str, capabilities: tuple[str, ...], now: float) -> OutLink:
    """One of our data links to `peer`, in a session of its own."""
    conn = peer.conn
    session = conn.engine.begin_session()
    session.watch_window = True  # (Holding.window_changed)
    data = session.attach_sender(name, source=Source(address=None),
                                 target=Target(address=None, capabilities=capabilities))  # fmt: skip
    private = AddressEntry(f"-{peer.id}", f"<data link to {peer.id}>", "closest")
    out = OutLink(data, conn, private, neighbour=peer.id)
    out.zero_credit_since = now  # no credit until the peer gives some
    data.context = out
    conn.out_links.add(out)
    return out


def detach_breaks(peer: object, link: Link) -> bool:
    """Whether the peer detaching `link` on an inter-router connection breaks the connection:
    yes for the control link and the default data link; not for the answer to a detach of ours
    (an attach we refused, a streaming link we gave back), nor for a band link of ours
    (docs/mesh.md, "Priorities": its band falls back to the default data link), nor for a
    streaming link either way (ours: its stream fails; the peer's: it gives back an idle one)."""
    if link.state.local is CLOSED:
        return False
    if is_stream_link(link):
        return False  # (its stream fails, if any; the others, and the bands, carry on)
    if isinstance(peer, Peer) and peer.bands is not None:
        ctx = link.context
        for out in peer.bands:
            if out is ctx:
                return out is peer.data_out
    return True


def is_stream_link(link: Link) -> bool:
    """`link` is a streaming link, ours (we send on it) or the peer's: by the capability of the
    target it was attached with."""
    return STREAM_CAPABILITY in _capabilities(link.target if link.is_sender else link.remote_target)


def _capabilities(terminus: Any) -> tuple[str, ...]:
    caps = getattr(terminus, "capabilities", None)
    if caps is None:
        return ()
    if isinstance(caps, str):
        return (str(caps),)
    return tuple(str(c) for c in caps)


def answer_attach(peer: Peer | None, conn: ConnState, link: Link, now: float, *, credit: Credit,
                  max_message_size: int | None, edge_router: bool) -> None:  # fmt: skip
    """The peer router attached a link: its control or data link (we receive on it). Anything
    else on a connection between routers is refused. `credit` gives a data link its window;
    `edge_router`: this router is an edge router."""
    if peer is None:
        link.reject(_refusal("the inter-router connection is not set up (or was replaced)"))
        return
    caps = _capabilities(link.remote_target)
    if link.is_sender or not caps:
        link.reject(_refusal("only the control and data links of the peer router may attach on an "
                             f"inter-router connection (target capability {CONTROL_CAPABILITY} or {DATA_CAPABILITY})"))  # fmt: skip
        return
    if CONTROL_CAPABILITY in caps:
        if not link.answer(source=link.remote_source, target=link.remote_target):
            return  # refused: the echo would not fit the peer's max-frame-size
        link.context = ControlIn(peer)
        control_session(link.session)
        link.flow(CONTROL_CREDIT)
    elif DATA_CAPABILITY in caps:
        stream = STREAM_CAPABILITY in caps
        if stream:
            if peer.streams_in >= STREAMING_LINKS_MAX:
                link.reject(_refusal(f"at most {STREAMING_LINKS_MAX} streaming links per inter-router connection",
                                     E.RESOURCE_LIMIT_EXCEEDED))  # fmt: skip
                return
        elif peer.data_in >= DATA_LINKS_IN_MAX:
            link.reject(_refusal(f"at most {DATA_LINKS_IN_MAX} data links per inter-router connection",
                                 E.RESOURCE_LIMIT_EXCEEDED))  # fmt: skip
            return
        link.detach_on_oversize = False  # an oversize delivery is rejected, not the link
        if not link.answer(source=link.remote_source, target=link.remote_target,
                           max_message_size=max_message_size):  # fmt: skip
            return  # refused: the echo would not fit the peer's max-frame-size
        if stream:  # (counted while its InLink lives: stream_in_gone)
            peer.streams_in += 1
        else:  # (counted once attached: a refused answer takes no place)
            peer.data_in += 1
        window = max(DATA_WINDOW_MIN, 4 * conn.listener.link_capacity)
        inl = InLink(link, conn, None, peer=peer.id, capacity=window)
        # From an edge router a delivery enters the mesh here (docs/mesh.md, "Edge routers").
        inl.seen = Seen(peer.id, entering=conn.role == "edge" and not edge_router)
        inl.zero_credit_since = now  # until the flush gives it its window
        link.context = inl
        conn.in_links.add(inl)
        data_session(link.session, conn)  # (its window shuts while too much of it waits here)
        credit.credit_dirty(inl)  # a window at once: not tied to destinations
    else:
        link.reject(_refusal(f"unknown inter-router link capabilities {list(caps)}"))


def top_up_control(link: Link) -> None:
    """Receiver side of a control link: keep the peer's credit up."""
    if link.credit <= CONTROL_CREDIT // 2 and link.state.local is ACTIVE:
        link.flow(CONTROL_CREDIT)
