"""A small PyTorch training loop profiled with torch operators in the timeline.

    python examples/torch_model.py            # writes torch_model.json and torch_model.html
    framescope run --torch-ops --record-shapes examples/torch_model.py   # the whole run

The trace nests aten ops (aten::linear, aten::addmm, ...) and autograd nodes under the Python
frames and `nn.Module: ...` slices that called them; a data-loading thread shows beside the main
thread. Needs torch (pip install torch).
"""

from __future__ import annotations

import queue
import threading

import torch

import framescope


class Classifier(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.nn.Sequential(
            torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64), torch.nn.ReLU()
        )
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


def make_batch(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(32, 64, generator=generator)
    return x, (x[:, :10].argmax(dim=1))


def loader(batches: "queue.Queue[tuple[torch.Tensor, torch.Tensor] | None]", n: int) -> None:
    generator = torch.Generator().manual_seed(0)
    for _ in range(n):
        batches.put(make_batch(generator))
    batches.put(None)


def train(model: Classifier, steps: int) -> float:
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = torch.nn.CrossEntropyLoss()
    batches: queue.Queue[tuple[torch.Tensor, torch.Tensor] | None] = queue.Queue(maxsize=4)
    threading.Thread(target=loader, args=(batches, steps), name="data-loader").start()
    loss = torch.zeros(())
    while (batch := batches.get()) is not None:
        x, y = batch
        with torch.profiler.record_function("train_step"):
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
    return float(loss.detach())


def main() -> None:
    torch.set_num_threads(1)  # a model this small gains nothing from intra-op threads
    torch.manual_seed(0)
    model = Classifier()
    if framescope.is_enabled():  # under `framescope run`: that session records
        print(f"loss {train(model, steps=30):.3f}")
        return
    train(model, steps=1)  # warm up: the first step imports and initialises lazily (~2 s)
    with framescope.profile(torch_ops=True, record_shapes=True) as prof:
        loss = train(model, steps=30)
    print(f"loss {loss:.3f}")
    prof.export_chrome_trace("torch_model.json")
    prof.export_html("torch_model.html")
    print(prof.summary(limit=12))


if __name__ == "__main__":
    main()
