"""DeltaBlue: an incremental one-way constraint solver (as pyperformance's deltablue)."""

from __future__ import annotations

from typing import Optional

#: Chain length / projection size, and test rounds per run.
SIZE = 100
ROUNDS = 100


class Strength:
    def __init__(self, rank: int, name: str) -> None:
        self.rank = rank  # 0 is the strongest
        self.name = name

    def stronger(self, other: Strength) -> bool:
        return self.rank < other.rank

    def weaker(self, other: Strength) -> bool:
        return self.rank > other.rank

    def weakest_of(self, other: Strength) -> Strength:
        return self if self.weaker(other) else other

    def next_weaker(self) -> Strength:
        return STRENGTHS[min(self.rank + 1, len(STRENGTHS) - 1)]


STRENGTHS = [
    Strength(i, name)
    for i, name in enumerate(
        ("required", "strong preferred", "preferred", "strong default", "normal",
         "weak default", "weakest"))
]
REQUIRED, STRONG_PREFERRED, PREFERRED, STRONG_DEFAULT, NORMAL, WEAK_DEFAULT, WEAKEST = STRENGTHS

NONE, FORWARD, BACKWARD = 0, 1, -1


class Variable:
    def __init__(self, name: str, value: float = 0) -> None:
        self.name = name
        self.value = value
        self.constraints: list[Constraint] = []
        self.determined_by: Optional[Constraint] = None
        self.mark = 0
        self.walk_strength = WEAKEST
        self.stay = True

    def add_constraint(self, c: Constraint) -> None:
        self.constraints.append(c)

    def remove_constraint(self, c: Constraint) -> None:
        self.constraints.remove(c)
        if self.determined_by is c:
            self.determined_by = None


class Constraint:
    def __init__(self, planner: Planner, strength: Strength) -> None:
        self.planner = planner
        self.strength = strength

    # Subclasses define these.
    def add_to_graph(self) -> None:
        raise NotImplementedError

    def remove_from_graph(self) -> None:
        raise NotImplementedError

    def choose_method(self, mark: int) -> None:
        raise NotImplementedError

    def is_satisfied(self) -> bool:
        raise NotImplementedError

    def mark_inputs(self, mark: int) -> None:
        raise NotImplementedError

    def mark_unsatisfied(self) -> None:
        raise NotImplementedError

    def output(self) -> Variable:
        raise NotImplementedError

    def recalculate(self) -> None:
        raise NotImplementedError

    def inputs_known(self, mark: int) -> bool:
        raise NotImplementedError

    def execute(self) -> None:
        raise NotImplementedError

    def is_input(self) -> bool:
        return False

    def add(self) -> None:
        self.add_to_graph()
        self.planner.incremental_add(self)

    def destroy(self) -> None:
        if self.is_satisfied():
            self.planner.incremental_remove(self)
        else:
            self.remove_from_graph()

    def satisfy(self, mark: int) -> Optional[Constraint]:
        """Tries to satisfy this constraint; returns the constraint it overrode, if any."""
        self.choose_method(mark)
        if not self.is_satisfied():
            if self.strength is REQUIRED:
                raise RuntimeError("deltablue: could not satisfy a required constraint")
            return None
        self.mark_inputs(mark)
        out = self.output()
        overridden = out.determined_by
        if overridden is not None:
            overridden.mark_unsatisfied()
        out.determined_by = self
        if not self.planner.add_propagate(self, mark):
            raise RuntimeError("deltablue: cycle encountered")
        out.mark = mark
        return overridden


class UnaryConstraint(Constraint):
    def __init__(self, planner: Planner, v: Variable, strength: Strength) -> None:
        super().__init__(planner, strength)
        self.my_output = v
        self.satisfied = False
        self.add()

    def add_to_graph(self) -> None:
        self.my_output.add_constraint(self)
        self.satisfied = False

    def remove_from_graph(self) -> None:
        self.my_output.remove_constraint(self)
        self.satisfied = False

    def choose_method(self, mark: int) -> None:
        out = self.my_output
        self.satisfied = out.mark != mark and self.strength.stronger(out.walk_strength)

    def is_satisfied(self) -> bool:
        return self.satisfied

    def mark_inputs(self, mark: int) -> None:
        pass

    def mark_unsatisfied(self) -> None:
        self.satisfied = False

    def output(self) -> Variable:
        return self.my_output

    def recalculate(self) -> None:
        self.my_output.walk_strength = self.strength
        self.my_output.stay = not self.is_input()
        if self.my_output.stay:
            self.execute()

    def inputs_known(self, mark: int) -> bool:
        return True

    def execute(self) -> None:
        pass


class StayConstraint(UnaryConstraint):
    """Keeps a variable at its value (the planner must not change it)."""


class EditConstraint(UnaryConstraint):
    """Marks a variable the user changes (an input of plans)."""

    def is_input(self) -> bool:
        return True


class BinaryConstraint(Constraint):
    def __init__(self, planner: Planner, v1: Variable, v2: Variable, strength: Strength,
                 add: bool = True) -> None:
        super().__init__(planner, strength)
        self.v1 = v1
        self.v2 = v2
        self.direction = NONE
        if add:
            self.add()

    def choose_method(self, mark: int) -> None:
        v1, v2, s = self.v1, self.v2, self.strength
        if v1.mark == mark:
            ok = v2.mark != mark and s.stronger(v2.walk_strength)
            self.direction = FORWARD if ok else NONE
        elif v2.mark == mark:
            ok = v1.mark != mark and s.stronger(v1.walk_strength)
            self.direction = BACKWARD if ok else NONE
        elif v1.walk_strength.weaker(v2.walk_strength):
            self.direction = BACKWARD if s.stronger(v1.walk_strength) else NONE
        else:
            self.direction = FORWARD if s.stronger(v2.walk_strength) else BACKWARD

    def add_to_graph(self) -> None:
        self.v1.add_constraint(self)
        self.v2.add_constraint(self)
        self.direction = NONE

    def remove_from_graph(self) -> None:
        self.v1.remove_constraint(self)
        self.v2.remove_constraint(self)
        self.direction = NONE

    def is_satisfied(self) -> bool:
        return self.direction != NONE

    def input(self) -> Variable:
        return self.v1 if self.direction == FORWARD else self.v2

    def output(self) -> Variable:
        return self.v2 if self.direction == FORWARD else self.v1

    def mark_inputs(self, mark: int) -> None:
        self.input().mark = mark

    def mark_unsatisfied(self) -> None:
        self.direction = NONE

    def recalculate(self) -> None:
        source, out = self.input(), self.output()
        out.walk_strength = self.strength.weakest_of(source.walk_strength)
        out.stay = source.stay
        if out.stay:
            self.execute()

    def inputs_known(self, mark: int) -> bool:
        source = self.input()
        return source.mark == mark or source.stay or source.determined_by is None


class EqualityConstraint(BinaryConstraint):
    def execute(self) -> None:
        self.output().value = self.input().value


class ScaleConstraint(BinaryConstraint):
    """dest = src * scale + offset, solved in either direction."""

    def __init__(self, planner: Planner, src: Variable, scale: Variable, offset: Variable,
                 dest: Variable, strength: Strength) -> None:
        super().__init__(planner, src, dest, strength, add=False)
        self.scale = scale
        self.offset = offset
        self.add()

    def add_to_graph(self) -> None:
        super().add_to_graph()
        self.scale.add_constraint(self)
        self.offset.add_constraint(self)

    def remove_from_graph(self) -> None:
        super().remove_from_graph()
        self.scale.remove_constraint(self)
        self.offset.remove_constraint(self)

    def mark_inputs(self, mark: int) -> None:
        super().mark_inputs(mark)
        self.scale.mark = self.offset.mark = mark

    def execute(self) -> None:
        if self.direction == FORWARD:
            self.v2.value = self.v1.value * self.scale.value + self.offset.value
        else:
            self.v1.value = (self.v2.value - self.offset.value) / self.scale.value

    def recalculate(self) -> None:
        source, out = self.input(), self.output()
        out.walk_strength = self.strength.weakest_of(source.walk_strength)
        out.stay = source.stay and self.scale.stay and self.offset.stay
        if out.stay:
            self.execute()


class Plan:
    def __init__(self) -> None:
        self.constraints: list[Constraint] = []

    def execute(self) -> None:
        for c in self.constraints:
            c.execute()


class Planner:
    def __init__(self) -> None:
        self.current_mark = 0

    def new_mark(self) -> int:
        self.current_mark += 1
        return self.current_mark

    def incremental_add(self, c: Constraint) -> None:
        mark = self.new_mark()
        overridden = c.satisfy(mark)
        while overridden is not None:
            overridden = overridden.satisfy(mark)

    def incremental_remove(self, c: Constraint) -> None:
        out = c.output()
        c.mark_unsatisfied()
        c.remove_from_graph()
        unsatisfied = self.remove_propagate_from(out)
        strength = REQUIRED
        while True:
            for u in unsatisfied:
                if u.strength is strength:
                    self.incremental_add(u)
            strength = strength.next_weaker()
            if strength is WEAKEST:
                break

    def make_plan(self, sources: list[Constraint]) -> Plan:
        mark = self.new_mark()
        plan = Plan()
        todo = list(sources)
        while todo:
            c = todo.pop(0)
            out = c.output()
            if out.mark != mark and c.inputs_known(mark):
                plan.constraints.append(c)
                out.mark = mark
                self.add_constraints_consuming(out, todo)
        return plan

    def plan_from(self, constraints: list[Constraint]) -> Plan:
        return self.make_plan([c for c in constraints if c.is_input() and c.is_satisfied()])

    def add_propagate(self, c: Constraint, mark: int) -> bool:
        todo = [c]
        while todo:
            d = todo.pop(0)
            if d.output().mark == mark:
                self.incremental_remove(c)
                return False
            d.recalculate()
            self.add_constraints_consuming(d.output(), todo)
        return True

    def remove_propagate_from(self, out: Variable) -> list[Constraint]:
        out.determined_by = None
        out.walk_strength = WEAKEST
        out.stay = True
        unsatisfied: list[Constraint] = []
        todo = [out]
        while todo:
            v = todo.pop(0)
            for c in v.constraints:
                if not c.is_satisfied():
                    unsatisfied.append(c)
            determining = v.determined_by
            for c in v.constraints:
                if c is not determining and c.is_satisfied():
                    c.recalculate()
                    todo.append(c.output())
        return unsatisfied

    def add_constraints_consuming(self, v: Variable, todo: list[Constraint]) -> None:
        determining = v.determined_by
        for c in v.constraints:
            if c is not determining and c.is_satisfied():
                todo.append(c)


def change(planner: Planner, v: Variable, value: float) -> None:
    edit = EditConstraint(planner, v, PREFERRED)
    plan = planner.plan_from([edit])
    for _ in range(10):
        v.value = value
        plan.execute()
    edit.destroy()


def chain_test(n: int) -> None:
    """A chain of n equalities: editing the first variable must move the last one."""
    planner = Planner()
    variables = [Variable(f"v{i}") for i in range(n + 1)]
    for a, b in zip(variables, variables[1:]):
        EqualityConstraint(planner, a, b, REQUIRED)
    first, last = variables[0], variables[-1]
    StayConstraint(planner, last, STRONG_DEFAULT)
    edit = EditConstraint(planner, first, PREFERRED)
    plan = planner.plan_from([edit])
    for i in range(100):
        first.value = i
        plan.execute()
        if last.value != i:
            raise AssertionError("deltablue: chain test failed")
    edit.destroy()


def projection_test(n: int) -> None:
    """n scale constraints sharing scale and offset, solved forwards and backwards."""
    planner = Planner()
    scale, offset = Variable("scale", 10), Variable("offset", 1000)
    src = dst = Variable("none")
    dests = []
    for i in range(n):
        src, dst = Variable(f"src{i}", i), Variable(f"dst{i}", i)
        dests.append(dst)
        StayConstraint(planner, src, NORMAL)
        ScaleConstraint(planner, src, scale, offset, dst, REQUIRED)
    change(planner, src, 17)
    if dst.value != 1170:
        raise AssertionError("deltablue: projection 1 failed")
    change(planner, dst, 1050)
    if src.value != 5:
        raise AssertionError("deltablue: projection 2 failed")
    change(planner, scale, 5)
    if any(d.value != i * 5 + 1000 for i, d in enumerate(dests[:-1])):
        raise AssertionError("deltablue: projection 3 failed")
    change(planner, offset, 2000)
    if any(d.value != i * 5 + 2000 for i, d in enumerate(dests[:-1])):
        raise AssertionError("deltablue: projection 4 failed")


def run(scale: float = 1.0) -> None:
    for _ in range(max(1, round(ROUNDS * scale))):
        chain_test(SIZE)
        projection_test(SIZE)
