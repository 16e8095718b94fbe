"""What source filters cost per message and consumer (router.amqp.filters, docs/addressing.md
"Filters"), without sockets: reading the fields a filter needs from a typical message's first
frame and evaluating each kind of filter, and the hostile cases the bounds are for (a 4096-
character selector, LIKE and topic patterns made for backtracking against a 60,000-item value).
Routing cost when no consumer has a filter is measured by bench/instructions.py (scenario 1).

Run with `python bench/filters.py`. Numbers are reported, never asserted.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.micro import _timeit  # noqa: E402
from router.amqp import filters as F  # noqa: E402
from router.amqp import selector as S  # noqa: E402
from router.amqp.message import Message, encode_message  # noqa: E402
from router.amqp.messaging import AmqpValue, Header, Properties  # noqa: E402
from router.amqp.msgfields import MessageFields  # noqa: E402
from router.amqp.types import Described, Symbol, UByte  # noqa: E402

PAYLOAD = encode_message(Message(
    header=Header(priority=UByte(6), durable=True), properties=Properties(message_id="id-1", subject="usd.stock.db"),
    application_properties={"color": "red", "weight": 2600, "region": "eu-west"}, body=AmqpValue(value="x" * 100),
))  # fmt: skip


def _filter(kind: str, value: Any) -> F.ConsumerFilter:
    parsed, _ = F.parse_filter_set({Symbol("f"): Described(Symbol(kind), value)})
    assert parsed is not None
    return parsed


def _per_message(wanted: F.ConsumerFilter) -> Callable[[], Any]:
    return lambda: wanted.matches(MessageFields(PAYLOAD))


def main() -> None:
    cases: list[tuple[str, Callable[[], Any]]] = [
        ("read fields only (MessageFields, nothing decoded)", lambda: MessageFields(PAYLOAD)),
        ("direct binding", _per_message(_filter(F.DIRECT, "usd.stock.db"))),
        ("topic binding *.stock.#", _per_message(_filter(F.TOPIC, "*.stock.#"))),
        ("headers binding (all, 2 keys)", _per_message(_filter(F.HEADERS, {"x-match": Symbol("all"), "color": "red", "region": None}))),
        ("selector: color = 'red' AND weight > 2500 AND JMSPriority > 4",
         _per_message(_filter(F.SELECTOR, "color = 'red' AND weight > 2500 AND JMSPriority > 4"))),
    ]  # fmt: skip
    long_selector = " OR ".join(f"weight = {i}" for i in range(330))[: S.MAX_SELECTOR_CHARS]
    long_selector = long_selector[: long_selector.rindex(" OR ")]
    cases.append((f"selector of {len(long_selector)} characters", _per_message(_filter(F.SELECTOR, long_selector))))
    wide_like = "%" + "_a" * 1000 + "b%"
    cases.append(("LIKE '%_a_a...b%' (2,000 wildcards) on 60,000 characters", lambda: S.like("a" * 60_000, wide_like, None)))
    wide_topic = F.topic_segments(["#"] + ["*", "a"] * 500 + ["b", "#"])
    words = ["a"] * 60_000
    cases.append(("topic '#.*.a...b.#' (1,000 words) on 60,000 words", lambda: S.glob_match(words, wide_topic)))
    print("source filters, per message and consumer (plain Python):")
    for name, fn in cases:
        print(f"  {_timeit(fn) * 1e6:12,.1f} µs  {name}")


if __name__ == "__main__":
    main()
