"""Where keycld's training step spends its time, by LibTorch operator (forward and backward).

    PYTHONPATH=build/python /usr/bin/python3 bench/profile_step.py [--setting paper|cpu-quick]

Makes a small data set and a one-step run at the setting in a temporary folder (keycld needs a
run to load a model of that shape), then profiles keycld's own loss (keycld.Run.sequence_loss,
the C++ SequenceLoss) and its backward pass with torch.profiler: the module links the same
LibTorch as Python's torch, so the operators the C++ code runs are recorded. Prints the table
by self CPU time (docs/benchmarks.md holds one). Adam and clipping are left out (under 1 % of a
step). Run it on an otherwise idle machine.
"""

import argparse
import tempfile

import h5py
import torch
from torch.profiler import ProfilerActivity, profile

import keycld

SETTINGS = {"paper": (64, 32), "cpu-quick": (32, 16)}  # image size, h

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--setting", default="paper", choices=sorted(SETTINGS))
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--steps", type=int, default=3, help="profiled steps (after one warm-up)")
parser.add_argument("--rows", type=int, default=25)
args = parser.parse_args()
size, hidden = SETTINGS[args.setting]

with tempfile.TemporaryDirectory() as d:
    data = keycld.generate(runs=4, frames=50, size=size, seed=0, workers=1, out=d)["path"]
    keycld.train(f"{d}/run", data=data, settings={
        "model": {"hidden": hidden}, "train": {"max_steps": 1, "threads": args.threads},
        "eval": {"val_runs": 1, "rtol": 1e-6, "atol": 1e-6}})
    torch.set_num_threads(args.threads)
    run = keycld.load_run(f"{d}/run")
    with h5py.File(data, "r") as f:
        images = torch.from_numpy(f["images"][0]).permute(0, 3, 1, 2).float() / 255
    ids = torch.randint(0, 8, (images.shape[0],), generator=torch.Generator().manual_seed(0))
    u = torch.zeros(run.spec["action_dim"])

    def step():
        loss = run.sequence_loss(images, u, ids)["total"]
        loss.backward()
        for p in run.parameters():
            p.grad = None

    step()  # warm-up: oneDNN primitives, first touch of the buffers
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            step()
    print(f"keycld's step at the {args.setting} setting ({size}×{size}, h = {hidden}, 50 frames), "
          f"{args.threads} threads, {args.steps} steps:")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))
