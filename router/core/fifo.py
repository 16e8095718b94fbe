"""Fifo: the first-in first-out queues of deliveries waiting for credit.

Owns: the queue an address keeps of the anycast deliveries that wait for a consumer's credit
(AddressEntry.pending) and the one a consumer link keeps of the deliveries waiting for its own
(OutLink.pending). A deque's methods, truth and length are generic calls when compiled (~175
instructions for an append or a popleft, ~30 for a truth test), and a fifth of the deliveries
of a fast producer to a consumer that grants credit in batches wait: here they are native calls
on a list and the index of its head.
Must not touch: what waits or why (router.core.waiting, sending, multicast).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final, Generic, TypeVar

from mypy_extensions import i64

T = TypeVar("T")
COMPACT_AT: Final = 256  # taken items at the front that are dropped at once


class Fifo(Generic[T]):
    __slots__ = ("_items", "_head")

    def __init__(self) -> None:
        # The queue is _items[_head:]; the slots before _head were taken (None, so that a taken
        # item is not kept alive by the queue).
        self._items: list[Any] = []
        self._head: i64 = 0

    def __len__(self) -> int:
        return len(self._items) - self._head

    def __bool__(self) -> bool:
        return len(self._items) > self._head

    def __iter__(self) -> Iterator[T]:
        """The items in order (a snapshot: the caller may change the queue meanwhile)."""
        return iter(self._items[self._head :])

    def append(self, item: T) -> None:
        self._items.append(item)

    def popleft(self) -> T:
        """The first item, removed (IndexError when there is none)."""
        items = self._items
        head = self._head
        if head >= len(items):
            raise IndexError("pop from an empty Fifo")
        item: T = items[head]
        head += 1
        if head == len(items):
            items.clear()
            head = 0
        elif head >= COMPACT_AT and head * 2 >= len(items):
            del items[:head]
            head = 0
        else:
            items[head - 1] = None
        self._head = head
        return item

    def push_front(self, items: list[T]) -> None:
        """Put `items` back at the front, in their order (those taken and passed over)."""
        if items:
            self._items[self._head : self._head] = items

    def clear(self) -> None:
        self._items.clear()
        self._head = 0
