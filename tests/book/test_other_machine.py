"""The second numerical configuration really is "another machine".

``make test`` executes every chapter twice: nbval in the native configuration, the site build
under ``tools/site/build_book.py``'s ``OTHER_MACHINE`` (tests/book/site_support.py). That proves
something only if the second configuration changes what training computes, as another CPU
does. This test trains the same seeded model for 300 Adam steps in fresh processes (the
variables are read when torch starts): twice natively, which must give identical weights, and
once under ``OTHER_MACHINE``, which must end with other weights.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.helpers import ROOT, tool

build_book = tool("build_book")

TRAIN = """
import json, torch
import attention_book as ab
torch.set_num_threads(1)
ab.set_seed(0)
task = ab.TwoRelationTask(640, seed=1)
model = ab.TokenClassifier(len(task.vocabulary), task.num_classes, d_model=32, num_heads=2, d_ff=64, num_layers=2,
                           max_len=task.length)
optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
generator = torch.Generator().manual_seed(0)
for step in range(300):
    rows = torch.randint(0, len(task), (64,), generator=generator)
    batch = [task[int(i)] for i in rows]
    inputs = torch.stack([item["tokens"] for item in batch])
    targets = torch.stack([item["targets"] for item in batch])
    loss = ab.token_loss(model, {"tokens": inputs, "targets": targets})
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(),
                  "weights": torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()}))
"""


def _train(extra: dict[str, str]) -> tuple[str, list[float]]:
    names = (*build_book.OTHER_MACHINE, "MKL_NUM_THREADS")
    environment = {key: value for key, value in os.environ.items() if key not in names}
    completed = subprocess.run(
        [sys.executable, "-c", TRAIN],
        cwd=ROOT,
        env={**environment, **extra},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    found = json.loads(completed.stdout.strip().splitlines()[-1])
    return found["capability"], found["weights"]


def test_the_second_configuration_changes_a_training_run_s_weights():
    native_capability, native = _train({})
    _, again = _train({})
    other_capability, other = _train(build_book.OTHER_MACHINE)
    assert native == again, "two native runs of the same seeded training should give identical weights"
    assert other_capability == "DEFAULT" != native_capability, (native_capability, other_capability)
    largest = max(abs(a - b) for a, b in zip(native, other))
    print(f"largest weight difference after 300 steps, native ({native_capability}) vs other machine: {largest:.3g}")
    assert largest > 1e-3, (
        f"OTHER_MACHINE changed the weights by only {largest:.2g}: it no longer stands in for another CPU; "
        "choose variables that change the kernels torch uses"
    )
