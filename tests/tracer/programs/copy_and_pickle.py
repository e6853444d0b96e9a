"""C code calling Python methods: copy.deepcopy with __deepcopy__ and __reduce_ex__, pickle with
__getstate__/__setstate__, json with a default function."""

import copy
import json
import pickle


class Custom:
    def __init__(self, v):
        self.v = v

    def __deepcopy__(self, memo):
        return Custom(copy.deepcopy(self.v, memo))


class State:
    def __init__(self):
        self.v = 1

    def __getstate__(self):
        return {"v": self.v}

    def __setstate__(self, state):
        self.v = state["v"]


def default(o):
    return o.v


def work():
    copy.deepcopy([Custom([1, 2]), {"k": Custom(3)}])
    pickle.loads(pickle.dumps(State()))
    json.dumps({"a": State()}, default=default)
    copy.copy(State())
