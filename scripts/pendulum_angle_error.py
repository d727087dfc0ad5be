#!/usr/bin/env python3
"""How the estimated keypoint of a trained pendulum model follows the simulator's angle.

Usage (after ./scripts/setup.sh; /usr/bin/python3 sees Debian's torch and h5py):
  PYTHONPATH=build/python /usr/bin/python3 scripts/pendulum_angle_error.py RUN_DIR \
      [--checkpoint FILE] [--tta] [--per-run [EVALUATION_JSON]]

Reads every frame of the data set's validation runs, estimates the keypoint (with --tta the
mean over the 8 dihedral transforms, as `keycld evaluate --tta`), measures its angle about the
image centre (the pivot) and fits angle = s·θ + c (s = ±1) to the simulator's θ. Prints the RMS
angle error, its systematic part (the mean error per 10° bin of θ) and the rest (frame-to-frame
noise), and the mean error per 30° bin. docs/evaluation.md, "Start estimate", quotes it.

--per-run adds one line per validation run, sorted by VPT: the start angle, the mean angle error
of frames 0-2 and the error of the start velocity the protocol uses (the central difference of
frames 0 and 2, in degrees per frame), with the run's VPT from an evaluation.json (default
RUN_DIR/report/evaluation.json, written by `keycld evaluate`). Angles in degrees, 0 = upright.
"""
import argparse
import json
import math
import os
import sys

import h5py
import numpy as np
import torch

import keycld


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("run_dir")
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--tta", action="store_true", help="mean over the 8 dihedral transforms")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--per-run", nargs="?", const="", default=None, metavar="EVALUATION_JSON",
                    help="per validation run: start errors against its VPT (evaluation.json of "
                    "the same run; default RUN_DIR/report/evaluation.json)")
    args = ap.parse_args()
    vpt = None
    if args.per_run is not None:
        vpt = _read_vpt(args.per_run or os.path.join(args.run_dir, "report", "evaluation.json"))
    run = keycld.load_run(args.run_dir, checkpoint=args.checkpoint, threads=args.threads)
    if run.spec["env"] != "pendulum":
        sys.exit("pendulum_angle_error.py: a pendulum run is needed, got " + run.spec["env"])
    data = h5py.File(run.data_file, "r")
    angles, truth = [], []
    for d in data["split/validation"][:]:
        images = torch.from_numpy(data["images"][d])
        if args.tta:
            k = _tta_keypoints(run, images)
        else:
            with torch.no_grad():
                k = run.encode(images)[0][:, 0].double().numpy()
        angles.append(np.arctan2(k[:, 1], k[:, 0]))
        truth.append(data["qpos"][d, :, 0])
    phi, theta = np.concatenate(angles), np.concatenate(truth)
    best = None
    for s in (1, -1):
        c = np.angle(np.mean(np.exp(1j * (phi - s * theta))))
        e = np.degrees(np.angle(np.exp(1j * (phi - s * theta - c))))
        if best is None or np.sqrt(np.mean(e**2)) < np.sqrt(np.mean(best[2]**2)):
            best = (s, c, e)
    s, c, e = best
    wrapped = np.angle(np.exp(1j * theta))
    def binned(n):
        b = np.floor((wrapped + math.pi) / (2 * math.pi) * n).astype(int) % n
        means = np.array([e[b == i].mean() if np.any(b == i) else 0.0 for i in range(n)])
        return b, means
    b10, m10 = binned(36)
    systematic = m10[b10]
    print(f"{len(e)} frames; keypoint angle = {s:+d}·θ + {math.degrees(c):.2f}°")
    print(f"angle error RMS {np.sqrt(np.mean(e**2)):.3f}°: systematic (mean per 10° bin) "
          f"{np.sqrt(np.mean(systematic**2)):.3f}°, rest {np.sqrt(np.mean((e - systematic)**2)):.3f}°")
    b30, m30 = binned(12)
    print("mean error per 30° bin of θ from −180°: " + " ".join(f"{v:+.2f}" for v in m30))
    if vpt is not None:
        _per_run_table(vpt, angles, truth, s, c)


def _read_vpt(path):
    """Per-run VPT of an evaluation.json (keycld evaluate), validated."""
    try:
        with open(path) as f:
            per_run = json.load(f)["vpt"]["per_run"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"pendulum_angle_error.py: cannot read the per-run VPT of '{path}': {e}")
    return np.asarray(per_run, dtype=float)


def _per_run_table(vpt, angles, truth, s, c):
    """Start angle, start-angle error and start-velocity error of each run, sorted by VPT."""
    if len(vpt) != len(angles):
        sys.exit(f"pendulum_angle_error.py: the evaluation has {len(vpt)} runs, the data set "
                 f"{len(angles)} validation runs (evaluated on another data set?)")
    rows = []
    for v, phi, theta in zip(vpt, angles, truth):
        if len(phi) < 3:
            sys.exit("pendulum_angle_error.py: --per-run needs runs of at least 3 frames")
        err = np.degrees(np.angle(np.exp(1j * (phi[:3] - s * theta[:3] - c))))
        # Central difference of frames 0 and 2, per frame: the protocol's start velocity.
        dphi = np.angle(np.exp(1j * (phi[2] - phi[0])))
        dtheta = s * np.angle(np.exp(1j * (theta[2] - theta[0])))
        rows.append((v, math.degrees(math.remainder(theta[0], 2 * math.pi)), err.mean(),
                     math.degrees(dphi - dtheta) / 2))
    rows.sort(key=lambda r: r[0])
    print("VPT  start θ  angle error (frames 0-2)  start velocity error (°/frame)")
    for v, t0, e, dv in rows:
        print(f"{v:3.0f}  {t0:+7.1f}  {e:+6.2f}  {dv:+7.3f}")
    full = max(r[0] for r in rows)
    for label, sel in (("runs below the longest VPT", [r for r in rows if r[0] < full]),
                       ("runs at the longest VPT", [r for r in rows if r[0] == full])):
        if sel:
            print(f"{label} ({len(sel)}): mean |start velocity error| "
                  f"{np.mean([abs(r[3]) for r in sel]):.3f}°/frame")


def _tta_keypoints(run, images):
    """Mean keypoints over the 8 dihedral transforms, as evaluate --tta, one frame at a time."""
    out = []
    for t in range(images.shape[0]):
        p = run.predict(images=torch.cat([images[t:t + 1]] * 3), frames=3, tta=True)
        out.append(p["keypoints"][0, 0].double().numpy())
    return np.stack(out)


if __name__ == "__main__":
    main()
