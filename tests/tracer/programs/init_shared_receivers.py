"""__init__ functions whose first call in the session comes through another receiver than the
class a specialized `Cls(...)` site (3.13: CALL_ALLOC_AND_ENTER_INIT) then enters them for: a
__slots__ class sharing the function, a direct call, and an __init__ assigned to a class after it
was made, before and during the session; a __slots__ class made in the session whose __init__ a
class made after it shares, and a subclass of a class with empty __slots__. A control class with
its own __init__."""


def helper(x):
    return x


class SlottedBase:
    __slots__ = ("x",)

    def __init__(self, x):  # not inlinable for this class (__slots__): not watched at start
        self.x = helper(x)


def init_value(self, x):
    self.x = helper(x)


class Existing:
    pass


class EmptySlots:
    __slots__ = ()

    def __init__(self, x):  # empty __slots__: a subclass without __slots__ is inlinable
        helper(x)


class Control:
    def __init__(self, x):
        self.x = helper(x)


class Holder:
    pass


def work():
    # The slotted class calls the shared __init__ first; then a class made now shares it.
    for i in range(3):
        SlottedBase(i)

    class Shares:
        __init__ = SlottedBase.__init__

    for i in range(30):
        Shares(i)
    # A direct call first; then the function becomes an existing class's __init__.
    h = Holder()
    init_value(h, 1)
    Existing.__init__ = init_value
    for i in range(30):
        Existing(i)

    # The __init__ of a class made now, called directly first.
    class MadeNow:
        def __init__(self, x):
            self.x = helper(x)

    MadeNow.__init__(h, 2)
    for i in range(30):
        MadeNow(i)

    # A __slots__ class made now (its __init__ not watched), then a class sharing its __init__.
    class MadeSlotted:
        __slots__ = ("x",)

        def __init__(self, x):
            self.x = helper(x)

    MadeSlotted(0)

    class SharesMade:
        __init__ = MadeSlotted.__init__

    for i in range(30):
        SharesMade(i)
    EmptySlots(0)

    class FromEmpty(EmptySlots):
        pass

    for i in range(30):
        FromEmpty(i)
    for i in range(30):
        Control(i)


def warm():
    for i in range(5):
        Control(i)


def run(make_profile):
    warm()
    prof = make_profile()
    with prof:
        work()
    return prof
