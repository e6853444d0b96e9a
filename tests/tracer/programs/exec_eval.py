"""exec and eval of source strings and of code objects, and functions they define."""

CODE = compile("def made(x):\n    return twice(x)\nresult = made(3)\n", "<made>", "exec")


def twice(x):
    return 2 * x


def work():
    ns = {"twice": twice}
    exec(CODE, ns)
    ns["made"](4)
    eval("twice(5)", {"twice": twice})
    exec("for i in range(2):\n    twice(i)\n", {"twice": twice})
    eval(compile("twice(1) + twice(2)", "<expr>", "eval"), {"twice": twice})
