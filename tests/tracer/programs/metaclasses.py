"""Classes at work: a metaclass __call__/__new__/__init__, __init_subclass__, __set_name__,
__class_getitem__, a class body run during the session, __new__ returning another class."""


class Meta(type):
    def __new__(mcs, name, bases, ns):
        return super().__new__(mcs, name, bases, ns)

    def __call__(cls, *args):
        return super().__call__(*args)


class Field:
    def __set_name__(self, owner, name):
        self.name = name


class Base(metaclass=Meta):
    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        registered(cls)

    def __class_getitem__(cls, item):
        return cls

    def __init__(self, x):
        self.x = x


def registered(cls):
    return cls


class Other:
    pass


class Weird:
    def __new__(cls):
        return Other()

    def __init__(self):
        raise AssertionError("not called: __new__ returns another class")


def work():
    class Child(Base):
        f = Field()

        def __init__(self, x):
            super().__init__(x)

    Child(1)
    Base[int]
    Weird()
