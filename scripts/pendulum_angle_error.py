#!/usr/bin/env python3
"""How the estimated keypoint of a trained pendulum model follows the simulator's angle.

Usage (after ./scripts/setup.sh; /usr/bin/python3 sees Debian's torch and h5py):
  PYTHONPATH=build/python /usr/bin/python3 scripts/pendulum_angle_error.py RUN_DIR \
      [--checkpoint FILE] [--tta]

Reads every frame of the data set's validation runs, estimates the keypoint (with --tta the
mean over the 8 dihedral transforms, as `keycld evaluate --tta`), measures its angle about the
image centre (the pivot) and fits angle = s·θ + c (s = ±1) to the simulator's θ. Prints the RMS
angle error, its systematic part (the mean error per 10° bin of θ) and the rest (frame-to-frame
noise), and the mean error per 30° bin. docs/evaluation.md, "Start estimate", quotes it.
"""
import argparse
import math
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
    args = ap.parse_args()
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


def _tta_keypoints(run, images):
    """Mean keypoints over the 8 dihedral transforms, as evaluate --tta, one frame at a time."""
    out = []
    for t in range(images.shape[0]):
        p = run.predict(images=torch.cat([images[t:t + 1]] * 3), frames=3, tta=True)
        out.append(p["keypoints"][0, 0].double().numpy())
    return np.stack(out)


if __name__ == "__main__":
    main()
