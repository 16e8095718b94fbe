"""amqp10 (npm; an AMQP 1.0 client for Node.js written on its own, neither rhea nor Proton) as a
third-party client of a real `router run` process over loopback. Each scenario of
tests/amqp10/scenario.js runs as one Node.js process and prints what the client saw.

Messages through the router with the outcome seen by the sender (amqp10 resolves a send on the
settled disposition), the receiver attached before and after the sender, properties,
application properties, annotations and the body unchanged; rejected (with its error), released
and modified outcomes back to the sender; 1 MiB in many frames; a receiver granting one
message of credit at a time. Where amqp10 breaks the rules the router keeps them: it reckons one
credit more than it was granted (its attach says initial-delivery-count 1, its own count starts
at 0; transport §2.6.7), and the router detaches the link at the transfer beyond the credit
with amqp:link:transfer-limit-exceeded. Its receivers attach with max-message-size 10000: the
router sends them nothing larger (transport §2.7.3; docs/addressing.md, "Consumers'
max-message-size").

Skips cleanly when Node.js or the package is missing: `npm install --prefix tests/amqp10`
installs it (tests/amqp10/package.json; .ci/run does).
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from .support.router_process import RouterProcess, watched

HERE = Path(__file__).resolve().parent / "amqp10"
NODE = shutil.which("node")
MiB = 1024 * 1024

pytestmark = [
    pytest.mark.interop,
    pytest.mark.process,
    pytest.mark.skipif(NODE is None, reason="Node.js is not installed"),
    pytest.mark.skipif(not (HERE / "node_modules" / "amqp10" / "package.json").exists(),
                       reason="amqp10 is not installed (npm install --prefix tests/amqp10)"),
]


@pytest.fixture(scope="module")
def shared_router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterProcess]:
    config = {
        "router": {"id": "amqp10-interop"},
        "listeners": [
            {"name": "amqp", "port": 0},  # link_capacity 1000, max_frame_size 65536 (the defaults)
            {"name": "small", "port": 0, "link_capacity": 10},
        ],
    }
    with RouterProcess.running(tmp_path_factory.mktemp("router"), config) as router:
        yield router


@pytest.fixture
def router(shared_router: RouterProcess) -> Iterator[RouterProcess]:
    """The module's router; the test fails if the router logged an error while it ran."""
    yield from watched(shared_router)


async def scenario(router: RouterProcess, name: str, listener: str = "amqp") -> dict[str, Any]:
    assert NODE is not None
    address = f"amqp10.{name}.{uuid.uuid4().hex[:8]}"
    with trio.fail_after(20):
        done = await trio.run_process(
            [NODE, str(HERE / "scenario.js"), "127.0.0.1", str(router.ports[listener]), name, address],
            capture_stdout=True, capture_stderr=True, check=False,
        )  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    result: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert "error" not in result, result["error"]
    return result


async def test_round_trip_keeps_every_section(router: RouterProcess) -> None:
    """A receiver first, then a sender: five messages, each accepted, each arriving with its
    header, properties, application properties and annotations. amqp10 names links after
    their address (ADDRESS_<uuid>)."""
    result = await scenario(router, "roundtrip")
    assert result["sends"] == [{"outcome": "accepted"}] * 5
    for i, m in enumerate(result["received"]):
        assert m["body"] == {"n": i, "text": f"message {i}"}
        assert m["header"]["durable"] is True and m["header"]["priority"] == 6
        p = m["properties"]
        assert (p["messageId"], p["subject"], p["replyTo"], p["correlationId"], p["contentType"]) == (
            f"m{i}", "subj", "replies", f"c{i}", "application/json")  # fmt: skip
        assert m["applicationProperties"] == {"i": i, "flag": True, "name": "nom"}
        assert m["messageAnnotations"] == {"x-opt-amqp10": i}
    assert result["receiver_name"].startswith("amqp10.roundtrip.") and result["sender_name"] != result["receiver_name"]


async def test_sender_attached_before_the_receiver(router: RouterProcess) -> None:
    """The sender attaches to an address with no consumer: no credit, and amqp10 (which keeps
    the credit rules here) holds its sends. A receiver attaches: credit comes, they go, and each
    is accepted."""
    result = await scenario(router, "sender_first")
    assert result["credit_before"] == 0
    assert result["sends"] == [{"outcome": "accepted"}] * 3
    assert result["received"] == ["early 0", "early 1", "early 2"]


async def test_rejected_released_and_modified_reach_the_sender(router: RouterProcess) -> None:
    """The receiver (in its "settleOnDisposition" mode: it asks for rcv-settle-mode second, which
    the router grants, yet it settles first, which the router takes) gives each outcome in
    turn; the sender gets each, the rejected one as a failed send with its error."""
    result = await scenario(router, "outcomes")
    assert result["receiver_rcv_settle_mode"] == 1
    accepted, rejected, released, modified = result["sends"]
    assert accepted["outcome"] == "accepted" and released["outcome"] == "released"
    assert rejected == {"error": "amqp:invalid-field", "description": "no good"}
    assert modified["outcome"] == "modified"
    assert [f["value"] for f in modified["state"]["value"][:2]] == [True, True]  # delivery-failed, undeliverable-here


async def test_one_mebibyte_message_in_many_frames(router: RouterProcess) -> None:
    result = await scenario(router, "large")
    assert result["sends"] == [{"outcome": "accepted"}]
    assert result["same"] is True and result["length"] == MiB


async def test_one_message_of_credit_at_a_time_gets_everything(router: RouterProcess) -> None:
    result = await scenario(router, "credit_one")
    assert result["received"] == list(range(1, 21))
    assert result["sends"] == [{"outcome": "accepted"}] * 20


async def test_a_transfer_beyond_the_credit_detaches_the_link(router: RouterProcess) -> None:
    """Link capacity 10 and a consumer that grants none: the router gives the sender a window of
    10. amqp10's attach says initial-delivery-count 1 but it counts its deliveries from 0, so it
    believes it has 11 and sends an eleventh (transport §2.6.7: it must not). The router
    detaches the link with amqp:link:transfer-limit-exceeded; amqp10 fails every send still
    unsettled with that error. The router goes on (the next tests use it)."""
    result = await scenario(router, "window", "small")
    assert result["initial_delivery_count"] == 1
    assert result["detach_error"] == "amqp:link:transfer-limit-exceeded"
    assert {s["error"]["condition"] for s in result["sends"]} == {"amqp:link:transfer-limit-exceeded"}


async def test_a_message_over_the_receivers_max_message_size_is_not_sent_to_it(router: RouterProcess) -> None:
    """amqp10's receiver attaches with max-message-size 10000 (its default). A 20000-byte
    message must not be delivered on that link (transport §2.7.3: the limit of the link
    endpoint; a delivery over it is a message-size-exceeded link error): it is the only
    consumer, so the sender's message is rejected with that condition; a small one after it
    is delivered on the same link, which was never detached."""
    result = await scenario(router, "too_large")
    assert result["receiver_max_message_size"] == 10000
    assert result["received"] == ["small"], result
    big, small = result["sends"]
    assert big["error"]["condition"] == "amqp:link:message-size-exceeded", result
    assert big["error"]["description"].startswith("message of 20008 bytes is larger than the max-message-size "
                                                  "of every consumer of amqp10.too_large.")  # fmt: skip
    assert small == {"outcome": "accepted"}
    assert "receiver_error" not in result
