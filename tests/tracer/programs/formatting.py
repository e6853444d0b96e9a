"""Formatting that calls Python: __format__, __repr__ and __str__ through f-strings, str(),
format(), % and print() into a StringIO."""

import io


class Money:
    def __init__(self, v):
        self.v = v

    def __format__(self, spec):
        return format(self.v, spec)

    def __repr__(self):
        return f"Money({self.v!r})"

    def __str__(self):
        return f"${self.v}"


def work():
    m = Money(3)
    f"{m:>5} {m!r} {m!s}"
    str(m)
    "{} {!r}".format(m, m)
    "%s %r" % (m, m)
    buf = io.StringIO()
    print(m, [m], file=buf)
