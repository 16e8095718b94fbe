"""ASCII-art topologies for route tests: text in, literal link states out.

One chain per line, routers and links alternating; an edge list is just one chain per line:

    A -1- B -3- C       A and B list each other at cost 1; B and C at cost 3
    A -1/5- B           asymmetric configuration: A's end costs 1, B's end 5 (the link costs 5)
    A -2-> B            a one-way claim: A lists B at cost 2, B does not list A
    A <-2- B            the same, from B to A
    E                   a router with no links (it has a link state with no peers)
    # a comment

Router ids are runs of letters, digits, `.`, `_` and `:`. A pair of routers may appear on
several lines; the last mention of an end wins. Every link state gets `seq` (1 by default).
"""

from __future__ import annotations

import re

from topology.graph import LinkState

_TOKEN = re.compile(
    r"\s*(?:"
    r"(?P<node>[A-Za-z0-9_.:]+)"
    r"|-(?P<left>\d+)(?:/(?P<right>\d+))?-(?P<arrow>>)?"
    r"|<-(?P<back>\d+)-"
    r")"
)


def parse_topology(text: str, *, seq: int = 1) -> dict[str, LinkState]:
    """The link states drawn in `text` (see the module docstring)."""
    peers: dict[str, dict[str, int]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        tokens = _tokens(line, number)
        if len(tokens) % 2 == 0 or any(kind != "node" for kind, _ in tokens[::2]):
            raise ValueError(f"line {number}: routers and links must alternate: {raw!r}")
        for _, name in tokens[::2]:
            peers.setdefault(str(name), {})
        for i in range(1, len(tokens), 2):
            a, b = str(tokens[i - 1][1]), str(tokens[i + 1][1])
            if a == b:
                raise ValueError(f"line {number}: {a} linked to itself")
            kind, costs = tokens[i]
            assert isinstance(costs, tuple)
            if kind in ("both", "forward"):
                peers[a][b] = costs[0]
            if kind == "both":
                peers[b][a] = costs[1]
            if kind == "back":
                peers[b][a] = costs[0]
    return {rid: LinkState(seq=seq, peers=p) for rid, p in peers.items()}


def _tokens(line: str, number: int) -> list[tuple[str, str | tuple[int, int]]]:
    tokens: list[tuple[str, str | tuple[int, int]]] = []
    pos = 0
    while pos < len(line):
        match = _TOKEN.match(line, pos)
        if match is None or match.end() == pos:
            raise ValueError(f"line {number}: cannot read {line[pos:]!r}")
        pos = match.end()
        if match["node"]:
            tokens.append(("node", match["node"]))
        elif match["back"]:
            cost = int(match["back"])
            tokens.append(("back", (cost, cost)))
        else:
            left = int(match["left"])
            right = int(match["right"]) if match["right"] else left
            if match["arrow"]:
                if match["right"]:
                    raise ValueError(f"line {number}: a one-way link has one cost")
                tokens.append(("forward", (left, left)))
            else:
                tokens.append(("both", (left, right)))
    return tokens


def ring(n: int, cost: int = 1, prefix: str = "R") -> dict[str, LinkState]:
    """A ring of `n` routers R00 -cost- R01 ... -cost- R00 (ids sort in ring order)."""
    width = len(str(n - 1))
    names = [f"{prefix}{i:0{width}d}" for i in range(n)]
    chain = f" -{cost}- ".join([*names, names[0]])
    return parse_topology(chain)
