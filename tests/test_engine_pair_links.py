"""The connection engine against itself (two sans-IO engines back to back, EnginePair): links
(transport §2.6), credit and delivery-count (transport §2.6.7).

Nothing here does I/O or sleeps: bytes move by `pump()`, time is the `now` argument.
"""

from __future__ import annotations

import pytest

from router.amqp import errors as E
from router.amqp.connection import ConnectionConfig
from router.amqp.events import FlowReceived, ProtocolViolation, RemoteAttach, RemoteDetach, TransferReceived
from router.amqp.framing import frame
from router.amqp.messaging import Source, Target
from router.amqp.performatives import RCV_SECOND, RECEIVER, SENDER, SND_SETTLED, Error, Flow

from router.testing.enginepair import attach_pair, bodies, connected_pair, of_type

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
