"""Generated code: dataclass methods (made by exec when the class is created), namedtuple
methods, and a dataclass defined during the session."""

import dataclasses
from collections import namedtuple

Pair = namedtuple("Pair", "a b")


@dataclasses.dataclass(order=True)
class Item:
    name: str
    qty: int = 0

    def __post_init__(self):
        self.qty = normalize(self.qty)


def normalize(q):
    return max(q, 0)


def work():
    items = [Item("b", 2), Item("a", -1)]
    sorted(items)
    items[0] == items[1]
    repr(items[0])
    p = Pair(1, 2)
    p._replace(a=3)
    Pair._make([4, 5])

    @dataclasses.dataclass
    class Local:
        x: int

    Local(1) == Local(1)
