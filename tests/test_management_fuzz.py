"""Random management requests: every one gets a reply (an error or a success, never a 500 and
never silence) and the node keeps serving.

Requests mix what the dialects look for (operation, type, name, identity, entityType, offset,
count; method subjects, request-targets, Accept, Content-Type, If-Match) with arbitrary AMQP
values, in the application properties, the subject, properties.to and the body. Two layers:
- sans-IO, through a real RouterCore (tests/support/mgmt.py), many examples: the reply's
  status is checked against the codes the dialects may answer;
- over a socket, against a `router run` process, with python-qpid-proton encoding the
  requests (a codec we did not write): fewer examples, then the process must still answer and
  stop cleanly.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from proton import Message as ProtonMessage
from proton.utils import BlockingConnection

from router.config.models import RouterConfig, RouterSection

from .strategies import scalars, values
from .support.management import ProcessRouter, router_with_http
from .support.mgmt import NO_BODY, MgmtHarness, StubControl

OPERATION_STATUSES = {200, 201, 204, 400, 404, 406, 409, 415, 501}  # the dialect maps 405 -> 501, 410 -> 404
WD14_STATUSES = {200, 201, 204, 304, 400, 404, 405, 406, 409, 410, 415, 501}

OPERATIONS = ("CREATE", "READ", "UPDATE", "DELETE", "QUERY", "GET-TYPES", "GET-ATTRIBUTES", "GET-OPERATIONS",
              "GET-ANNOTATIONS", "GET-MGMT-NODES", "query", "FROBNICATE", "")  # fmt: skip
TYPES = ("router", "listener", "connector", "address", "router.config.address", "router.address", "connection",
         "router.link", "router.node", "log", "org.amqp.management", "org.apache.qpid.dispatch.router.address",
         "queue", "")  # fmt: skip
NAMES = ("amqp", "listener/amqp", "R1", "M0$management", "$management", "log/DEFAULT", "address/0", "self", "x")
METHODS = ("GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS", "PATCH", "get", "")
TARGETS = ("$management", "$management/listener", "$management/listener/listener%2Famqp", "$management/types",
           "$management/types/log", "$management/entities", "$management/address?$top=1&$skip=x",
           "_topo/0/R1/$management/router.address", "router/R1", "$management/a/b/c", "amqp:/$management/log")  # fmt: skip
MEDIA = ("application/amqp-management+amqp", "application/json", "*/*", "text/plain", "garbage;q=x")
KEYS = ("operation", "type", "name", "identity", "entityType", "offset", "count", "http:request", "Accept",
        "Content-Type", "If-Match", "If-None-Match")  # fmt: skip
ATTRIBUTES = ("name", "prefix", "pattern", "distribution", "port", "linkCapacity", "enable", "type", "identity",
              "tag", "attributeNames", "saslMechanisms", "cost")  # fmt: skip

meaningful = st.sampled_from(OPERATIONS + TYPES + NAMES + METHODS + MEDIA + ("1.1", "*", '"stale"', 0, 2, -1))
anything = st.one_of(meaningful, scalars)
attribute_maps = st.dictionaries(st.one_of(st.sampled_from(ATTRIBUTES), st.text(max_size=8)),
                                 st.one_of(meaningful, values), max_size=5)  # fmt: skip
bodies = st.one_of(st.just(NO_BODY), values, attribute_maps)


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(strategy, anything)


# (application properties, body, subject, to, content type)
Request = tuple[dict[Any, Any] | None, Any, str | None, str | None, str | None]

operation_requests: st.SearchStrategy[Request] = st.tuples(
    st.fixed_dictionaries(
        {"operation": st.sampled_from(OPERATIONS)},  # random ones: random_requests
        optional={"type": _maybe(st.sampled_from(TYPES)), "name": _maybe(st.sampled_from(NAMES)),
                  "identity": _maybe(st.sampled_from(NAMES)), "entityType": _maybe(st.sampled_from(TYPES)),
                  "offset": anything, "count": anything},
    ),  # fmt: skip
    bodies, st.none(), st.none(), st.none(),
)
wd14_requests: st.SearchStrategy[Request] = st.tuples(
    st.fixed_dictionaries(
        {"http:request": st.just("1.1")},
        optional={"Accept": st.sampled_from(MEDIA), "If-Match": anything, "If-None-Match": anything},
    ),
    bodies, st.sampled_from(METHODS), st.sampled_from(TARGETS), st.one_of(st.none(), st.sampled_from(MEDIA)),
)  # fmt: skip
random_requests: st.SearchStrategy[Request] = st.tuples(
    st.one_of(st.none(), st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), anything, max_size=6)),
    bodies, st.one_of(st.none(), st.text(max_size=12)), st.one_of(st.none(), st.text(max_size=30)),
    st.one_of(st.none(), st.sampled_from(MEDIA)),
)  # fmt: skip
requests = st.one_of(operation_requests, wd14_requests, random_requests)


@pytest.fixture(autouse=True)
def keep_log_levels() -> Iterator[None]:
    """A random UPDATE of a `log` entity changes this process's loggers: put them back."""
    loggers = [logging.getLogger("router")] + [
        logger for name, logger in logging.root.manager.loggerDict.items()
        if name.startswith("router.") and isinstance(logger, logging.Logger)
    ]  # fmt: skip
    levels = [logger.level for logger in loggers]
    yield
    for logger, level in zip(loggers, levels):
        logger.setLevel(level)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=requests)
def test_every_random_request_is_answered(request: Request) -> None:
    app, body, subject, to, content_type = request
    m = MgmtHarness(RouterConfig(router=RouterSection(id="R1")), control=StubControl())
    reply = m.request(app, body, subject=subject, to=to, content_type=content_type)
    props = reply.application_properties or {}
    if app is not None and "operation" in app:
        status = props["statusCode"]
        assert status in OPERATION_STATUSES and isinstance(props["statusDescription"], str), props
    else:
        assert reply.properties is not None and reply.properties.subject is not None
        status = int(reply.properties.subject)
        assert status in WD14_STATUSES and props["http:response"] == "1.1", (status, reply.body_value)
    assert m.op("QUERY", {}, entityType="router")[0] == 200  # the node carries on


# --- over a socket, Proton encoding ------------------------------------------------------------------------

# Values Proton encodes as AMQP (the codec cross-checks are in test_codec_proton.py).
proton_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), st.text(max_size=20),
    st.binary(max_size=20), st.uuids(),
)  # fmt: skip
proton_values = st.recursive(
    proton_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8,
)
# The process's own listeners and logging stay as they are: no listener or log entity is named.
SAFE_TYPES = tuple(t for t in TYPES if t not in ("listener", "log"))
socket_properties = st.dictionaries(
    st.sampled_from(KEYS),
    st.one_of(st.sampled_from(OPERATIONS + SAFE_TYPES + NAMES + METHODS + MEDIA), proton_scalars),
    max_size=5,
)


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessRouter]:
    with router_with_http(tmp_path_factory.mktemp("fuzz"), "fuzz-router") as proc:
        yield proc


@pytest.fixture(scope="module")
def proton_session(router: ProcessRouter) -> Iterator[tuple[Any, Any, str]]:
    conn = BlockingConnection(f"127.0.0.1:{router.amqp_port}", timeout=10)
    replies = conn.create_receiver(None, dynamic=True)
    requests = conn.create_sender("$management")
    yield requests, replies, replies.remote_source.address
    conn.close()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(app=socket_properties, body=proton_values, subject=st.one_of(st.none(), st.sampled_from(METHODS)),
       to=st.one_of(st.none(), st.sampled_from(TARGETS)))  # fmt: skip
def test_random_requests_over_a_socket_with_proton(proton_session: tuple[Any, Any, str], app: dict[str, Any],
                                                   body: Any, subject: str | None, to: str | None) -> None:  # fmt: skip
    requests, replies, reply_to = proton_session
    request = ProtonMessage(properties=app, body=body, subject=subject, address=to, reply_to=reply_to, id="fuzz")
    requests.send(request, timeout=10)
    reply = replies.receive(timeout=10)
    assert reply.correlation_id == "fuzz"
    if "operation" in app:
        assert reply.properties["statusCode"] in OPERATION_STATUSES
    else:
        assert int(reply.subject) in WD14_STATUSES


def test_the_router_still_serves_after_the_fuzz(router: ProcessRouter, proton_session: tuple[Any, Any, str]) -> None:
    requests, replies, reply_to = proton_session
    query = ProtonMessage(properties={"operation": "READ", "type": "router", "name": router.id},
                          body={}, reply_to=reply_to, id="after")  # fmt: skip
    requests.send(query, timeout=10)
    reply = replies.receive(timeout=10)
    assert reply.properties["statusCode"] == 200 and reply.body["id"] == router.id
    assert router.process.proc is not None and router.process.proc.poll() is None
    assert not [line for line in router.process.stderr if "Traceback" in line or "ERROR" in line], router.process.output


def test_a_handler_bug_is_answered_500_not_raised() -> None:
    """A handler bug is answered 500 and logged; the fuzz above asserts no 500 came back, and
    this checks the guard itself still turns an exception into a reply."""
    m = MgmtHarness()

    def broken(*_: Any) -> Any:
        raise RuntimeError("boom")

    m.node._operations = broken
    status, description, _ = m.op("QUERY", {}, entityType="router")
    assert status == 500 and "RuntimeError: boom" in description
