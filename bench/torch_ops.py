"""Overhead of recording torch operators: framescope (torch_ops=True, with and without Python
frames and shapes) beside torch.profiler (CPU ops, with_stack=True, record_shapes), on the same
models in one process, as ratios to the untraced run; and the drop-in pairs: torch.profiler's
recipe with only the import line changed (``framescope.profile(activities=[CPU])``, with and
without stacks) against torch's, as a ratio of added cost, start and stop included (medians).
Models: two MLPs and a 6-layer nn.TransformerEncoder. Writes bench/results/torch_ops.json.

Configurations are measured round-robin (one repetition of each per round; ratios from the best
of the rounds, the drop-in pairs from the medians), so that drift on a shared machine affects
all of them alike. Needs torch (3.11: torch==2.13.0).

    python bench/torch_ops.py [--rounds 7] [--quick]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from typing import Any, Callable

from _results import write_results  # bench/_results.py (this script's directory)

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(BENCH_DIR, "results", "torch_ops.json")


def make_workloads(torch: Any) -> dict[str, Callable[[], None]]:
    """Training steps of two small CPU models: op-bound (tiny tensors, the profilers' worst case)
    and compute-bound (larger matmuls)."""

    class MLP(torch.nn.Module):  # type: ignore[misc]
        def __init__(self, width: int, depth: int) -> None:
            super().__init__()
            layers: list[Any] = []
            for _ in range(depth):
                layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
            self.body = torch.nn.Sequential(*layers)
            self.head = torch.nn.Linear(width, 10)

        def forward(self, x: Any) -> Any:
            return self.head(self.body(x))

    def trainer(width: int, depth: int, batch: int, steps: int) -> Callable[[], None]:
        torch.manual_seed(0)
        model = MLP(width, depth)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(batch, width)
        y = torch.randint(0, 10, (batch,))
        loss_fn = torch.nn.CrossEntropyLoss()

        def run() -> None:
            for _ in range(steps):
                opt.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                opt.step()

        return run

    def transformer(steps: int) -> Callable[[], None]:
        """A 6-layer nn.TransformerEncoder block (the issue's larger model)."""
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128,
                                                 dropout=0.0, batch_first=True)
        model = torch.nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(4, 16, 64)

        def run() -> None:
            for _ in range(steps):
                opt.zero_grad()
                model(x).pow(2).mean().backward()
                opt.step()

        return run

    return {
        "mlp_small": trainer(width=16, depth=4, batch=8, steps=60),
        "mlp_large": trainer(width=512, depth=4, batch=256, steps=6),
        "transformer6": transformer(steps=4),
    }


def configs(torch: Any) -> dict[str, Callable[[], Any]]:
    """Each returns a context manager that records while the workload runs (None: untraced)."""
    import contextlib

    import framescope
    from torch.profiler import ProfilerActivity, profile

    cpu = [ProfilerActivity.CPU]
    fs_cpu = [framescope.ProfilerActivity.CPU]
    return {
        "untraced": contextlib.nullcontext,
        "framescope_ops": lambda: framescope.profile(with_stack=False, torch_ops=True),
        "framescope_stack_ops": lambda: framescope.profile(torch_ops=True),
        "framescope_stack_ops_shapes": lambda: framescope.profile(torch_ops=True,
                                                                  record_shapes=True),
        "torch_profiler_ops": lambda: profile(activities=cpu),
        "torch_profiler_with_stack": lambda: profile(activities=cpu, with_stack=True),
        "torch_profiler_with_stack_shapes": lambda: profile(activities=cpu, with_stack=True,
                                                            record_shapes=True),
        # The drop-in: torch's recipe with only the import line changed (framescope's
        # with_stack default is True; without stacks it is given, as torch's default).
        "dropin_with_stack": lambda: framescope.profile(activities=fs_cpu, with_stack=True),
        "dropin_no_stack": lambda: framescope.profile(activities=fs_cpu, with_stack=False),
    }

#: (framescope drop-in config, torch.profiler config, target ratio of added cost)
DROPIN_PAIRS = {
    "with_stack": ("dropin_with_stack", "torch_profiler_with_stack", 0.6),
    "no_stack": ("dropin_no_stack", "torch_profiler_ops", 1.0),
}


def op_count(torch: Any, run: Callable[[], None]) -> int:
    import framescope

    with framescope.profile(with_stack=False, torch_ops=True) as prof:
        run()
    return sum(1 for e in prof.events() if e.category in ("cpu_op", "user_annotation"))


def measure(rounds: int, quick: bool) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    workloads = make_workloads(torch)
    cfgs = configs(torch)
    results: dict[str, Any] = {}
    for wname, run in workloads.items():
        run()  # warm up (first calls allocate, import lazily)
        ops = op_count(torch, run)
        best: dict[str, float] = {}
        totals: dict[str, list[float]] = {c: [] for c in cfgs}
        for _ in range(rounds):
            for cname, make in cfgs.items():
                t0 = time.process_time()
                with make():  # recording starts before and stops after (stop cost included)
                    t1 = time.process_time()
                    run()
                    t2 = time.process_time()
                t3 = time.process_time()
                run_s, total_s = t2 - t1, t3 - t0
                totals[cname].append(total_s)
                prev = best.get(cname)
                if prev is None or run_s < prev:
                    best[cname] = run_s
                    best[cname + "@total"] = total_s
        base = best["untraced"]
        rows = {}
        for cname in cfgs:
            rows[cname] = {
                "seconds": best[cname],
                "ratio": best[cname] / base,
                "ratio_with_start_stop": best[cname + "@total"] / best["untraced@total"],
                "ns_per_op_added": (best[cname] - base) / max(ops, 1) * 1e9,
            }
        # The drop-in targets: added cost (start and stop included) as a ratio to torch's, from
        # the medians of the interleaved rounds.
        med = {c: statistics.median(v) for c, v in totals.items()}
        dropin = {}
        for pair, (ours, theirs, target) in DROPIN_PAIRS.items():
            added_ours = med[ours] - med["untraced"]
            added_theirs = med[theirs] - med["untraced"]
            dropin[pair] = {
                "framescope_added_s": added_ours,
                "torch_added_s": added_theirs,
                "ratio_of_added_cost": added_ours / added_theirs if added_theirs > 0 else None,
                "target": target,
            }
        for cname in cfgs:
            rows[cname]["median_seconds_with_start_stop"] = med[cname]
        results[wname] = {"ops_per_run": ops, "configs": rows, "dropin": dropin}
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="3 rounds")
    ap.add_argument("--output", default=RESULTS)
    args = ap.parse_args()
    rounds = 3 if args.quick else args.rounds
    try:
        import torch
    except ImportError:
        print("bench/torch_ops.py needs torch (pip install torch==2.13.0 on 3.11)",
              file=sys.stderr)
        return 2
    load = os.getloadavg()
    results = measure(rounds, args.quick)
    load_end = os.getloadavg()
    print(f"torch {torch.__version__}, Python {platform.python_version()}, "
          f"best of {rounds} rounds of process CPU time, 1 intra-op thread, load {load[0]:.2f} -> {load_end[0]:.2f}")
    for wname, r in results.items():
        print(f"\n{wname}: {r['ops_per_run']} recorded ops per run")
        print(f"  {'config':34} {'ratio':>7} {'w/ start+stop':>14} {'ns/op added':>12}")
        for cname, row in r["configs"].items():
            print(f"  {cname:34} {row['ratio']:7.2f} {row['ratio_with_start_stop']:14.2f} "
                  f"{row['ns_per_op_added']:12.0f}")
        for pair, d in r["dropin"].items():
            ratio = d["ratio_of_added_cost"]
            shown = "n/a" if ratio is None else f"{ratio:.2f}x"
            print(f"  drop-in {pair:10}: framescope adds {d['framescope_added_s'] * 1e3:8.1f} ms, "
                  f"torch {d['torch_added_s'] * 1e3:8.1f} ms (median, start+stop): {shown} "
                  f"(target <= {d['target']}x)")
    doc = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "rounds": rounds,
        "loadavg": [load[0], load_end[0]],
        "note": "dropin: added cost of framescope.profile(activities=[CPU]) over torch.profiler's "
                "with the same arguments, medians of interleaved rounds, start+stop included; "
                "ratio = run time while recording / untraced run time, best of rounds, in one "
                "process; ratio_with_start_stop includes starting and stopping the recorder "
                "(framescope's replay, torch's post-processing)",
        "results": results,
    }
    write_results(args.output, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
