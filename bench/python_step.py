"""The KeyCLD training step written plainly in Python PyTorch, for measuring keycld against it.

One step on one sequence, as keycld's (docs/method.md §3–§6, bench/train_bench.cc): the keypoint
estimator with per-frame dihedral augmentation, the spatial softmax, the dynamics loss (central
differences projected on the constraints, P = --horizon (default 4) explicit Euler steps, or RK4
with --integrator rk4, of the constrained Lagrangian from every start), the renderer, the heatmap
BCE, backward, element-wise gradient clipping at 5 and Adam with the perception (3e-4) and
dynamics (6e-5) groups. Nothing is tuned: modules from torch.nn, the obvious tensor code.

    /usr/bin/python3 bench/python_step.py                      # both settings, this step alone
    /usr/bin/python3 bench/python_step.py --compare build/train_bench   # and keycld's, the ratio
    /usr/bin/python3 bench/python_step.py --settings main-job --integrator rk4 --horizon 16 \
        --compare build/train_bench --kernels winograd      # the main job's step after epoch 8
    PYTHONPATH=build/python /usr/bin/python3 bench/python_step.py --check RUN   # same loss?

--compare runs keycld's train_bench for the same settings after the Python timing (never at the
same time) and prints the medians and the ratio. --check loads a keycld run's parameters into
this model and compares the loss terms and every parameter gradient with keycld's on the run's
first training sequence (tests/python/test_python_step.py does this on a tiny run).
"""

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

GROUPS = 8  # GroupNorm groups of every block
A_MAX = 1000.0  # the cpu-quick presets' max_acceleration, applied with --integrator rk4
NORM_EPS2 = 1e-12  # added to squared norms in the constraints (regularised norm)


class Block(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm = nn.GroupNorm(GROUPS, cout)

    def forward(self, x):
        return F.relu(self.norm(self.conv(x)))


class UNet(nn.Module):
    def __init__(self, cin, h):
        super().__init__()
        self.block1 = Block(cin, h)
        self.block2 = Block(h, 2 * h)
        self.block3 = Block(2 * h, 4 * h)
        self.block4 = Block(4 * h + 2 * h, 2 * h)
        self.block5 = Block(2 * h + h, h)

    def forward(self, x):
        a1 = self.block1(x)
        a2 = self.block2(F.max_pool2d(a1, 2))
        a3 = self.block3(F.max_pool2d(a2, 2))
        a4 = self.block4(torch.cat([F.interpolate(a3, scale_factor=2, mode="nearest"), a2], 1))
        return self.block5(torch.cat([F.interpolate(a4, scale_factor=2, mode="nearest"), a1], 1))


class Estimator(nn.Module):
    def __init__(self, k, h):
        super().__init__()
        self.trunk = UNet(3, h)
        self.head = nn.Conv2d(h, k, 3, padding=1)

    def forward(self, images):
        return self.head(self.trunk(images))


def grid(size, like):
    xs = torch.linspace(-1, 1, size, dtype=like.dtype)
    ys = torch.linspace(1, -1, size, dtype=like.dtype)
    return xs.view(1, size).expand(size, size), ys.view(size, 1).expand(size, size)


def gaussian_maps(keypoints, size, sigma):
    gx, gy = grid(size, keypoints)
    x = keypoints[..., 0, None, None]
    y = keypoints[..., 1, None, None]
    return torch.exp(-((gx - x) ** 2 + (gy - y) ** 2) / (2 * sigma**2))


class Renderer(nn.Module):
    def __init__(self, k, h, size, sigma):
        super().__init__()
        self.seed = nn.Parameter(torch.randn(h - k, size, size))
        self.trunk = UNet(h, h)
        self.head = nn.Conv2d(h, 3, 3, padding=1)
        self.size, self.sigma = size, sigma

    def forward(self, keypoints):
        maps = gaussian_maps(keypoints, self.size, self.sigma)
        seed = self.seed.unsqueeze(0).expand(keypoints.shape[0], -1, -1, -1)
        return torch.sigmoid(self.head(self.trunk(torch.cat([seed, maps], 1))))


class Mlp(nn.Module):
    def __init__(self, cin, h, cout):
        super().__init__()
        self.linear1, self.linear2, self.linear3 = nn.Linear(cin, h), nn.Linear(h, h), nn.Linear(h, cout)
        for layer in (self.linear1, self.linear2, self.linear3):
            nn.init.normal_(layer.weight, std=0.01)
            nn.init.zeros_(layer.bias)

    def forward(self, x):
        return self.linear3(F.celu(self.linear2(F.celu(self.linear1(x)))))


class Wrapped(nn.Module):  # keycld's checkpoint names: potential.mlp.*, input_matrix.mlp.*
    def __init__(self, mlp):
        super().__init__()
        self.mlp = mlp


class Mass(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.m = nn.Parameter(torch.ones(k))


# The holonomic constraints (docs/method.md §4) as (kind, a, b, value); norms regularised.
CONSTRAINTS = {
    "pendulum": [("origin", 0, None, 0.5)],
    "cartpole": [("coordinate", 1, None, 0.0), ("distance", 0, 1, 0.5)],
    "acrobot": [("origin", 0, None, 0.3), ("distance", 0, 1, 0.3)],
}


def jacobian_and_curvature(env, x, v):
    """D [B, C, 2K] and h = ẋᵀ∇²Φẋ [B, C] of the system's constraints."""
    rows, curv = [], []
    for kind, a, b, _ in CONSTRAINTS[env]:
        if kind == "coordinate":
            row = torch.zeros_like(x)
            row[:, a] = 1.0
            curv.append(torch.zeros(x.shape[0], dtype=x.dtype))
        else:
            p = x[:, 2 * a:2 * a + 2] - (x[:, 2 * b:2 * b + 2] if b is not None else 0)
            w = v[:, 2 * a:2 * a + 2] - (v[:, 2 * b:2 * b + 2] if b is not None else 0)
            r = torch.sqrt((p * p).sum(1) + NORM_EPS2)
            g = p / r.unsqueeze(1)
            parts = [torch.zeros_like(x[:, :2])] * (x.shape[1] // 2)
            parts[a] = g
            if b is not None:
                parts[b] = -g
            row = torch.cat(parts, 1)
            curv.append((w * w).sum(1) / r - (p * w).sum(1) ** 2 / r**3)
        rows.append(row)
    return torch.stack(rows, 1), torch.stack(curv, 1)


class KeyCLD(nn.Module):
    def __init__(self, env, k, a, h, size, sigma=0.1, dt=0.02, integrator="euler"):
        super().__init__()
        self.integrator = integrator
        self.estimator = Estimator(k, h)
        self.renderer = Renderer(k, h, size, sigma)
        self.potential = Wrapped(Mlp(2 * k, h, 1))
        self.input_matrix = Wrapped(Mlp(2 * k, h, 2 * k * a))
        self.mass = Mass(k)
        self.env, self.k, self.a, self.size, self.sigma, self.dt = env, k, a, size, sigma, dt
        self.eps = max(1e-10, 10 * torch.finfo(torch.float32).eps)  # Tikhonov regularisation

    def encode(self, images, ids):
        if ids is None:
            logits = self.estimator(images)
        else:  # per-frame dihedral transform before the network, its inverse after
            t_images = torch.stack([dihedral(images[i], int(t)) for i, t in enumerate(ids)])
            t_logits = self.estimator(t_images)
            logits = torch.stack([dihedral_inverse(t_logits[i], int(t)) for i, t in enumerate(ids)])
        p = torch.softmax(logits.flatten(2), -1).view_as(logits)
        gx, gy = grid(self.size, p)
        keypoints = torch.stack([(p * gx).sum((2, 3)), (p * gy).sum((2, 3))], -1)
        return p, keypoints

    def acceleration(self, x, v, u):
        xg = x if x.requires_grad else x.detach().requires_grad_(True)
        grad_v = torch.autograd.grad(self.potential.mlp(xg).sum(), xg, create_graph=True)[0]
        b = self.input_matrix.mlp(x).view(x.shape[0], 2 * self.k, self.a)
        f = -grad_v + (b @ u.view(1, self.a, 1)).squeeze(-1)
        inv_mass = (self.mass.m**2).repeat_interleave(2).reciprocal()
        d, h = jacobian_and_curvature(self.env, x, v)
        dm = d * inv_mass
        lhs = dm @ d.transpose(1, 2) + self.eps * inv_mass.mean().detach() * torch.eye(d.shape[1])
        lam = torch.linalg.solve(lhs, dm @ f.unsqueeze(-1) + h.unsqueeze(-1))  # [B, C, 1]
        return inv_mass * (f - (d.transpose(1, 2) @ lam).squeeze(-1))

    def project(self, x, v):
        d, _ = jacobian_and_curvature(self.env, x, v)
        lhs = d @ d.transpose(1, 2) + self.eps * torch.eye(d.shape[1])
        mu = torch.linalg.solve(lhs, d @ v.unsqueeze(-1))  # [B, C, 1]
        return v - (d.transpose(1, 2) @ mu).squeeze(-1)

    def bounded_acceleration(self, x, v, u):  # each keypoint's acceleration at most A_MAX
        a = self.acceleration(x, v, u).view(x.shape[0], self.k, 2)
        norm = a.norm(dim=2, keepdim=True)
        return (a * (A_MAX / norm.clamp_min(1e-30)).clamp_max(1.0)).view(x.shape[0], 2 * self.k)

    def step(self, x, v, u):
        dt = self.dt
        if self.integrator == "euler":  # the paper's
            return x + dt * v, v + dt * self.acceleration(x, v, u)
        f = self.bounded_acceleration  # classical RK4 on (x, v), as the cpu-quick presets
        a1 = f(x, v, u)
        a2 = f(x + dt / 2 * v, v + dt / 2 * a1, u)
        v2 = v + dt / 2 * a1
        a3 = f(x + dt / 2 * v2, v + dt / 2 * a2, u)
        v3 = v + dt / 2 * a2
        a4 = f(x + dt * v3, v + dt * a3, u)
        v4 = v + dt * a3
        return (x + dt / 6 * (v + 2 * v2 + 2 * v3 + v4),
                v + dt / 6 * (a1 + 2 * a2 + 2 * a3 + a4))

    def loss(self, images, u, ids, horizon=4):
        n = images.shape[0]
        p, keypoints = self.encode(images, ids)
        x = keypoints.reshape(n, 2 * self.k)
        s = n - 1 - horizon
        x0 = x[1:1 + s]
        v0 = self.project(x0, (x[2:2 + s] - x[0:s]) / (2 * self.dt))
        predicted, target, xs, vs = [x0], [x0], x0, v0
        for j in range(1, horizon + 1):  # one integrator step per frame
            xs, vs = self.step(xs, vs, u)
            predicted.append(xs)
            target.append(x[1 + j:1 + j + s])
        l_dyn = (torch.stack(predicted, 1) - torch.stack(target, 1)).square().sum()
        rendered = self.renderer(keypoints)
        l_rec = (images - rendered).square().sum() / n
        normalized = p / p.amax((2, 3), keepdim=True)
        y = gaussian_maps(keypoints.detach(), self.size, self.sigma)
        l_bce = -(y * torch.log(normalized + 1e-4) + (1 - y) * torch.log(1 - normalized + 1e-4)).mean()
        return {"total": l_rec + l_dyn + l_bce, "reconstruction": l_rec, "dynamics": l_dyn,
                "heatmap": l_bce}

    def perception_parameters(self):
        return list(self.estimator.parameters()) + list(self.renderer.parameters())

    def dynamics_parameters(self):
        return (list(self.potential.parameters()) + list(self.input_matrix.parameters()) +
                list(self.mass.parameters()))


def dihedral(img, t):  # mirror left↔right if t ≥ 4, then rotate counterclockwise (t mod 4)·90°
    out = torch.flip(img, [-1]) if t >= 4 else img
    return torch.rot90(out, t % 4, [-2, -1])


def dihedral_inverse(img, t):
    return dihedral(img, t if t >= 4 else (4 - t) % 4)


# image size, h: the paper's, the 32-px CPU presets', the 64-px main job's (cpu-quick/pendulum-none)
SETTINGS = {"paper": (64, 32), "cpu-quick": (32, 16), "main-job": (64, 16)}


def time_python_step(size, hidden, frames, env, repeats, integrator="euler", horizon=4):
    torch.manual_seed(0)
    k = 1 if env == "pendulum" else 2
    a = 1 if env == "pendulum" else 2
    model = KeyCLD(env, k, a, hidden, size, integrator=integrator)
    adam = torch.optim.Adam([{"params": model.perception_parameters(), "lr": 3e-4},
                             {"params": model.dynamics_parameters(), "lr": 6e-5}])
    images = torch.rand(frames, 3, size, size)
    u = torch.zeros(a)
    ids = torch.randint(0, 8, (frames,))

    def step():
        loss = model.loss(images, u, ids, horizon)["total"]
        adam.zero_grad()
        loss.backward()
        for p in model.parameters():
            if p.grad is not None:
                p.grad.clamp_(-5, 5)
        adam.step()

    step()  # warm-up
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    return seconds


KERNELS = {"libtorch": 0, "onednn": 1, "winograd": 2}  # train_bench's last argument


def time_keycld_step(bench, size, hidden, frames, threads, repeats, kernels="winograd",
                     rk4=False, horizon=4):
    """keycld's BM_TrainStep at the same setting (fp32, keycld model, U-Net `kernels`, Euler or
    RK4, horizon P), the times of its repetitions."""
    name = (f"BM_TrainStep/{size}/{hidden}/{frames}/0/{threads}/0/0/{KERNELS[kernels]}/{rk4:d}/"
            f"{horizon}/")
    out = subprocess.run([bench, f"--benchmark_filter=^{name}", "--benchmark_format=json",
                          f"--benchmark_repetitions={repeats}", "--benchmark_min_time=0.5"],
                         capture_output=True, text=True, check=True).stdout
    try:
        runs = [b for b in json.loads(out)["benchmarks"] if b.get("run_type") == "iteration"]
    except json.JSONDecodeError:  # a filter that matches no case prints no JSON at all
        runs = []
    if not runs:
        sys.exit(f"python_step: {bench} has no benchmark {name}")
    return [b["real_time"] * {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[b["time_unit"]]
            for b in runs]


def check_against(run_dir, integrator="euler", horizon=4):
    """Loss terms and gradients of this model against keycld's, same parameters and sequence,
    integrator (euler, or rk4 with A_MAX) and horizon P."""
    import h5py  # noqa: PLC0415
    import keycld  # noqa: PLC0415

    run = keycld.load_run(run_dir, threads=torch.get_num_threads())
    spec = run.spec
    model = KeyCLD(spec["env"], spec["num_keypoints"], spec["action_dim"], spec["hidden"],
                   spec["image_size"], spec["sigma"], spec["dt"], integrator)
    theirs = run.named_parameters()
    ours = dict(model.named_parameters())
    if set(ours) != set(theirs):
        sys.exit(f"python_step: parameter names differ: {sorted(set(ours) ^ set(theirs))}")
    with torch.no_grad():
        for name, p in ours.items():
            p.copy_(theirs[name])
    with h5py.File(run.data_file, "r") as f:
        r = int(f["split/train"][0])
        images = torch.from_numpy(f["images"][r]).permute(0, 3, 1, 2).float() / 255
        u = torch.from_numpy(f["action"][r, 0]).float()
    ids = torch.arange(images.shape[0]) % 8
    if images.shape[0] < horizon + 2:
        sys.exit(f"python_step: horizon {horizon} needs {horizon + 2} frames, the run's data "
                 f"have {images.shape[0]}")
    mine = model.loss(images, u, ids, horizon)
    mine["total"].backward()
    reference = run.sequence_loss(images, u, ids, horizon=horizon, integrator=integrator,
                                  max_acceleration=A_MAX if integrator == "rk4" else 0.0)
    reference["total"].backward()
    worst = 0.0
    for term in ("reconstruction", "dynamics", "heatmap", "total"):
        a, b = mine[term].item(), reference[term].item()
        rel = abs(a - b) / max(abs(b), 1e-30)
        worst = max(worst, rel)
        print(f"{term:15s} python {a:.9g}  keycld {b:.9g}  relative difference {rel:.2e}")
    # The whole gradient, and each parameter's whose gradient is not negligible (≥ 1e-4 of the
    # whole): some are zero in exact arithmetic (the convolution bias of a block whose GroupNorm
    # groups are single channels) and hold float noise of 1e-7 in both.
    names = [n for n in ours if theirs[n].grad is not None]
    missing = [n for n in names if ours[n].grad is None]
    if missing:
        sys.exit(f"python_step: no gradient here for {missing}, keycld has them")
    total = torch.sqrt(sum(theirs[n].grad.square().sum() for n in names)).item()
    diff = torch.sqrt(sum((ours[n].grad - theirs[n].grad).square().sum() for n in names)).item()
    grad_rel, worst_name = diff / total, "all parameters"
    for n in names:
        norm = theirs[n].grad.norm().item()
        if norm >= 1e-4 * total:
            rel = (ours[n].grad - theirs[n].grad).norm().item() / norm
            if rel > grad_rel:
                grad_rel, worst_name = rel, n
    print(f"gradient: whole {diff / total:.2e}, largest relative difference {grad_rel:.2e} "
          f"({worst_name})")
    return worst, grad_rel


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default="paper,cpu-quick")
    parser.add_argument("--frames", type=int, default=50)
    parser.add_argument("--env", default="pendulum", choices=sorted(CONSTRAINTS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compare", metavar="TRAIN_BENCH", help="keycld's build/train_bench")
    parser.add_argument("--kernels", default="winograd,libtorch",
                        help="keycld's U-Net kernels to time with --compare (comma-separated: "
                             "winograd, onednn, libtorch; docs/benchmarks.md)")
    parser.add_argument("--integrator", default="euler", choices=["euler", "rk4"],
                        help="the dynamics loss's integrator: euler (the paper's) or rk4 with "
                             "max_acceleration 1000 (the cpu-quick presets after warm-up)")
    parser.add_argument("--horizon", type=int, default=4,
                        help="P, the integrator steps of the dynamics loss from every start (4 the "
                             "paper's; 16 the main job's after its epoch 8)")
    parser.add_argument("--check", metavar="RUN", help="compare with keycld's loss on a run")
    args = parser.parse_args()
    if not 1 <= args.horizon <= args.frames - 2:
        sys.exit(f"python_step: --horizon must be in [1, frames - 2 = {args.frames - 2}]")
    torch.set_num_threads(args.threads)
    if args.check:
        worst, grad = check_against(args.check, args.integrator, args.horizon)
        sys.exit(0 if worst < 1e-6 and grad < 1e-5 else 1)
    print(f"torch {torch.__version__}, {args.threads} threads, {args.frames} frames, {args.env}, "
          f"{args.integrator}, horizon {args.horizon}, medians of {args.repeats} steps")
    for name in args.settings.split(","):
        if name not in SETTINGS:
            sys.exit(f"python_step: --settings {name}: expected some of {sorted(SETTINGS)}")
        size, hidden = SETTINGS[name]
        py = statistics.median(time_python_step(size, hidden, args.frames, args.env, args.repeats,
                                                args.integrator, args.horizon))
        line = f"{name:10s} {size}px h={hidden}: python {py:.3f} s/step"
        if args.compare:
            if args.env != "pendulum":
                sys.exit("python_step: --compare times keycld's pendulum step only")
            for kernels in args.kernels.split(","):
                if kernels not in KERNELS:
                    sys.exit(f"python_step: --kernels {kernels}: expected one of {sorted(KERNELS)}")
                cpp = statistics.median(time_keycld_step(args.compare, size, hidden, args.frames,
                                                         args.threads, args.repeats, kernels,
                                                         args.integrator == "rk4",
                                                         args.horizon))
                line += f"; keycld ({kernels}) {cpp:.3f} s/step, {py / cpp:.2f}x faster"
        print(line, flush=True)


if __name__ == "__main__":
    main()
