# A torch.profiler recipe (the tutorials' shape), run as is and with only its import line changed
# to framescope (tests/integrations/test_torch_dropin.py). Usage: recipe_train.py OUT_DIR
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

import json
import os
import sys

import torch

out = sys.argv[1]
torch.manual_seed(0)
torch.set_num_threads(1)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = torch.nn.CrossEntropyLoss()
x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))


def train_step():
    with record_function("forward"):
        loss = loss_fn(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


with profile(
    activities=[ProfilerActivity.CPU],
    schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
    on_trace_ready=tensorboard_trace_handler(os.path.join(out, "tb")),
    record_shapes=True,
    profile_memory=True,
    with_stack=True,
) as prof:
    for _ in range(6):
        train_step()
        prof.step()

# A second, unscheduled profile for the exports (torch saves a trace once).
with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True,
             with_stack=True) as prof:
    for _ in range(2):
        train_step()

prof.export_chrome_trace(os.path.join(out, "trace.json"))
prof.export_stacks(os.path.join(out, "stacks.txt"), "self_cpu_time_total")
prof.export_memory_timeline(os.path.join(out, "memory.json"))
rows = [
    [e.key, e.input_shapes, e.count]
    for e in prof.key_averages(group_by_input_shape=True)
]
with open(os.path.join(out, "key_averages.json"), "w") as f:
    json.dump(rows, f, default=str)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))
