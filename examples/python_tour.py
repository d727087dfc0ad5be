"""A notebook-style tour of keycld from Python: a trained run's keypoints over time, its
prediction error and its learned potential energy against the simulator's.

    ./build/keycld run                         # the main job: runs/pendulum-none-cpu-quick
    PYTHONPATH=build/python /usr/bin/python3 examples/python_tour.py [RUN] [--out DIR]

Writes keypoints.png and potential.png to DIR (default RUN/python-tour) and prints what it
measured. Each step is a cell of a notebook; run them one by one in Jupyter the same way.
"""

import argparse
import math
import pathlib

import matplotlib

matplotlib.use("Agg")  # files, no display; drop this line in a notebook
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

import keycld  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("run", nargs="?", default="runs/pendulum-none-cpu-quick")
parser.add_argument("--out", type=pathlib.Path)
parser.add_argument("--frames", type=int, default=100, help="frames to predict")
parser.add_argument("--validation-run", type=int, default=0)
parser.add_argument("--threads", type=int, default=2)
args = parser.parse_args()
out = args.out or pathlib.Path(args.run) / "python-tour"
out.mkdir(parents=True, exist_ok=True)
torch.set_num_threads(args.threads)

# --- Open the run: model, data set, configuration ---------------------------------------------
run = keycld.load_run(args.run)
spec = run.spec
K, S, dt = spec["num_keypoints"], spec["image_size"], spec["dt"]
print(f"{run.description}: {run.train_steps} training steps, data {run.data_file}")

# --- Predict a validation run from its first three frames; read every true frame -------------
pred = run.predict(run=args.validation_run, frames=args.frames)
with torch.no_grad():
    estimated, _ = run.encode(pred["truth"])  # the estimator's keypoints of the true frames
t = torch.arange(args.frames) * dt
fig, axes = plt.subplots(3, 1, figsize=(7, 7), sharex=True)
for k in range(K):
    for c, name in ((0, "x"), (1, "y")):
        line, = axes[c].plot(t, estimated[:, k, c], label=f"keypoint {k}: estimated")
        axes[c].plot(t, pred["keypoints"][:, k, c], "--", color=line.get_color(),
                     label=f"keypoint {k}: predicted")
        axes[c].set_ylabel(f"{name} (normalized)")
axes[0].legend(fontsize=8)
axes[2].semilogy(t, pred["mse"], color="k")
axes[2].axhline(pred["epsilon"], ls="--", color="gray", label="ε")
axes[2].axvline(pred["vpt"] * dt, color="r", label=f"VPT {pred['vpt']} frames")
axes[2].set_ylabel("MSE per pixel")
axes[2].set_xlabel("time (s)")
axes[2].legend(fontsize=8)
fig.suptitle(f"validation run {args.validation_run} (data set run {pred['dataset_run']})")
fig.tight_layout()
fig.savefig(out / "keypoints.png", dpi=100)
print(f"VPT {pred['vpt']} of {args.frames - 1} frames; wrote {out / 'keypoints.png'}")

# --- The learned potential along one joint, read from rendered images ------------------------
env = keycld.Environment(spec["env"])
joint = 1 if spec["env"] == "cartpole" else 0  # the pole's angle; the pendulum's / shoulder's
angles = torch.linspace(-math.pi, math.pi, 121)
frames, true_energy = [], []
for a in angles.tolist():
    q = [0.0] * env.nq
    q[joint] = a
    env.reset(q, [0.0] * env.nv)
    frames.append(env.render(S))
    true_energy.append(env.total_energy())  # at rest: the potential energy (J)
with torch.no_grad():
    keypoints, _ = run.encode(torch.stack(frames))
    learned = run.potential(keypoints.reshape(len(frames), 2 * K).double()).double()
true_energy = torch.tensor(true_energy, dtype=torch.float64)
# The learned energy's unit and zero are arbitrary: fit V_learned ≈ a·V_true + b.
A = torch.stack([true_energy, torch.ones_like(true_energy)], dim=1)
a, b = torch.linalg.lstsq(A, learned.unsqueeze(1)).solution.flatten().tolist()
residual = learned - (a * true_energy + b)
r2 = 1 - residual.square().sum() / (learned - learned.mean()).square().sum()
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.plot(angles, learned, label="learned V (model units)")
ax.plot(angles, a * true_energy + b, "--", label=f"true V, fitted: {a:.3g}·V + {b:.3g}")
ax.set_xlabel(f"joint {joint} angle (rad, 0 = up)")
ax.set_ylabel("potential energy")
ax.set_title(f"learned against true potential, R² = {r2:.3f}")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(out / "potential.png", dpi=100)
print(f"potential R² {r2:.4f} (scale {a:.3g}); mass matrix diagonal "
      f"{[round(m, 4) for m in torch.diag(run.mass_matrix()).tolist()]}; "
      f"wrote {out / 'potential.png'}")
