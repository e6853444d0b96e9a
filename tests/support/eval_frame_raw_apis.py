"""The two raw frame-evaluation layers the differential test drives with the same callbacks:
torch's ``torch._C._dynamo.eval_frame`` and ``framescope.eval_frame``, behind one small interface.

A scenario's callback decides what to do with a frame in API-neutral terms (``api.skip()``,
``api.cache(code, guard)``, ``api.strategy(cur, rec)``); each adapter turns that into what its layer
expects (torch: ``ConvertFrameReturn`` around a ``GuardedCode`` whose guard is a lambda guard of a
``RootGuardManager``; framescope: ``None`` / ``GuardedCode`` / ``FrameExecStrategy``).
"""

from __future__ import annotations

from types import CodeType
from typing import Any, Callable

from framescope import eval_frame as ef

Guard = Callable[[Any], Any]


class FramescopeAPI:
    name = "framescope"

    def __init__(self) -> None:
        self.A = ef.FrameAction
        # torch keys cache entries by backend, which for a hand-written callback is the callback
        # itself: framescope's isolate=True. Run-only mode (False) sees every entry in both.
        self.isolate = True
        self.guard_errors = "raise"

    def set_eval_frame(self, callback: Any) -> Any:
        if callback is None:
            return ef.set_eval_frame(None)
        if callback is False:
            return ef.set_eval_frame(False, guard_errors=self.guard_errors)
        return ef.set_eval_frame(callback, isolate=self.isolate, guard_errors=self.guard_errors)

    def get_eval_frame_callback(self) -> Any:
        return ef.get_eval_frame_callback()

    def skip(self) -> Any:
        return None

    def strategy(self, cur: Any, rec: Any, apply_to_code: bool = True) -> Any:
        return ef.FrameExecStrategy(cur, rec, apply_to_code)

    def cache(self, code: CodeType, guard: Guard, strategy: Strategy | None = None) -> Any:
        if strategy is None:
            return ef.GuardedCode(code, guard)
        return ef.GuardedCode(
            code,
            guard,
            ef.FrameExecStrategy(
                strategy.cur_action, strategy.recursive_action, strategy.apply_to_code
            ),
        )

    def set_code_exec_strategy(self, code: CodeType, cur: Any, rec: Any) -> None:
        ef.set_code_exec_strategy(code, ef.FrameExecStrategy(cur, rec))

    def reset_code(self, code: CodeType) -> None:
        ef.reset_code(code)

    def entry_codes(self, code: CodeType) -> list[CodeType | None]:
        return [e.code for e in ef.cache_entries(code)]

    def set_guard_complete_hook(self, hook: Any) -> Any:
        return ef.set_guard_complete_hook(hook)


class TorchAPI:
    name = "torch"

    def __init__(self) -> None:
        from torch._C._dynamo import eval_frame, guards
        from torch._dynamo.guards import GuardManagerWrapper
        from torch._dynamo.types import (
            ConvertFrameReturn,
            FrameAction,
            FrameExecStrategy,
            GuardedCode,
            wrap_guarded_code,
        )
        from torch._guards import CompileId

        self.raw = eval_frame
        self.guards = guards
        self.GuardManagerWrapper = GuardManagerWrapper
        self.ConvertFrameReturn = ConvertFrameReturn
        self.FrameExecStrategy = FrameExecStrategy
        self.GuardedCode = GuardedCode
        self.wrap_guarded_code = wrap_guarded_code
        self.CompileId = CompileId
        self.A = FrameAction
        self.compiles = 0

    def set_eval_frame(self, callback: Any) -> Any:
        return self.raw.set_eval_frame(callback)

    def get_eval_frame_callback(self) -> Any:
        return self.raw.get_eval_frame_callback()

    def skip(self) -> Any:
        return self.ConvertFrameReturn()

    def strategy(self, cur: Any, rec: Any, apply_to_code: bool = True) -> Any:
        return self.ConvertFrameReturn(
            frame_exec_strategy=self.FrameExecStrategy(cur, rec), apply_to_code=apply_to_code
        )

    def cache(self, code: CodeType, guard: Guard, strategy: Strategy | None = None) -> Any:
        root = self.guards.RootGuardManager()
        root.add_lambda_guard(guard, ["framescope differential test guard"], None)
        self.compiles += 1
        guarded = self.GuardedCode(
            code,
            self.GuardManagerWrapper(root),
            self.CompileId(frame_id=None, frame_compile_id=self.compiles),
        )
        if strategy is None:
            return self.wrap_guarded_code(guarded)
        return self.ConvertFrameReturn(
            frame_exec_strategy=self.FrameExecStrategy(
                strategy.cur_action, strategy.recursive_action
            ),
            apply_to_code=strategy.apply_to_code,
            guarded_code=guarded,
        )

    def set_code_exec_strategy(self, code: CodeType, cur: Any, rec: Any) -> None:
        self.raw.set_code_exec_strategy(code, self.FrameExecStrategy(cur, rec))

    def reset_code(self, code: CodeType) -> None:
        self.raw.reset_code(code)

    def entry_codes(self, code: CodeType) -> list[CodeType | None]:
        return [e.code for e in self.raw._debug_get_cache_entry_list(code)]

    def set_guard_complete_hook(self, hook: Any) -> Any:
        return self.raw.set_guard_complete_hook(hook)


class Strategy:
    """An API-neutral strategy to go with cached code (api.cache(..., strategy=))."""

    def __init__(self, cur_action: Any, recursive_action: Any, apply_to_code: bool = True) -> None:
        self.cur_action = cur_action
        self.recursive_action = recursive_action
        self.apply_to_code = apply_to_code
