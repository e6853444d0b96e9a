"""Go: 9x9 Monte Carlo tree search (UCT) with random playouts (as pyperformance's go)."""

from __future__ import annotations

import math
import random
from typing import Optional

SIZE = 9
POINTS = SIZE * SIZE
EMPTY, BLACK, WHITE = 0, 1, 2
PASS = -1
KOMI = 7.5
MAX_MOVES = 3 * POINTS
UCT_C = 1.0
#: Moves searched per run and playouts per move.
MOVES = 2
PLAYOUTS = 30


def _neighbours(pos: int) -> tuple[int, ...]:
    row, col = divmod(pos, SIZE)
    out = []
    for r, c in ((row - 1, col), (row + 1, col), (row, col - 1), (row, col + 1)):
        if 0 <= r < SIZE and 0 <= c < SIZE:
            out.append(r * SIZE + c)
    return tuple(out)


NEIGHBOURS = [_neighbours(p) for p in range(POINTS)]


class Board:
    def __init__(self, other: Optional[Board] = None) -> None:
        if other is None:
            self.colours = [EMPTY] * POINTS
            self.to_move = BLACK
            self.ko: Optional[int] = None
            self.passes = 0
            self.moves = 0
        else:
            self.colours = list(other.colours)
            self.to_move = other.to_move
            self.ko = other.ko
            self.passes = other.passes
            self.moves = other.moves

    def copy(self) -> Board:
        return Board(self)

    def finished(self) -> bool:
        return self.passes >= 2 or self.moves >= MAX_MOVES

    def group(self, pos: int) -> tuple[list[int], int]:
        """The stones connected to `pos` and their number of liberties."""
        colours = self.colours
        colour = colours[pos]
        stones, seen, liberties = [pos], {pos}, set()
        i = 0
        while i < len(stones):
            for n in NEIGHBOURS[stones[i]]:
                c = colours[n]
                if c == EMPTY:
                    liberties.add(n)
                elif c == colour and n not in seen:
                    seen.add(n)
                    stones.append(n)
            i += 1
        return stones, len(liberties)

    def is_own_eye(self, pos: int, colour: int) -> bool:
        return all(self.colours[n] == colour for n in NEIGHBOURS[pos])

    def legal(self, pos: int) -> bool:
        """Empty, not a ko recapture, and not suicide."""
        if self.colours[pos] != EMPTY or pos == self.ko:
            return False
        if any(self.colours[n] == EMPTY for n in NEIGHBOURS[pos]):
            return True
        colour = self.to_move
        self.colours[pos] = colour
        try:
            for n in NEIGHBOURS[pos]:
                liberties = self.group(n)[1]
                if (self.colours[n] == colour) == (liberties > 0):
                    return True  # joins a living group, or captures
            return False
        finally:
            self.colours[pos] = EMPTY

    def good_moves(self) -> list[int]:
        colour = self.to_move
        return [p for p in range(POINTS)
                if self.colours[p] == EMPTY and not self.is_own_eye(p, colour) and self.legal(p)]

    def play(self, pos: int) -> None:
        self.moves += 1
        enemy = WHITE if self.to_move == BLACK else BLACK
        if pos == PASS:
            self.passes += 1
            self.ko = None
            self.to_move = enemy
            return
        self.colours[pos] = self.to_move
        captured: list[int] = []
        for n in NEIGHBOURS[pos]:
            if self.colours[n] == enemy:
                stones, liberties = self.group(n)
                if liberties == 0:
                    captured += stones
                    self.remove(stones)
        self.ko = None
        if len(captured) == 1:
            stones, liberties = self.group(pos)
            if len(stones) == 1 and liberties == 1:
                self.ko = captured[0]
        self.passes = 0
        self.to_move = enemy

    def remove(self, stones: list[int]) -> None:
        for s in stones:
            self.colours[s] = EMPTY

    def random_move(self, rng: random.Random) -> int:
        empties = [p for p in range(POINTS) if self.colours[p] == EMPTY]
        while empties:
            i = rng.randrange(len(empties))
            pos = empties[i]
            empties[i] = empties[-1]
            empties.pop()
            if not self.is_own_eye(pos, self.to_move) and self.legal(pos):
                return pos
        return PASS

    def score(self, colour: int) -> float:
        """Area score: stones plus empty points surrounded by `colour` only."""
        total = 0.0
        for p in range(POINTS):
            c = self.colours[p]
            if c == colour or (c == EMPTY and self.is_own_eye(p, colour)):
                total += 1
        return total + (KOMI if colour == WHITE else 0.0)

    def winner(self) -> int:
        return BLACK if self.score(BLACK) > self.score(WHITE) else WHITE


class Node:
    def __init__(self, move: int, parent: Optional[Node], player: int) -> None:
        self.move = move
        self.parent = parent
        self.player = player  # who played `move`
        self.children: list[Node] = []
        self.untried: Optional[list[int]] = None
        self.wins = 0
        self.visits = 0

    def ucb(self, child: Node) -> float:
        return child.wins / child.visits + UCT_C * math.sqrt(math.log(self.visits) / child.visits)

    def select(self) -> Node:
        return max(self.children, key=self.ucb)

    def fully_expanded(self) -> bool:
        return self.untried is not None and not self.untried

    def expand(self, board: Board, rng: random.Random) -> Node:
        if self.untried is None:
            self.untried = board.good_moves()
            rng.shuffle(self.untried)
        while self.untried:
            move = self.untried.pop()
            if board.legal(move):
                child = Node(move, self, board.to_move)
                board.play(move)
                self.children.append(child)
                return child
        return self

    def update(self, winner: int) -> None:
        self.visits += 1
        if winner == self.player:
            self.wins += 1


def search(board: Board, playouts: int, rng: random.Random) -> int:
    root = Node(PASS, None, WHITE if board.to_move == BLACK else BLACK)
    for _ in range(playouts):
        b = board.copy()
        node = root
        while node.fully_expanded() and node.children:
            node = node.select()
            b.play(node.move)
        if not b.finished():
            node = node.expand(b, rng)
        while not b.finished():
            b.play(b.random_move(rng))
        winner = b.winner()
        walk: Optional[Node] = node
        while walk is not None:
            walk.update(winner)
            walk = walk.parent
    if not root.children:
        return PASS
    return max(root.children, key=lambda c: c.visits).move


def run(scale: float = 1.0) -> list[int]:
    rng = random.Random(1)
    board = Board()
    played = []
    for _ in range(MOVES):
        move = search(board, max(1, round(PLAYOUTS * scale)), rng)
        board.play(move)
        played.append(move)
    return played
