"""Mobile addresses: this router's own set, the copies held of every other router's set, and the
address table published to the routing core.

Owns: the address-set digest (anti-entropy), the local set with its mobile seq and the staging of
changes into differential MAUs, the remote copies (seq, set, the owner's advertised seq and
digest, flood de-duplication), and the table address -> routers, which lists only routers the
current routes reach. Must not touch: instance/restart decisions (linkstate.py decides and calls
`forget`), request routing (node.py), routes, I/O.

Rules (reference §3.2 MAU/MAR; docs/mesh-protocol.md, "Mobile addresses"):
- seq 0 is the empty set, so a router that never had an address needs no request;
- a differential MAU N applies only on top of N-1; anything newer is a gap (request the full set);
- a full MAU replaces the copy when its seq is not older than the copy's;
- every MAU and RA carries the owner's digest at that seq: a copy at the same seq with another
  digest has drifted (skupper-router #473 in reference §9) and is re-fetched whole.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

from .messages import DIGEST_SIZE, MobileAddressUpdate

_MODULUS: Final = 1 << (8 * DIGEST_SIZE)
EMPTY_DIGEST: Final = bytes(DIGEST_SIZE)

Key = tuple[int, int]  # (instance, mobile seq): compared lexicographically


def address_hash(address: str) -> int:
    """BLAKE2b-128 of the UTF-8 address, as an integer."""
    data = address.encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=DIGEST_SIZE).digest(), "big")


class AddressSet:
    """A set of addresses with an order-independent digest kept up to date in O(1) per change:
    the sum of the members' address_hash modulo 2**128 (the empty set's digest is all zeros)."""

    __slots__ = ("_items", "_sum")

    def __init__(self, items: Iterable[str] = ()) -> None:
        self._items: set[str] = set()
        self._sum = 0
        for item in items:
            self.add(item)

    def add(self, address: str) -> bool:
        if address in self._items:
            return False
        self._items.add(address)
        self._sum = (self._sum + address_hash(address)) % _MODULUS
        return True

    def remove(self, address: str) -> bool:
        if address not in self._items:
            return False
        self._items.remove(address)
        self._sum = (self._sum - address_hash(address)) % _MODULUS
        return True

    @property
    def digest(self) -> bytes:
        return self._sum.to_bytes(DIGEST_SIZE, "big")

    def __contains__(self, address: object) -> bool:
        return address in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def digest_of(addresses: Iterable[str]) -> bytes:
    return AddressSet(addresses).digest


@dataclass(slots=True)
class _Copy:
    """What I hold of one remote router's addresses (for one instance of it)."""

    instance: int
    seq: int = 0
    addresses: AddressSet = field(default_factory=AddressSet)
    adv_seq: int = 0  # newest seq the owner is known to have reached, and its digest there
    adv_digest: bytes = EMPTY_DIGEST
    flooded: int = 0  # newest differential MAU seq passed on


class MobileDb:
    """Local and remote mobile addresses, and the published table (reachable routers only)."""

    def __init__(self) -> None:
        self.local = AddressSet()
        self.local_seq = 0
        self._staged: dict[str, bool] = {}  # address -> should be present after the next flush
        self._copies: dict[str, _Copy] = {}
        self._table: dict[str, set[str]] = {}
        self._reachable: frozenset[str] = frozenset()
        self._dirty: set[str] = set()

    # --- local ---------------------------------------------------------------------------------

    def stage(self, added: Iterable[str], removed: Iterable[str]) -> None:
        added, removed = list(added), list(removed)
        for address in (*added, *removed):
            if not isinstance(address, str) or not address:
                raise ValueError(f"addresses are non-empty strings: {address!r}")
        if set(added) & set(removed):
            raise ValueError(f"added and removed at once: {sorted(set(added) & set(removed))}")
        self._staged.update(dict.fromkeys(added, True))
        self._staged.update(dict.fromkeys(removed, False))

    @property
    def has_staged(self) -> bool:
        return bool(self._staged)

    def flush(self, router_id: str, instance: int) -> MobileAddressUpdate | None:
        """Apply staged changes: one differential MAU (seq + 1), or None if nothing changed."""
        added = tuple(sorted(a for a, keep in self._staged.items() if keep and a not in self.local))
        removed = tuple(sorted(a for a, keep in self._staged.items() if not keep and a in self.local))
        self._staged.clear()
        if not added and not removed:
            return None
        for address in added:
            self.local.add(address)
        for address in removed:
            self.local.remove(address)
        self.local_seq += 1
        return MobileAddressUpdate(
            router_id=router_id, instance=instance, mobile_seq=self.local_seq,
            digest=self.local.digest, added=added, removed=removed,
        )  # fmt: skip

    def own_full(self, router_id: str, instance: int) -> MobileAddressUpdate:
        return MobileAddressUpdate(
            router_id=router_id, instance=instance, mobile_seq=self.local_seq,
            digest=self.local.digest, exist=tuple(sorted(self.local)),
        )  # fmt: skip

    # --- remote copies ---------------------------------------------------------------------------

    def _copy(self, origin: str, instance: int) -> _Copy:
        copy = self._copies.get(origin)
        if copy is None:
            copy = self._copies[origin] = _Copy(instance)
        return copy

    def forget(self, origin: str) -> None:
        """Drop the copy of `origin` (removed, or restarted with a new instance)."""
        copy = self._copies.pop(origin, None)
        if copy is not None and origin in self._reachable:
            for address in copy.addresses:
                self._unpublish(origin, address)

    def advertised(self, origin: str, instance: int, seq: int, digest: bytes, *, owner: bool = False) -> None:
        """The owner reached `seq` with `digest`. `owner`: heard in the owner's own RA, which
        every router floods verbatim, so its digest overrides one relayed for the same seq (an
        LSU's, or a MAU's that was altered on the way): otherwise a wrong digest heard first
        would vouch for a wrong copy until the owner's seq moved on, and the drift would stay
        silent (skupper-router #473 in reference §9)."""
        copy = self._copy(origin, instance)
        if seq > copy.adv_seq or (owner and seq == copy.adv_seq):
            copy.adv_seq, copy.adv_digest = seq, digest

    def should_flood(self, origin: str, instance: int, seq: int) -> bool:
        """True the first time a differential MAU `seq` of `origin` is seen (pass it on)."""
        copy = self._copy(origin, instance)
        if seq <= copy.flooded:
            return False
        copy.flooded = seq
        return True

    def apply(self, origin: str, update: MobileAddressUpdate) -> str:
        """Apply a MAU: 'applied', 'old', 'gap' (differential beyond seq+1), 'drift' (applied,
        but the result's digest differs from the owner's) or 'corrupt' (a full set that does
        not match its own digest: ignored)."""
        copy = self._copy(origin, update.instance)
        if update.exist is not None:
            if update.mobile_seq < copy.seq:
                return "old"
            fresh = AddressSet(update.exist)
            if fresh.digest != update.digest:
                return "corrupt"
            self.advertised(origin, update.instance, update.mobile_seq, update.digest)
            self._replace(origin, copy, fresh)
            copy.seq = update.mobile_seq
            return "applied"
        if update.mobile_seq <= copy.seq:
            return "old"
        self.advertised(origin, update.instance, update.mobile_seq, update.digest)
        if update.mobile_seq != copy.seq + 1:
            return "gap"
        for address in update.added:
            if copy.addresses.add(address) and origin in self._reachable:
                self._publish(origin, address)
        for address in update.removed:
            if copy.addresses.remove(address) and origin in self._reachable:
                self._unpublish(origin, address)
        copy.seq = update.mobile_seq
        return "applied" if copy.addresses.digest == update.digest else "drift"

    def _replace(self, origin: str, copy: _Copy, fresh: AddressSet) -> None:
        if origin in self._reachable:
            for address in copy.addresses:
                if address not in fresh:
                    self._unpublish(origin, address)
            for address in fresh:
                if address not in copy.addresses:
                    self._publish(origin, address)
        copy.addresses = fresh

    def held_seq(self, origin: str) -> int:
        copy = self._copies.get(origin)
        return 0 if copy is None else copy.seq

    def advert(self, origin: str) -> tuple[int, bytes]:
        """The owner's newest known (seq, digest), relayed in LSUs."""
        copy = self._copies.get(origin)
        return (0, EMPTY_DIGEST) if copy is None else (copy.adv_seq, copy.adv_digest)

    def wanted(self, origin: str) -> Key | None:
        """The (instance, seq) a full copy is needed at: the owner is ahead, or drifted."""
        copy = self._copies.get(origin)
        if copy is None:
            return None
        if copy.adv_seq > copy.seq:
            return (copy.instance, copy.adv_seq)
        if copy.adv_seq == copy.seq and copy.adv_digest != copy.addresses.digest:
            return (copy.instance, copy.seq)
        return None

    def verified_key(self, origin: str) -> Key | None:
        """(instance, seq) of a copy known to equal the owner's set at that seq, else None."""
        copy = self._copies.get(origin)
        if copy is None or copy.adv_seq != copy.seq or copy.adv_digest != copy.addresses.digest:
            return None
        return (copy.instance, copy.seq)

    def full_update(self, origin: str) -> MobileAddressUpdate:
        copy = self._copies[origin]
        return MobileAddressUpdate(
            router_id=origin, instance=copy.instance, mobile_seq=copy.seq,
            digest=copy.addresses.digest, exist=tuple(sorted(copy.addresses)),
        )  # fmt: skip

    # --- the published table -----------------------------------------------------------------

    def set_reachable(self, reachable: frozenset[str]) -> None:
        """Publish the addresses of routers that became reachable, withdraw the others'."""
        before, self._reachable = self._reachable, reachable
        for origin in sorted(before - reachable):
            if origin in self._copies:
                for address in self._copies[origin].addresses:
                    self._unpublish(origin, address)
        for origin in sorted(reachable - before):
            if origin in self._copies:
                for address in self._copies[origin].addresses:
                    self._publish(origin, address)

    def _publish(self, origin: str, address: str) -> None:
        self._table.setdefault(address, set()).add(origin)
        self._dirty.add(address)

    def _unpublish(self, origin: str, address: str) -> None:
        routers = self._table.get(address)
        if routers is not None and origin in routers:
            routers.discard(origin)
            if not routers:
                del self._table[address]
            self._dirty.add(address)

    def table(self) -> dict[str, frozenset[str]]:
        return {address: frozenset(routers) for address, routers in sorted(self._table.items())}

    def routers_for(self, address: str) -> frozenset[str]:
        return frozenset(self._table.get(address, ()))

    @property
    def has_dirty(self) -> bool:
        return bool(self._dirty)

    def take_dirty(self) -> Mapping[str, frozenset[str]]:
        """Addresses whose router set changed since the last call, with the set now."""
        changes = {a: frozenset(self._table.get(a, ())) for a in sorted(self._dirty)}
        self._dirty.clear()
        return changes
