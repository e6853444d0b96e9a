"""N-body: the Jovian planets orbiting the sun (as pyperformance's nbody): float math, few calls."""

from __future__ import annotations

import math

SOLAR_MASS = 4 * math.pi * math.pi
DAYS_PER_YEAR = 365.24
#: Integration steps per run.
STEPS = 60_000

Body = tuple[list[float], list[float], float]  # position, velocity, mass


def planets() -> list[Body]:
    """The sun and the four gas giants (the Computer Language Benchmarks Game's data)."""

    def body(pos: tuple[float, float, float], vel: tuple[float, float, float],
             mass: float) -> Body:
        return list(pos), [v * DAYS_PER_YEAR for v in vel], mass * SOLAR_MASS

    return [
        body((0.0, 0.0, 0.0), (0.0, 0.0, 0.0), 1.0),
        body((4.84143144246472090e00, -1.16032004402742839e00, -1.03622044471123109e-01),
             (1.66007664274403694e-03, 7.69901118419740425e-03, -6.90460016972063023e-05),
             9.54791938424326609e-04),
        body((8.34336671824457987e00, 4.12479856412430479e00, -4.03523417114321381e-01),
             (-2.76742510726862411e-03, 4.99852801234917238e-03, 2.30417297573763929e-05),
             2.85885980666130812e-04),
        body((1.28943695621391310e01, -1.51111514016986312e01, -2.23307578892655734e-01),
             (2.96460137564761618e-03, 2.37847173959480950e-03, -2.96589568540237556e-05),
             4.36624404335156298e-05),
        body((1.53796971148509165e01, -2.59193146099879641e01, 1.79258772950371181e-01),
             (2.68067772490389322e-03, 1.62824170038242295e-03, -9.51592254519715870e-05),
             5.15138902046611451e-05),
    ]


def offset_momentum(bodies: list[Body]) -> None:
    px = py = pz = 0.0
    for _, (vx, vy, vz), mass in bodies:
        px -= vx * mass
        py -= vy * mass
        pz -= vz * mass
    _, sun_v, sun_mass = bodies[0]
    sun_v[:] = [px / sun_mass, py / sun_mass, pz / sun_mass]


def advance(bodies: list[Body], pairs: list[tuple[Body, Body]], dt: float, steps: int) -> None:
    for _ in range(steps):
        for ([x1, y1, z1], v1, m1), ([x2, y2, z2], v2, m2) in pairs:
            dx, dy, dz = x1 - x2, y1 - y2, z1 - z2
            mag = dt * ((dx * dx + dy * dy + dz * dz) ** -1.5)
            b1, b2 = m1 * mag, m2 * mag
            v1[0] -= dx * b2
            v1[1] -= dy * b2
            v1[2] -= dz * b2
            v2[0] += dx * b1
            v2[1] += dy * b1
            v2[2] += dz * b1
        for pos, (vx, vy, vz), _ in bodies:
            pos[0] += dt * vx
            pos[1] += dt * vy
            pos[2] += dt * vz


def energy(bodies: list[Body], pairs: list[tuple[Body, Body]]) -> float:
    e = 0.0
    for ((x1, y1, z1), _, m1), ((x2, y2, z2), _, m2) in pairs:
        e -= m1 * m2 / math.sqrt((x1 - x2) ** 2 + (y1 - y2) ** 2 + (z1 - z2) ** 2)
    for _, (vx, vy, vz), m in bodies:
        e += m * (vx * vx + vy * vy + vz * vz) / 2.0
    return e


def run(scale: float = 1.0) -> float:
    bodies = planets()
    pairs = [(bodies[i], bodies[j]) for i in range(len(bodies)) for j in range(i + 1, len(bodies))]
    offset_momentum(bodies)
    before = energy(bodies, pairs)
    advance(bodies, pairs, 0.01, max(1, round(STEPS * scale)))
    after = energy(bodies, pairs)
    if abs(before + 0.169075164) > 1e-8 or abs(after - before) > 1e-4:
        raise AssertionError(f"nbody: energy {before} -> {after}")
    return after
