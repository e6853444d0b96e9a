"""Recursive generators: a tree walked with yield from, several levels of suspended frames."""


class Node:
    def __init__(self, value, children=()):
        self.value = value
        self.children = list(children)


def walk(node):
    yield node.value
    for child in node.children:
        yield from walk(child)


def tree(depth):
    if depth == 0:
        return Node(0)
    return Node(depth, [tree(depth - 1), tree(depth - 1)])


def work():
    t = tree(3)
    total = 0
    for v in walk(t):
        total += v
    return total
