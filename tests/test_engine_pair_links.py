"""The connection engine against itself (two sans-IO engines back to back, EnginePair): links
(transport §2.6), credit and delivery-count (transport §2.6.7).

Nothing here does I/O or sleeps: bytes move by `pump()`, time is the `now` argument.
"""

from __future__ import annotations

from typing import Any

import pytest

from router.amqp import errors as E
from router.amqp.connection import ConnectionConfig
from router.amqp.endpoints import ACTIVE, CLOSED, UNINIT
from router.amqp.events import FlowReceived, ProtocolViolation, RemoteAttach, RemoteDetach, TransferReceived
from router.amqp.link import Link
from router.amqp.framing import frame
from router.amqp.messaging import Source, Target
from router.amqp.performatives import RCV_SECOND, RECEIVER, SENDER, SND_SETTLED, Attach, Begin, Detach, Error, Flow
from router.amqp.session import Session

from router.testing.enginepair import RawPeer, attach_pair, bodies, connected_pair, of_type

from .support.engine_pairs import sent


# --- links (transport §2.6) --------------------------------------------------------------------


@pytest.mark.parametrize("client_sends", [True, False])
def test_attach_both_roles(client_sends: bool) -> None:
    pair, cs, ss = connected_pair()
    cl, sl = attach_pair(pair, cs, ss, "q1", client_sends=client_sends)
    assert cl.role is (SENDER if client_sends else RECEIVER)
    assert sl.role is (not cl.role)
    assert cl.active and sl.active
    (server_attach,) = of_type(pair.server_events, RemoteAttach)
    assert server_attach.link is sl and server_attach.attach.name == "q1"
    assert cl.local_handle == cl.remote_handle == sl.local_handle == sl.remote_handle == 0
    (client_attach,) = of_type(pair.client_events, RemoteAttach)
    assert client_attach.link is cl
    assert cs.links == [cl] and ss.links == [sl]
    if client_sends:
        assert server_attach.attach.initial_delivery_count == 0
        assert client_attach.attach.initial_delivery_count is None
    else:
        assert server_attach.attach.initial_delivery_count is None
        assert client_attach.attach.initial_delivery_count == 0


def test_responder_mirrors_the_settle_modes() -> None:
    pair, cs, ss = connected_pair()
    cl, sl = attach_pair(pair, cs, ss, client_attach={"snd_settle_mode": SND_SETTLED, "rcv_settle_mode": RCV_SECOND})
    assert sl.snd_settle_mode == SND_SETTLED and sl.rcv_settle_mode == RCV_SECOND
    answer = of_type(pair.client_events, RemoteAttach)[0].attach
    assert answer.snd_settle_mode == SND_SETTLED and answer.rcv_settle_mode == RCV_SECOND


@pytest.mark.parametrize("client_sends", [True, False])
@pytest.mark.parametrize("closed", [True, False])
@pytest.mark.parametrize("first", ["client", "server"])
def test_detach_closed_or_not(closed: bool, first: str, client_sends: bool) -> None:
    pair, cs, ss = connected_pair()
    cl, sl = attach_pair(pair, cs, ss, client_sends=client_sends)
    detacher, other = (cl, sl) if first == "client" else (sl, cl)
    detacher.detach(closed=closed)
    client_events, server_events = pair.pump()
    other_events = server_events if first == "client" else client_events
    (remote_detach,) = of_type(other_events, RemoteDetach)
    assert remote_detach.link is other and remote_detach.closed is closed
    assert remote_detach.error is None and other.remote_closed is closed
    other.detach(closed=closed)
    client_events, server_events = pair.pump()
    detacher_events = client_events if first == "client" else server_events
    assert of_type(detacher_events, RemoteDetach)[0].closed is closed
    assert cs.links == [] and ss.links == [] and cs.links_by_local == {} and ss.links_by_remote == {}


def test_detach_with_an_error() -> None:
    pair, cs, ss = connected_pair()
    cl, sl = attach_pair(pair, cs, ss)
    sl.detach(error=Error(condition=E.DETACH_FORCED, description="admin"))
    client_events, _ = pair.pump()
    (detach,) = of_type(client_events, RemoteDetach)
    assert detach.error == Error(condition=E.DETACH_FORCED, description="admin")
    assert cl.remote_error == detach.error


def test_reattach_after_detach_closed_false() -> None:
    pair, cs, ss = connected_pair()
    cl, sl = attach_pair(pair, cs, ss, "resumable")
    cl.detach(closed=False)
    pair.pump()
    sl.detach(closed=False)
    pair.pump()
    cl2, sl2 = attach_pair(pair, cs, ss, "resumable")
    assert cl2.active and sl2.active and cl2 is not cl


def test_refusing_a_link_attaches_with_null_terminus_then_detaches() -> None:
    pair, cs, ss = connected_pair()
    cl = cs.attach_sender("nope", target=Target(address="missing"))
    _, server_events = pair.pump()
    sl = of_type(server_events, RemoteAttach)[0].link
    sl.reject(Error(condition=E.NOT_FOUND, description="no such node"))
    client_events, _ = pair.pump()
    assert [type(e) for e in client_events] == [RemoteAttach, RemoteDetach]
    (attach,), (detach,) = of_type(client_events, RemoteAttach), of_type(client_events, RemoteDetach)
    assert attach.attach.target is None and attach.attach.source is None
    assert detach.closed and detach.error.condition == E.NOT_FOUND
    cl.detach()
    pair.pump()
    assert cs.links == [] and ss.links == []


def test_detaching_a_link_never_attached_locally_refuses_it() -> None:
    pair, cs, ss = connected_pair()
    cs.attach_receiver("r", source=Source(address="s"))
    _, server_events = pair.pump()
    sl = of_type(server_events, RemoteAttach)[0].link
    sl.detach(error=Error(condition=E.UNAUTHORIZED_ACCESS))
    client_events, _ = pair.pump()
    assert [type(e) for e in client_events] == [RemoteAttach, RemoteDetach]
    assert of_type(client_events, RemoteAttach)[0].attach.source is None


def test_handle_allocation_reuses_freed_handles() -> None:
    pair, cs, ss = connected_pair()
    links = [attach_pair(pair, cs, ss, f"l{i}")[0] for i in range(3)]
    assert [link.local_handle for link in links] == [0, 1, 2]
    links[1].detach()
    _, server_events = pair.pump()
    of_type(server_events, RemoteDetach)[0].link.detach()
    pair.pump()
    again, _ = attach_pair(pair, cs, ss, "again")
    assert again.local_handle == 1


def test_handle_max_limits_links() -> None:
    pair, cs, ss = connected_pair(server_begin={"handle_max": 1})
    assert cs.remote_handle_max == 1
    attach_pair(pair, cs, ss, "a")
    attach_pair(pair, cs, ss, "b")
    with pytest.raises(E.LocalUsageError):
        cs.attach_sender("c")


def test_duplicate_link_name_is_local_misuse() -> None:
    pair, cs, ss = connected_pair()
    cs.attach_sender("dup")
    with pytest.raises(E.LocalUsageError):
        cs.attach_sender("dup")
    cs.attach_receiver("dup")  # the other role is another link


def test_attach_on_a_session_not_begun_is_local_misuse() -> None:
    pair, cs, ss = connected_pair()
    cs.end()
    with pytest.raises(E.LocalUsageError):
        cs.attach_sender("late")


def test_max_message_size_is_advertised() -> None:
    pair, cs, ss = connected_pair()
    attach_pair(pair, cs, ss, client_attach={"max_message_size": 1000}, server_attach={"max_message_size": 2000})
    assert of_type(pair.server_events, RemoteAttach)[0].attach.max_message_size == 1000
    assert of_type(pair.client_events, RemoteAttach)[0].attach.max_message_size == 2000


# --- a link attached again is stolen (transport 2.6.1, "Naming a Link") ------------------------
#
# Our engine refuses to attach a name it has attached already (test_duplicate_link_name_is_local_
# misuse): attach_again() forgets the name at the client first, as a peer that reuses names does.
# The client's old link keeps its handle, and answers the server's detach when told to.


def attach_again(cs: Session, old: Link, **attach: Any) -> Link:
    del cs.links_by_name[(old.name, old.role)]
    if old.role is SENDER:
        attach.setdefault("target", Target(address=old.name))
        return cs.attach_sender(old.name, **attach)
    attach.setdefault("source", Source(address=old.name))
    return cs.attach_receiver(old.name, **attach)


def answer(link: Link) -> None:
    link.attach(source=link.remote_source, target=link.remote_target)


def assert_stolen(detach: Any) -> None:
    assert isinstance(detach, RemoteDetach) and detach.closed
    assert detach.error.condition == E.STOLEN == "amqp:link:stolen"
    assert "stolen" in detach.error.description and detach.link.name in detach.error.description


@pytest.mark.parametrize("client_sends", [True, False])
def test_attaching_a_link_again_steals_it(client_sends: bool) -> None:
    pair, cs, ss = connected_pair()
    old_c, old_s = attach_pair(pair, cs, ss, "same", client_sends=client_sends, credit=3)
    new_c = attach_again(cs, old_c)
    client_events, server_events = pair.pump()
    # The new attach is a new link, as any: the old one is gone from under the name, detached by
    # the engine with amqp:link:stolen; its credit is gone with it.
    (attached,) = server_events
    assert isinstance(attached, RemoteAttach) and attached.link is not old_s
    new_s = attached.link
    assert ss.links_by_name[("same", old_s.role)] is new_s
    assert old_s.state.local is CLOSED and old_s.credit == 0
    (detached,) = client_events
    assert detached.link is old_c
    assert_stolen(detached)
    # Both links are still the session's: the old one until the peer answers our detach.
    assert ss.links == [new_s, old_s]
    assert set(ss.links_by_remote.values()) == {old_s, new_s}
    answer(new_s)
    old_c.detach()
    client_events, server_events = pair.pump()
    assert [type(e) for e in server_events] == [RemoteDetach]
    assert server_events[0].link is old_s  # the answer, by the old handle: accepted
    assert ss.links == [new_s] and list(ss.links_by_remote.values()) == [new_s] and ss.displaced is None
    assert list(ss.links_by_local.values()) == [new_s]
    # The new link carries a delivery.
    snd, rcv = (new_c, new_s) if client_sends else (new_s, new_c)
    rcv.flow(1)
    pair.pump()
    snd.send_transfer(b"t", b"after the steal")
    client_events, server_events = pair.pump()
    (transfer,) = of_type(server_events if client_sends else client_events, TransferReceived)
    assert transfer.link is rcv and bytes(transfer.payload) == b"after the steal"


def test_a_third_attach_steals_again() -> None:
    pair, cs, ss = connected_pair()
    first_c, first_s = attach_pair(pair, cs, ss, "same")
    second_c = attach_again(cs, first_c)
    _, server_events = pair.pump()
    second_s = of_type(server_events, RemoteAttach)[0].link
    answer(second_s)
    pair.pump()
    third_c = attach_again(cs, second_c)
    client_events, server_events = pair.pump()
    third_s = of_type(server_events, RemoteAttach)[0].link
    assert ss.links_by_name[("same", first_s.role)] is third_s
    stolen = of_type(pair.client_events, RemoteDetach)
    assert [d.link for d in stolen] == [first_c, second_c]
    for detach in stolen:
        assert_stolen(detach)
    for link in (first_c, second_c):
        link.detach()
    _, server_events = pair.pump()
    assert [d.link for d in of_type(server_events, RemoteDetach)] == [first_s, second_s]
    assert ss.links == [third_s] and list(ss.links_by_remote.values()) == [third_s]
    assert third_c.state.remote is not CLOSED


def raw_attach(handle: int, name: str = "same") -> Attach:
    return Attach(name=name, handle=handle, role=SENDER, initial_delivery_count=0, target=Target(address="q"))


def test_stealing_a_link_not_answered_yet_answers_it_then_detaches_it() -> None:
    # (a raw peer: our engine as the client would take the answer to its first attach, which
    # names the link, for the answer to the second)
    peer = RawPeer()
    peer.handshake()
    ss = peer.begin(0)
    assert ss is not None
    peer.send(0, raw_attach(0))
    peer.send(0, raw_attach(1))
    old_s, new_s = [e.link for e in of_type(peer.take_events(), RemoteAttach)]
    # The application sees both attaches; the first one was stolen before it could answer: the
    # engine did (null termini, as a refusal, transport 2.6.3), then detached it.
    assert old_s.state.local is CLOSED and new_s.state.local is UNINIT
    attach, detach = bodies(peer.output())
    assert isinstance(attach, Attach) and attach.name == "same" and attach.target is None
    assert isinstance(detach, Detach) and detach.handle == attach.handle and detach.closed
    assert detach.error.condition == E.STOLEN
    answer(new_s)
    (answered,) = bodies(peer.output())
    assert answered.handle != attach.handle and answered.target == Target(address="q")
    peer.send(0, Detach(handle=0, closed=True))
    assert [e.link for e in of_type(peer.take_events(), RemoteDetach)] == [old_s]
    assert ss.links == [new_s] and new_s.active


def test_stealing_before_our_begin_detaches_the_old_link_once_we_begin() -> None:
    peer = RawPeer()
    peer.handshake()
    ss = peer.begin(0, answer=False)
    assert ss is not None
    peer.send(0, raw_attach(0))
    peer.send(0, raw_attach(1))
    # begin, attach, attach before the application answered the begin: nothing may go out on
    # the session before our begin
    old_s, new_s = [e.link for e in of_type(peer.take_events(), RemoteAttach)]
    assert old_s.state.local is UNINIT and ss.links == [new_s, old_s]
    assert peer.output() == b""
    ss.begin()
    assert old_s.state.local is CLOSED and new_s.state.local is UNINIT
    begin, attach, detach = bodies(peer.output())
    assert isinstance(begin, Begin) and isinstance(attach, Attach) and attach.target is None
    assert isinstance(detach, Detach) and detach.closed and detach.error.condition == E.STOLEN
    answer(new_s)
    peer.send(0, Detach(handle=0, closed=True))
    assert ss.links == [new_s] and new_s.active


def test_stealing_a_receiver_mid_delivery_discards_the_rest_of_it() -> None:
    pair, cs, ss = connected_pair()
    old_c, old_s = attach_pair(pair, cs, ss, "same", credit=5)
    old_c.send_transfer(b"t", b"first part", more=True)
    pair.pump()
    new_c = attach_again(cs, old_c)
    # The rest of the delivery in flight on the old link, before the client hears of the steal.
    old_c.send_transfer(b"t", b"second part", more=True)
    old_c.send_transfer(b"t", b"last part")
    client_events, server_events = pair.pump()
    assert [type(e) for e in server_events] == [RemoteAttach]  # the old link's frames discarded
    new_s = server_events[0].link
    assert_stolen(of_type(client_events, RemoteDetach)[0])
    answer(new_s)
    new_s.flow(1)
    pair.pump()
    new_c.send_transfer(b"n", b"whole")  # the next delivery-id of the session: in sequence
    old_c.detach()
    _, server_events = pair.pump()
    assert not of_type(server_events, ProtocolViolation)
    (transfer,) = of_type(server_events, TransferReceived)
    assert transfer.link is new_s and bytes(transfer.payload) == b"whole"
    assert ss.links == [new_s] and ss.state.local is ACTIVE


def test_stealing_a_sender_mid_delivery_aborts_it() -> None:
    pair, cs, ss = connected_pair()
    old_c, old_s = attach_pair(pair, cs, ss, "same", client_sends=False, credit=5)
    old_s.send_transfer(b"t", b"first part", more=True)
    pair.pump()
    attach_again(cs, old_c)
    client_events, _ = pair.pump()
    assert old_s.out_delivery == -1
    aborted, detached = of_type(client_events, TransferReceived)[-1], of_type(client_events, RemoteDetach)[0]
    assert aborted.link is old_c and aborted.aborted and client_events.index(aborted) < client_events.index(detached)
    assert_stolen(detached)
    with pytest.raises(E.LocalUsageError):
        old_s.send_transfer(b"u", b"no more")


def test_a_name_the_peer_detached_can_be_attached_again_before_we_answer() -> None:
    pair, cs, ss = connected_pair()
    old_c, old_s = attach_pair(pair, cs, ss, "same")
    old_c.detach()
    del cs.links_by_name[("same", SENDER)]  # (our engine waits for the server's detach)
    new_c = cs.attach_sender("same", target=Target(address="same"))
    client_events, server_events = pair.pump()
    # Not a steal: the peer detached the old link; it only waits for our detach.
    assert [type(e) for e in server_events] == [RemoteDetach, RemoteAttach]
    new_s = server_events[1].link
    assert new_s is not old_s and not client_events
    old_s.detach()
    answer(new_s)
    client_events, _ = pair.pump()
    assert [e.link for e in client_events] == [old_c, new_c]
    assert client_events[0].error is None
    assert ss.links == [new_s] and cs.links == [new_c]


def test_stolen_links_awaiting_the_peer_still_hold_their_handles() -> None:
    # A peer that steals in a loop and never answers our detaches: each old link holds its
    # handle until it does, so handle-max bounds what the loop can make us keep.
    pair, cs, ss = connected_pair(server_begin={"handle_max": 3})
    link, _ = attach_pair(pair, cs, ss, "same")
    for _ in range(3):
        link = attach_again(cs, link)
        pair.pump()
        answer(ss.links_by_name[("same", RECEIVER)])
        pair.pump()
    assert len(ss.links) == 4 and len(ss.links_by_remote) == 4
    with pytest.raises(E.LocalUsageError):
        attach_again(cs, link)  # no handle left: the peer's handle-max (transport 2.7.2)
    for old in [l for l in cs.links_by_local.values() if l.state.remote is CLOSED]:
        old.detach()
    pair.pump()
    assert len(ss.links) == 1 and ss.displaced is None


# --- credit and delivery-count (transport §2.6.7) ----------------------------------------------


def test_credit_is_granted_and_consumed() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss)
    assert snd.credit == 0
    with pytest.raises(E.LocalUsageError):
        snd.send_transfer(b"t", b"x")
    rcv.flow(5)
    client_events, _ = pair.pump()
    assert of_type(client_events, FlowReceived)[0].link is snd
    assert snd.credit == 5
    for i in range(2):
        snd.send_transfer(b"t%d" % i, b"x")
    assert snd.credit == 3 and snd.delivery_count == 2
    pair.pump()
    assert rcv.credit == 3 and rcv.delivery_count == 2


def test_credit_is_absolute_not_additive() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=5)
    snd.send_transfer(b"a", b"x")
    snd.send_transfer(b"b", b"x")
    pair.pump()
    rcv.flow(10)
    pair.pump()
    assert snd.credit == 10  # 2 + 10 - 2
    rcv.flow(1)
    pair.pump()
    assert snd.credit == 1
    rcv.flow(0)
    pair.pump()
    assert snd.credit == 0


def test_credit_formula_with_transfers_in_flight() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=5)
    for i in range(3):
        snd.send_transfer(b"%d" % i, b"x")
    # The receiver grants again before it saw the three transfers: delivery-count(rcv) = 0.
    rcv.flow(5)
    to_client = pair.server.data_to_send()
    pair.client.receive_data(to_client, 0.0)
    # link-credit(snd) = delivery-count(rcv) + link-credit(rcv) - delivery-count(snd) = 0 + 5 - 3
    assert snd.credit == 2
    pair.pump()
    assert rcv.delivery_count == 3 and rcv.credit == 2
    assert len(of_type(pair.server_events, TransferReceived)) == 3


def test_reducing_credit_with_transfers_in_flight_handles_them_normally() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=5)
    for i in range(3):
        snd.send_transfer(b"%d" % i, b"x")
    rcv.flow(0)  # stop the sender, before the three transfers arrive
    client_events, server_events = pair.pump()
    # transport §2.6.7: the receiver MAY handle the excess normally; this engine does
    assert len(of_type(server_events, TransferReceived)) == 3
    assert not of_type(server_events, ProtocolViolation)
    assert rcv.credit == 0 and rcv.delivery_count == 3
    assert snd.credit == 0 and rcv.active and snd.active
    with pytest.raises(E.LocalUsageError):
        snd.send_transfer(b"more", b"x")
    rcv.flow(1)
    pair.pump()
    assert snd.credit == 1


def test_initial_delivery_count_sets_the_receivers_count() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, client_attach={"initial_delivery_count": 1000})
    assert rcv.delivery_count == 1000 and snd.delivery_count == 1000
    rcv.flow(4)
    pair.pump()
    assert snd.credit == 4
    snd.send_transfer(b"a", b"x")
    pair.pump()
    assert rcv.delivery_count == 1001 and rcv.credit == 3


def test_sender_link_flow_reports_available() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=1)
    snd.set_available(7)
    _, server_events = pair.pump()
    (flow,) = of_type(server_events, FlowReceived)
    assert flow.link is rcv and not flow.drained
    assert rcv.available == 7
    flows = [f for f in sent(pair, Flow) if f.handle is not None]
    assert flows[-1].available == 7 and flows[-1].link_credit == 1


def test_flow_is_only_for_receivers_and_drain_only_for_senders() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss)
    with pytest.raises(E.LocalUsageError):
        snd.flow(1)
    with pytest.raises(E.LocalUsageError):
        rcv.complete_drain()
    with pytest.raises(E.LocalUsageError):
        rcv.send_transfer(b"t", b"x")
    with pytest.raises(E.LocalUsageError):
        rcv.flow(-1)


def test_drain() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss)
    rcv.flow(5, drain=True)
    client_events, _ = pair.pump()
    (flow,) = of_type(client_events, FlowReceived)
    assert flow.link is snd and snd.drain and snd.credit == 5
    snd.send_transfer(b"a", b"x")
    snd.send_transfer(b"b", b"x")
    snd.complete_drain()
    assert snd.credit == 0 and snd.delivery_count == 5
    _, server_events = pair.pump()
    assert len(of_type(server_events, TransferReceived)) == 2
    (drained,) = of_type(server_events, FlowReceived)
    assert drained.drained and drained.link is rcv
    assert rcv.credit == 0 and rcv.delivery_count == 5 and not rcv.drain
    last_flow = [f for f in sent(pair, Flow) if f.handle is not None][-1]
    assert last_flow.delivery_count == 5 and last_flow.link_credit == 0
    # after the drain, new credit works from the advanced delivery-count
    rcv.flow(2)
    pair.pump()
    assert snd.credit == 2 and not snd.drain


def test_drain_with_no_messages() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss)
    rcv.flow(3, drain=True)
    pair.pump()
    snd.complete_drain()
    _, server_events = pair.pump()
    assert of_type(server_events, FlowReceived)[0].drained
    assert rcv.delivery_count == 3 and snd.delivery_count == 3


def test_echo() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss)
    rcv.flow(3, echo=True)
    client_events, server_events = pair.pump()
    assert of_type(client_events, FlowReceived)[0].link is snd
    (answer,) = of_type(server_events, FlowReceived)
    assert answer.link is rcv and not answer.drained
    (request,) = [f for f in sent(pair, Flow, to_server=False) if f.handle is not None]
    assert request.echo and request.link_credit == 3
    (reply,) = [f for f in sent(pair, Flow) if f.handle is not None]
    assert not reply.echo and reply.link_credit == 3 and reply.delivery_count == 0


def test_session_flow_echo() -> None:
    pair, cs, ss = connected_pair()
    pair.server.receive_data(frame(ss.remote_channel or 0, Flow(next_incoming_id=0, incoming_window=100, next_outgoing_id=0, outgoing_window=100, echo=True)), 0.0)
    flows = bodies(pair.server.data_to_send(), Flow)
    assert len(flows) == 1 and flows[0].handle is None and not flows[0].echo


def test_attach_too_big_for_the_peer_rolls_back_and_the_link_can_still_be_refused() -> None:
    # The client accepts only 512-byte frames; the server's echo of a long terminus address
    # cannot fit. The failed attach must leave the link unannounced, so reject() still works
    # (transport §2.6.3: a refusal is a null-terminus attach followed by a detach).
    pair, cs, ss = connected_pair(ConnectionConfig(container_id="c", max_frame_size=512))
    cs.attach_sender("big", target=Target(address="t" * 400))
    _, server_events = pair.pump()
    (remote_attach,) = of_type(server_events, RemoteAttach)
    link = remote_attach.link
    with pytest.raises(E.LocalUsageError):
        link.attach(source=Source(address="s" * 400), target=remote_attach.attach.target)
    assert link.state.local.name == "UNINIT" and link.local_handle is None
    link.reject(Error(condition="amqp:not-allowed", description="too big"))
    client_events, _ = pair.pump()
    (detach,) = of_type(client_events, RemoteDetach)
    assert detach.error is not None and detach.error.condition == "amqp:not-allowed"
