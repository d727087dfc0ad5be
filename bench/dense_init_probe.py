"""How the first weights of V and B decide what the dynamics networks learn, without pixels.

The constrained pendulum's potential V and input matrix B (KeyCLD §3: CELU MLPs 2 → h → h → 1
and 2 → h → h → 2, a learned mass m²) are fitted to exact keypoints x = 0.5 (sin q, cos q) of
pendulum runs simulated as the data sets are (docs/method.md §7: q ∈ U[−π, π), q̇ ∈ U[−0.1, 0.1],
one constant action U[−2, 2] per run, 20 % of runs unactuated, MuJoCo's semi-implicit Euler at
0.02 s, gear 2, 1 kg at 0.5 m) with the training's dynamics loss: central-difference velocities
projected on the circle, P = 4 RK4 steps from every start, Adam with the dynamics rate 6e-5,
each gradient element clipped at 5, one run per step. Every tenth of the steps it prints, at
angles q from upright, the learned tangential input acceleration (B·t / m², per unit action)
and gravity (−∇V·t / m²) over the truth (gear/(m L²)·0.5 and (g/L) sin q · 0.5).

    /usr/bin/python3 bench/dense_init_probe.py --init paper --steps 13500
    /usr/bin/python3 bench/dense_init_probe.py --init fan-in --steps 13500

"paper": weights N(0, 0.01²) (KeyCLD §3). "fan-in": U(±1/√fan_in), LibTorch's Linear default.
Biases start at 0 in both. The true B(x) is 4·(cos q, −sin q): two input-output modes of the
network (B_x ∝ y and B_y ∝ x). docs/method.md (Departures) has the figures.
"""

import argparse
import math

import numpy as np
import torch

RADIUS, DT, HORIZON = 0.5, 0.02, 4
GRAVITY, LENGTH, MASS, GEAR = 9.81, 0.5, 1.0, 2.0


def simulate(runs, frames, seed):
    rng = np.random.default_rng(seed)
    q = rng.uniform(-math.pi, math.pi, runs)
    qdot = rng.uniform(-0.1, 0.1, runs)
    u = rng.uniform(-2, 2, runs)
    u[rng.uniform(size=runs) < 0.2] = 0.0
    angles = np.zeros((runs, frames))
    for t in range(frames):  # frame 0 is after the first step
        qddot = GRAVITY / LENGTH * np.sin(q) + GEAR * u / (MASS * LENGTH**2)
        qdot = qdot + DT * qddot
        q = q + DT * qdot
        angles[:, t] = q
    x = np.stack([RADIUS * np.sin(angles), RADIUS * np.cos(angles)], -1)
    return torch.tensor(x, dtype=torch.float32), torch.tensor(u, dtype=torch.float32)


def mlp(out_features, hidden, init):
    layers = [torch.nn.Linear(2, hidden), torch.nn.CELU(), torch.nn.Linear(hidden, hidden),
              torch.nn.CELU(), torch.nn.Linear(hidden, out_features)]
    for layer in layers:
        if isinstance(layer, torch.nn.Linear):
            if init == "paper":
                torch.nn.init.normal_(layer.weight, 0.0, 0.01)
            else:
                bound = 1.0 / math.sqrt(layer.in_features)
                torch.nn.init.uniform_(layer.weight, -bound, bound)
            torch.nn.init.zeros_(layer.bias)
    return torch.nn.Sequential(*layers)


class Pendulum(torch.nn.Module):
    """ẍ = M⁻¹(f − Dᵀλ) on the circle ‖x‖ = 0.5, f = −∇V + B u (docs/method.md §5)."""

    def __init__(self, hidden, init):
        super().__init__()
        self.potential = mlp(1, hidden, init)
        self.input_matrix = mlp(2, hidden, init)
        self.m = torch.nn.Parameter(torch.ones(1))

    def acceleration(self, x, v, u):
        if not x.requires_grad:
            x = x.requires_grad_(True)
        grad_v = torch.autograd.grad(self.potential(x).sum(), x, create_graph=True)[0]
        force = -grad_v + self.input_matrix(x) * u[:, None]
        inverse_mass = 1.0 / self.m.square()
        norm = x.norm(dim=-1, keepdim=True)
        n = x / norm
        curvature = (v.square().sum(-1) - (n * v).sum(-1).square()) / norm[:, 0]
        lam = (inverse_mass * (n * force).sum(-1) + curvature) / inverse_mass
        return inverse_mass * (force - n * lam[:, None])

    def rk4(self, x, v, u):
        def f(x, v):
            return v, self.acceleration(x, v, u)

        k1 = f(x, v)
        k2 = f(x + DT / 2 * k1[0], v + DT / 2 * k1[1])
        k3 = f(x + DT / 2 * k2[0], v + DT / 2 * k2[1])
        k4 = f(x + DT * k3[0], v + DT * k3[1])
        return (x + DT / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0]),
                v + DT / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1]))


def ratios(model, angles):
    q = torch.tensor(angles)
    x = torch.stack([RADIUS * torch.sin(q), RADIUS * torch.cos(q)], -1).requires_grad_(True)
    tangent = torch.stack([torch.cos(q), -torch.sin(q)], -1)
    inverse_mass = 1.0 / model.m.square().detach()
    grad_v = torch.autograd.grad(model.potential(x).sum(), x)[0]
    with torch.no_grad():
        b_t = (model.input_matrix(x) * tangent).sum(-1) * inverse_mass
        g_t = -(grad_v * tangent).sum(-1) * inverse_mass
    b_true = RADIUS * GEAR / (MASS * LENGTH**2)
    g_true = RADIUS * GRAVITY / LENGTH * torch.sin(q)
    return (b_t / b_true).tolist(), (g_t / g_true).tolist()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--init", choices=["paper", "fan-in"], required=True)
    ap.add_argument("--steps", type=int, default=13500)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--lr", type=float, default=6e-5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    x_all, u_all = simulate(500, 50, 0)
    train = 450
    model = Pendulum(args.hidden, args.init)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    rng = np.random.default_rng(args.seed)
    angles = [0.6, 1.37, 1.77, 2.95, -1.37, -1.77]
    print("angle from upright (rad):", " ".join(f"{a:+.2f}" for a in angles))
    every = max(1, args.steps // 10)
    for step in range(1, args.steps + 1):
        r = int(rng.integers(train))
        x = x_all[r]
        v = (x[2:] - x[:-2]) / (2 * DT)
        x0 = x[1:-1]
        n = x0 / x0.norm(dim=-1, keepdim=True)
        v = v - n * (n * v).sum(-1, keepdim=True)
        starts = x0.shape[0] - HORIZON
        xs, vs = x0[:starts], v[:starts]
        u = u_all[r].expand(starts)
        loss = 0.0
        for j in range(1, HORIZON + 1):
            xs, vs = model.rk4(xs, vs, u)
            loss = loss + (xs - x[1 + j:1 + j + starts]).square().sum()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            if p.grad is not None:
                p.grad.clamp_(-5.0, 5.0)
        opt.step()
        if step % every == 0 or step == args.steps:
            b, g = ratios(model, angles)
            print(f"step {step:6d}  loss {loss.item():.2e}  input/true "
                  + " ".join(f"{r:5.2f}" for r in b) + "  gravity/true "
                  + " ".join(f"{r:5.2f}" for r in g), flush=True)


if __name__ == "__main__":
    main()
