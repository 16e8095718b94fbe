"""Address forms and prefix/pattern matching (configuring-address-semantics in the anchors)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from router.core.addressing import AddressMatcher, Kind, classify, pattern_matches, prefix_matches, words


def test_classify_forms() -> None:
    assert classify("orders", "R1").kind is Kind.MOBILE
    assert classify("_local/$management", "R1") == classify("_topo/0/R1/$management", "R1")
    assert classify("_local/x", "R1").key == "x"
    other = classify("_topo/0/R2/temp.abc", "R1")
    assert (other.kind, other.router, other.key) == (Kind.ROUTER, "R2", "temp.abc")
    assert classify("_topo/0/all/qdrouter", "R1").kind is Kind.ALL_ROUTERS
    assert classify("amqp:/orders", "R1").key == "orders"
    assert classify("amqp://host:5672/orders", "R1").key == "orders"
    assert classify("amqps://host:5671/orders", "R1").key == "orders"  # (uamqp's form)
    assert classify("amqps:/orders", "R1").key == "orders"
    assert classify("amqpx", "R1").key == "amqpx" and classify("amqps", "R1").key == "amqps"
    assert classify("_topo/1/R2/x", "R1").kind is Kind.MOBILE  # other areas are not supported


def test_prefix_matches_whole_words_only() -> None:
    assert prefix_matches("orders", "orders")
    assert prefix_matches("orders", "orders.eu")
    assert prefix_matches("orders", "orders/eu")
    assert not prefix_matches("orders", "ordersx")
    assert prefix_matches("a/b/", "a/b/c")


def test_pattern_words() -> None:
    def m(p: str, a: str) -> bool:
        return pattern_matches(words(p), words(a))

    assert m("events/#", "events")
    assert m("events/#", "events/a/b.c")
    assert m("events/*", "events/a")
    assert not m("events/*", "events")
    assert not m("events/*", "events/a/b")
    assert m("a/#/z", "a/z") and m("a/#/z", "a/b/c/z") and not m("a/#/z", "a/b/c")
    assert m("*.*", "a/b") and not m("*.*", "a")
    assert m("#", "anything/at.all")


def test_most_specific_rule_wins() -> None:
    matcher: AddressMatcher[str] = AddressMatcher()
    matcher.add_pattern("#", "catch-all")
    matcher.add_prefix("orders", "orders-prefix")
    matcher.add_pattern("orders/eu/*", "eu-pattern")
    matcher.add_pattern("orders/*", "one-word")
    assert matcher.lookup("orders") == "orders-prefix"
    assert matcher.lookup("orders/us") == "orders-prefix"  # prefix beats an equally literal pattern
    assert matcher.lookup("orders/eu/paris") == "eu-pattern"
    assert matcher.lookup("shipping") == "catch-all"
    matcher.remove("catch-all")
    assert matcher.lookup("shipping") is None


word = st.text(alphabet="abc", min_size=1, max_size=3)


@given(st.lists(word, min_size=1, max_size=5), st.sampled_from(["/", "."]))
def test_prefix_is_pattern_with_trailing_hash(parts: list[str], sep: str) -> None:
    # The anchors' rule: prefix a/b/c is the pattern a/b/c/#.
    address = sep.join(parts)
    for cut in range(1, len(parts) + 1):
        prefix = sep.join(parts[:cut])
        assert prefix_matches(prefix, address) == pattern_matches(words(prefix) + ["#"], words(address))
