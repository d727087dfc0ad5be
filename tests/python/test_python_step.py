"""bench/python_step.py, the plain-PyTorch step keycld's speed is measured against, computes the
same loss and gradients as keycld's SequenceLoss (else the comparison would be void)."""

import importlib.util

import torch

from conftest import ROOT


def load_python_step():
    spec = importlib.util.spec_from_file_location("python_step", ROOT / "bench" / "python_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_python_step_is_keyclds_step(tiny):
    step = load_python_step()
    torch.set_num_threads(1)
    worst_loss, worst_gradient = step.check_against(tiny["run"])
    assert worst_loss < 1e-6  # measured: 0 (bit-identical)
    assert worst_gradient < 1e-5  # measured: 5e-7


def test_the_python_step_is_keyclds_step_with_rk4_and_a_longer_horizon(tiny):
    # The main job's loss after its epoch 8 is RK4 with P = 16; the tiny run's 10 frames allow
    # P = 6, which runs the same code (a horizon other than the default 4, the bounded RK4).
    step = load_python_step()
    torch.set_num_threads(1)
    worst_loss, worst_gradient = step.check_against(tiny["run"], "rk4", 6)
    assert worst_loss < 1e-6
    assert worst_gradient < 1e-5


def test_the_python_dihedral_transforms_invert():
    step = load_python_step()
    image = torch.arange(2 * 4 * 4, dtype=torch.float32).view(2, 4, 4)
    for t in range(8):
        assert torch.equal(step.dihedral_inverse(step.dihedral(image, t), t), image)
    assert len({tuple(step.dihedral(image, t).flatten().tolist()) for t in range(8)}) == 8


def test_the_python_rk4_step_is_exact_for_a_constant_acceleration():
    step = load_python_step()
    model = step.KeyCLD("pendulum", 1, 1, 8, 16, integrator="rk4")
    a = torch.tensor([[0.3, -9.81]], dtype=torch.float64)
    model.bounded_acceleration = lambda x, v, u: a.expand_as(x)
    x = torch.tensor([[0.1, -0.4]], dtype=torch.float64)
    v = torch.tensor([[1.5, 0.2]], dtype=torch.float64)
    dt = model.dt
    x1, v1 = model.step(x, v, None)
    assert torch.allclose(x1, x + v * dt + a * dt**2 / 2, rtol=0, atol=1e-15)
    assert torch.allclose(v1, v + a * dt, rtol=0, atol=1e-15)


def test_trace_summary_counts_self_time_of_nested_operators():
    spec = importlib.util.spec_from_file_location("trace_summary",
                                                  ROOT / "bench" / "trace_summary.py")
    summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(summary)

    def event(name, ts, dur, tid=1):
        return {"name": name, "ph": "X", "ts": ts, "dur": dur, "tid": tid, "pid": "CPU"}

    # A [0, 100) holds B [10, 40) (which holds C [15, 25)) and D [50, 60); E [200, 230) alone;
    # F on another thread.
    events = [event("A", 0, 100), event("B", 10, 30), event("C", 15, 10), event("D", 50, 10),
              event("E", 200, 30), event("F", 5, 7, tid=2), {"ph": "M", "name": "meta"}]
    totals, wall = summary.self_times(events)
    assert {name: t for name, (t, _) in totals.items()} == {
        "A": 60, "B": 20, "C": 10, "D": 10, "E": 30, "F": 7}
    assert all(calls == 1 for _, calls in totals.values())
    assert wall == 100 + 30 + 7
