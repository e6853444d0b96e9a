"""Ray tracer: spheres over a checkerboard plane, reflections and shadows (as pyperformance's raytrace)."""

from __future__ import annotations

import math
from typing import Optional, Protocol

#: Image size (pixels per side) of one run.
SIZE = 120
EPSILON = 1e-5
MAX_DEPTH = 3


class Vector:
    __slots__ = ("x", "y", "z")

    def __init__(self, x: float, y: float, z: float) -> None:
        self.x, self.y, self.z = x, y, z

    def dot(self, o: Vector) -> float:
        return self.x * o.x + self.y * o.y + self.z * o.z

    def cross(self, o: Vector) -> Vector:
        return Vector(self.y * o.z - self.z * o.y, self.z * o.x - self.x * o.z,
                      self.x * o.y - self.y * o.x)

    def magnitude(self) -> float:
        return math.sqrt(self.dot(self))

    def __add__(self, o: Vector) -> Vector:
        return Vector(self.x + o.x, self.y + o.y, self.z + o.z)

    def __sub__(self, o: Vector) -> Vector:
        return Vector(self.x - o.x, self.y - o.y, self.z - o.z)

    def scale(self, k: float) -> Vector:
        return Vector(self.x * k, self.y * k, self.z * k)

    def normalized(self) -> Vector:
        return self.scale(1.0 / self.magnitude())

    def reflect_through(self, normal: Vector) -> Vector:
        return self - normal.scale(2 * self.dot(normal))


Colour = Vector  # r, g, b in 0..1
BLACK = Colour(0.0, 0.0, 0.0)


class Ray:
    def __init__(self, origin: Vector, direction: Vector) -> None:
        self.origin = origin
        self.direction = direction.normalized()

    def at(self, t: float) -> Vector:
        return self.origin + self.direction.scale(t)


class Surface(Protocol):
    def colour_at(self, scene: Scene, ray: Ray, point: Vector, normal: Vector,
                  depth: int) -> Colour: ...


class Shape(Protocol):
    surface: Surface

    def intersect(self, ray: Ray) -> Optional[float]: ...
    def normal_at(self, point: Vector) -> Vector: ...


class Sphere:
    def __init__(self, centre: Vector, radius: float, surface: Surface) -> None:
        self.centre = centre
        self.radius = radius
        self.surface = surface

    def intersect(self, ray: Ray) -> Optional[float]:
        cp = self.centre - ray.origin
        v = cp.dot(ray.direction)
        discriminant = self.radius * self.radius - (cp.dot(cp) - v * v)
        if discriminant < 0:
            return None
        return v - math.sqrt(discriminant)

    def normal_at(self, point: Vector) -> Vector:
        return (point - self.centre).normalized()


class Plane:
    def __init__(self, point: Vector, normal: Vector, surface: Surface) -> None:
        self.point = point
        self.normal = normal.normalized()
        self.surface = surface

    def intersect(self, ray: Ray) -> Optional[float]:
        v = ray.direction.dot(self.normal)
        if v == 0:
            return None
        return -(ray.origin - self.point).dot(self.normal) / v

    def normal_at(self, point: Vector) -> Vector:
        return self.normal


class Matte:
    """Reflective, lambertian and ambient parts of a base colour."""

    def __init__(self, colour: Colour, specular: float = 0.2, lambert: float = 0.6,
                 ambient: float = 0.2) -> None:
        self.colour = colour
        self.specular = specular
        self.lambert = lambert
        self.ambient = ambient

    def base_colour(self, point: Vector) -> Colour:
        return self.colour

    def colour_at(self, scene: Scene, ray: Ray, point: Vector, normal: Vector,
                  depth: int) -> Colour:
        base = self.base_colour(point)
        out = BLACK
        if self.specular > 0:
            reflected = Ray(point, ray.direction.reflect_through(normal))
            reflected_colour = scene.trace(reflected, depth + 1)
            out = out + Colour(base.x * reflected_colour.x, base.y * reflected_colour.y,
                               base.z * reflected_colour.z).scale(self.specular)
        if self.lambert > 0:
            amount = 0.0
            for light in scene.visible_lights(point):
                contribution = (light - point).normalized().dot(normal)
                if contribution > 0:
                    amount += contribution
            out = out + base.scale(self.lambert * min(amount, 1.0))
        if self.ambient > 0:
            out = out + base.scale(self.ambient)
        return out


class Checkerboard(Matte):
    def __init__(self, check_size: float = 1.0) -> None:
        super().__init__(Colour(1.0, 1.0, 1.0), specular=0.2, lambert=0.6, ambient=0.2)
        self.other = Colour(0.0, 0.0, 0.0)
        self.check_size = check_size

    def base_colour(self, point: Vector) -> Colour:
        p = point.scale(1.0 / self.check_size)
        odd = (int(abs(p.x) + 0.5) + int(abs(p.y) + 0.5) + int(abs(p.z) + 0.5)) % 2
        return self.other if odd else self.colour


class Scene:
    def __init__(self, eye: Vector, look_at: Vector, fov_degrees: float) -> None:
        self.shapes: list[Shape] = []
        self.lights: list[Vector] = []
        self.eye = eye
        self.look_at = look_at
        self.fov = fov_degrees

    def first_hit(self, ray: Ray) -> Optional[tuple[Shape, float]]:
        best: Optional[tuple[Shape, float]] = None
        for shape in self.shapes:
            t = shape.intersect(ray)
            if t is not None and t > EPSILON and (best is None or t < best[1]):
                best = (shape, t)
        return best

    def visible_lights(self, point: Vector) -> list[Vector]:
        visible = []
        for light in self.lights:
            to_light = light - point
            hit = self.first_hit(Ray(point, to_light))
            if hit is None or hit[1] > to_light.magnitude():
                visible.append(light)
        return visible

    def trace(self, ray: Ray, depth: int = 0) -> Colour:
        if depth > MAX_DEPTH:
            return BLACK
        hit = self.first_hit(ray)
        if hit is None:
            return BLACK
        shape, t = hit
        point = ray.at(t)
        return shape.surface.colour_at(self, ray, point, shape.normal_at(point), depth)

    def render(self, width: int, height: int) -> bytearray:
        forward = (self.look_at - self.eye).normalized()
        right = forward.cross(Vector(0.0, 1.0, 0.0)).normalized()
        up = right.cross(forward).normalized()
        half_width = math.tan(math.radians(self.fov) / 2)
        half_height = half_width * height / width
        pixels = bytearray(width * height * 3)
        for y in range(height):
            for x in range(width):
                dx = (x / (width - 1) * 2 - 1) * half_width
                dy = (1 - y / (height - 1) * 2) * half_height
                colour = self.trace(Ray(self.eye, forward + right.scale(dx) + up.scale(dy)))
                i = (y * width + x) * 3
                pixels[i:i + 3] = bytes(min(255, int(c * 255)) for c in (colour.x, colour.y,
                                                                         colour.z))
        return pixels


def build_scene() -> Scene:
    scene = Scene(Vector(0.0, 1.8, 10.0), Vector(0.0, 3.0, 0.0), 45.0)
    scene.shapes.append(Sphere(Vector(1.0, 3.0, -10.0), 2.0, Matte(Colour(1.0, 1.0, 0.0))))
    for i in range(6):
        scene.shapes.append(
            Sphere(Vector(-3.0 - i * 0.4, 2.3, -5.0), 0.4, Matte(Colour(i / 6.0, 1.0 - i / 6.0, 0.5))))
    scene.shapes.append(Plane(Vector(0.0, 0.0, 0.0), Vector(0.0, 1.0, 0.0), Checkerboard()))
    scene.lights.append(Vector(30.0, 30.0, 10.0))
    scene.lights.append(Vector(-10.0, 100.0, 30.0))
    return scene


def run(scale: float = 1.0) -> bytearray:
    side = max(4, round(SIZE * math.sqrt(scale)))
    return build_scene().render(side, side)
