"""JMS selectors (router.amqp.selector): the grammar, three-valued logic, bounds, round trips."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.amqp import selector as S
from router.amqp.selector import SelectorError, matches, parse, render
from router.amqp.selector_tokens import COMPARISONS, KEYWORDS


def check(text: str, **props: Any) -> bool:
    return matches(parse(text), props.get)


@pytest.mark.parametrize(
    "text, props, expected",
    [
        ("color = 'red'", {"color": "red"}, True),
        ("color = 'red'", {"color": "blue"}, False),
        ("color = 'red'", {}, False),
        ("NOT color = 'red'", {}, False),  # NOT unknown is unknown
        ("color <> 'red' OR weight > 5", {"weight": 6}, True),  # unknown OR true
        ("color <> 'red' AND weight > 5", {"weight": 6}, False),  # unknown AND true: unknown
        ("weight > 2500 AND weight <= 3000", {"weight": 3000}, True),
        ("weight * 2 + 1 = 7", {"weight": 3}, True),
        ("weight / 2 = 1", {"weight": 3}, True),  # integer division
        ("weight / 2 = 1.5", {"weight": 3.0}, True),
        ("-7 / 2 = -3", {}, True),  # truncated towards zero, as Java
        ("weight / 0 = 1", {"weight": 3}, False),
        ("9223372036854775807 + 1 = -9223372036854775808", {}, True),  # long wraps
        ("weight BETWEEN 1 AND 5", {"weight": 5}, True),
        ("weight NOT BETWEEN 1 AND 5", {"weight": 6}, True),
        ("weight NOT BETWEEN 1 AND 5", {}, False),
        ("name LIKE 'ab%'", {"name": "abc"}, True),
        ("name LIKE 'a_c'", {"name": "abc"}, True),
        ("name LIKE 'a_c'", {"name": "abbc"}, False),
        ("name LIKE '%b%c%'", {"name": "xxbyyc"}, True),
        ("name LIKE '%b%c'", {"name": "xxbyycd"}, False),
        ("name LIKE 'x!%y' ESCAPE '!'", {"name": "x%y"}, True),
        ("name LIKE 'x!%y' ESCAPE '!'", {"name": "xzy"}, False),
        ("name NOT LIKE 'ab%'", {"name": "xy"}, True),
        ("name LIKE 'a%'", {"name": 5}, False),
        ("name IN ('a', 'b')", {"name": "b"}, True),
        ("name NOT IN ('a', 'b')", {"name": "c"}, True),
        ("name NOT IN ('a', 'b')", {}, False),
        ("name IS NULL", {}, True),
        ("name IS NOT NULL", {"name": "x"}, True),
        ("flag", {"flag": True}, True),
        ("flag = TRUE", {"flag": True}, True),
        ("flag = false", {"flag": True}, False),
        ("color = 5", {"color": "5"}, False),  # unlike types compare false
        ("NOT color = 5", {"color": "5"}, True),
        ("'it''s' = quote", {"quote": "it's"}, True),
        ("1.5e1 = x", {"x": 15}, True),
        ("0x1F = x", {"x": 31}, True),
        ("amqp.subject = 'x'", {"amqp.subject": "x"}, True),
        ("a > 1 AND (b < 2 OR NOT c = 'z')", {"a": 2, "b": 3, "c": "y"}, True),
    ],
)
def test_selector_semantics(text: str, props: dict[str, Any], expected: bool) -> None:
    assert check(text, **props) is expected


@pytest.mark.parametrize(
    "text, position",
    [
        ("", 0), ("a =", 3), ("'open", 0), ("a LIKE 5", 7), ("a IN (1)", 6), ("a NOT 5", 6), ("a b", 2),
        ("1x", 1), ("a = 99999999999999999999", 4), ("a LIKE 'x!' ESCAPE '!'", 7), ("a # b", 2),
        ("a IS 5", 5), ("(a = 1", 6),
    ],
)
def test_invalid_selectors_name_the_position(text: str, position: int) -> None:
    with pytest.raises(SelectorError) as info:
        parse(text)
    assert info.value.position == position
    assert f"position {position}" in str(info.value)


def test_bounds_length_and_nesting() -> None:
    with pytest.raises(SelectorError, match="longer than"):
        parse("a = 1 OR " * 500 + "a = 1")
    with pytest.raises(SelectorError, match="nested deeper"):
        parse("(" * 40 + "a" + ")" * 40)
    with pytest.raises(SelectorError, match="nested deeper"):
        parse("NOT " * 40 + "a")
    # Long flat chains are fine and evaluate without deep recursion.
    long_chain = " AND ".join(["a = 1"] * 400)
    assert len(long_chain) < S.MAX_SELECTOR_CHARS
    assert matches(parse(long_chain), {"a": 1}.get)
    product = "x" + " * x" * 600
    assert evaluate_value(product, x=3) is not None  # wraps to 64 bits, does not grow


def evaluate_value(text: str, **props: Any) -> Any:
    value = S.evaluate(parse(text), props.get)
    assert value is None or -(1 << 63) <= value < (1 << 63)
    return value


def test_like_is_linear_on_hostile_patterns() -> None:
    value = "a" * 200_000
    assert not S.like(value, "%a%a%a%a%a%a%a%a%b", None)
    assert S.like(value + "b", "%a%a%a%a%a%a%a%a%b", None)
    # one-character wildcards inside a long segment: a scan with backtracking would take
    # len(value) * len(pattern) steps (10^8 here); the bit-parallel scan takes len(value)
    wide = "%" + "_a" * 1000 + "b%"
    assert not S.like("a" * 60_000, wide, None)
    assert S.like("a" * 60_000 + "b", wide, None)


# --- hypothesis: render/parse round trips, and nothing but SelectorError from any text ----------

_names = st.from_regex(r"[A-Za-z_$][A-Za-z0-9_$.]{0,8}", fullmatch=True).filter(lambda s: s.upper() not in KEYWORDS)
_literals = st.one_of(
    st.integers(min_value=S.LONG_MIN, max_value=S.LONG_MAX).map(lambda v: ("lit", v)),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda v: ("lit", v)),
    st.text(max_size=8).map(lambda v: ("lit", v)),
    st.booleans().map(lambda v: ("lit", v)),
)
_ids = _names.map(lambda n: ("id", n))


def _extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    def chain(ops: list[str]) -> st.SearchStrategy[Any]:  # one precedence level per chain, as parsed
        return st.tuples(st.just("arith"), inner, st.lists(st.tuples(st.sampled_from(ops), inner), min_size=1, max_size=3))

    return st.one_of(
        st.tuples(st.sampled_from(["and", "or"]), st.lists(inner, min_size=2, max_size=3)),
        st.tuples(st.just("not"), inner),
        st.tuples(st.just("neg"), _ids),
        st.tuples(st.just("cmp"), st.sampled_from(list(COMPARISONS)), inner, inner),
        chain(["+", "-"]),
        chain(["*", "/"]),
        st.tuples(st.just("between"), st.booleans(), inner, inner, inner),
        st.tuples(st.just("like"), st.booleans(), _ids, st.text(alphabet="ab%_!", max_size=6).filter(
            lambda p: not p.replace("!!", "").endswith("!")), st.sampled_from([None, "!"])),
        st.tuples(st.just("in"), st.booleans(), _ids, st.lists(st.text(max_size=4), min_size=1, max_size=3).map(tuple)),
        st.tuples(st.just("null"), st.booleans(), _ids),
    )


_trees = st.recursive(st.one_of(_literals, _ids), _extend, max_leaves=12)


@given(_trees)
def test_render_parse_round_trip(tree: Any) -> None:
    text = render(tree)
    parsed = parse(text)
    assert render(parsed) == text
    assert parse(render(parsed)) == parsed


@given(st.text(alphabet=st.sampled_from(list("abc019.'%_!()=<>+-*/, \tNOTANDORLIKEINSBTWUF\u00e9\u00b2")), max_size=60))
def test_any_text_parses_or_is_refused(text: str) -> None:
    try:
        node = parse(text)
    except SelectorError as exc:
        assert 0 <= exc.position <= len(text)
        return
    S.evaluate(node, {"a": 1, "b": "x", "c": None}.get)  # and evaluating never raises


@given(_trees, st.dictionaries(_names, st.one_of(st.none(), st.integers(), st.text(max_size=3), st.booleans(),
                                                 st.floats(allow_nan=False)), max_size=4))  # fmt: skip
def test_evaluation_is_three_valued_and_total(tree: Any, props: dict[str, Any]) -> None:
    value = S.evaluate(parse(render(tree)), props.get)
    node = parse(render(("not", tree)) if tree[0] not in ("lit", "id") else "NOT " + render(tree))
    negated = S.evaluate(node, props.get)
    if isinstance(value, bool):
        assert negated is (not value)
    else:
        assert negated is None
