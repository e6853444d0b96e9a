"""Chaos game: a fractal drawn by random B-spline transformations (as pyperformance's chaos)."""

from __future__ import annotations

import bisect
import math
import random

#: Points plotted per run, and the image size.
ITERATIONS = 25_000
WIDTH = HEIGHT = 256
THICKNESS = 0.25
STEP = 1.0 / 50_000


class GVector:
    __slots__ = ("x", "y", "z")

    def __init__(self, x: float = 0.0, y: float = 0.0, z: float = 0.0) -> None:
        self.x, self.y, self.z = x, y, z

    def __add__(self, o: GVector) -> GVector:
        return GVector(self.x + o.x, self.y + o.y, self.z + o.z)

    def __sub__(self, o: GVector) -> GVector:
        return GVector(self.x - o.x, self.y - o.y, self.z - o.z)

    def __mul__(self, k: float) -> GVector:
        return GVector(self.x * k, self.y * k, self.z * k)

    def magnitude(self) -> float:
        return math.sqrt(self.x * self.x + self.y * self.y + self.z * self.z)

    def distance(self, o: GVector) -> float:
        return (self - o).magnitude()

    def linear_combination(self, o: GVector, a: float, b: float) -> GVector:
        return GVector(self.x * a + o.x * b, self.y * a + o.y * b, self.z * a + o.z * b)


class Spline:
    """A clamped B-spline of `degree` over [0, 1], evaluated with de Boor's algorithm."""

    def __init__(self, points: list[GVector], degree: int, knots: list[float]) -> None:
        if len(knots) != len(points) + degree + 1:
            raise ValueError("chaos: a spline needs len(points) + degree + 1 knots")
        self.points = points
        self.degree = degree
        self.knots = knots

    def span(self, u: float) -> int:
        """The k with knots[k] <= u < knots[k + 1] (the last span for u at the end)."""
        n = len(self.points)
        if u >= self.knots[n]:
            return n - 1
        for k in range(self.degree, n):
            if self.knots[k] <= u < self.knots[k + 1]:
                return k
        return self.degree

    def __call__(self, u: float) -> GVector:
        p, k, knots = self.degree, self.span(u), self.knots
        d = [self.points[j + k - p] for j in range(p + 1)]
        for r in range(1, p + 1):
            for j in range(p, r - 1, -1):
                left, right = knots[j + k - p], knots[j + 1 + k - r]
                alpha = (u - left) / (right - left)
                d[j] = d[j - 1].linear_combination(d[j], 1.0 - alpha, alpha)
        return d[p]

    def length(self, samples: int = 200) -> float:
        pts = [self(i / samples) for i in range(samples + 1)]
        return sum(a.distance(b) for a, b in zip(pts, pts[1:]))


class ChaosGame:
    def __init__(self, splines: list[Spline], thickness: float, seed: int = 1234) -> None:
        self.splines = splines
        self.thickness = thickness
        self.random = random.Random(seed)
        xs = [p.x for s in splines for p in s.points]
        ys = [p.y for s in splines for p in s.points]
        self.min_x, self.min_y = min(xs) - thickness, min(ys) - thickness
        self.width, self.height = max(xs) + thickness - self.min_x, max(ys) + thickness - self.min_y
        lengths = [s.length() for s in splines]
        total = sum(lengths)
        self.cumulative = [sum(lengths[: i + 1]) / total for i in range(len(lengths))]

    def pick(self) -> Spline:
        i = bisect.bisect_left(self.cumulative, self.random.random())
        return self.splines[min(i, len(self.splines) - 1)]

    def transform(self, point: GVector) -> GVector:
        """Maps the unit square onto a band of width `thickness` along a random spline."""
        spline = self.pick()
        x = (point.x - self.min_x) / self.width
        y = (point.y - self.min_y) / self.height
        y = min(max(y, 0.0), 1.0 - STEP)
        base = spline(y)
        tangent = spline(y + STEP) - base
        norm = tangent.magnitude() or 1.0
        normal = GVector(-tangent.y / norm, tangent.x / norm, 0.0)
        return self.clamp(base + normal * ((x - 0.5) * self.thickness))

    def clamp(self, p: GVector) -> GVector:
        x = min(max(p.x, self.min_x), self.min_x + self.width)
        y = min(max(p.y, self.min_y), self.min_y + self.height)
        return GVector(x, y, 0.0)

    def draw(self, iterations: int, w: int, h: int) -> list[list[int]]:
        image = [[0] * h for _ in range(w)]
        point = GVector(self.min_x + self.width / 2, self.min_y + self.height / 2)
        for _ in range(iterations):
            point = self.transform(point)
            px = min(int((point.x - self.min_x) / self.width * w), w - 1)
            py = min(int((point.y - self.min_y) / self.height * h), h - 1)
            image[px][py] += 1
        return image


def splines() -> list[Spline]:
    knots = [0.0, 0.0, 0.0, 0.0, 0.5, 1.0, 1.0, 1.0, 1.0]

    def spline(*xy: tuple[float, float]) -> Spline:
        return Spline([GVector(x, y) for x, y in xy], 3, knots)

    return [
        spline((0.10, 0.10), (0.20, 0.60), (0.45, 0.95), (0.70, 0.60), (0.90, 0.15)),
        spline((0.30, 0.20), (0.40, 0.35), (0.50, 0.50), (0.60, 0.35), (0.70, 0.20)),
        spline((0.15, 0.85), (0.35, 0.80), (0.55, 0.85), (0.75, 0.80), (0.90, 0.90)),
    ]


def run(scale: float = 1.0) -> list[list[int]]:
    game = ChaosGame(splines(), THICKNESS)
    return game.draw(max(1, round(ITERATIONS * scale)), WIDTH, HEIGHT)
