"""Source text shared by the programs benchmarks run in child processes (``python -c``)."""

#: fib(n) on four threads sized to about ``target`` events (a call and a return each): defines
#: fib, calls (fib's call count), n, rounds and work(); the program imports math and sets target.
FIB_ON_FOUR_THREADS = r"""
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
def calls(n):
    a, b = 1, 1
    for _ in range(n - 1):
        a, b = b, a + b + 1
    return b
n = 20
while 4 * 2 * calls(n + 1) <= target:
    n += 1
rounds = max(1, math.ceil(target / (4 * 2 * calls(n))))
def work():
    for _ in range(rounds):
        fib(n)
"""
