"""keycld.load_run, predict, train and evaluate against the CLI's outputs on a tiny run, and
the gradients of rollout, encode and the energy against finite differences."""

import csv
import json
import math
import signal
import subprocess
import sys
import time

import h5py
import pytest
import torch

import keycld
from conftest import ROOT, run_cli


@pytest.fixture(scope="module")
def run(tiny):
    return keycld.load_run(tiny["run"], threads=1)


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def validation_frames(tiny, index):
    with h5py.File(tiny["data"], "r") as f:
        dataset_run = int(f["split/validation"][index])
        return dataset_run, torch.from_numpy(f["images"][dataset_run]), f.attrs["vpt_epsilon"]


def test_run_describes_itself(run, tiny):
    assert run.spec["env"] == "pendulum" and run.spec["num_keypoints"] == 1
    assert run.spec["hidden"] == 8 and run.spec["image_size"] == 16
    assert run.train_steps == 6
    assert run.config["model"]["hidden"] == 8
    assert run.dataset_info["runs"] == 6
    assert run.has_energy and run.device == torch.device("cpu")
    names = run.named_parameters()
    assert any(n.startswith("estimator") for n in names)
    assert any(n.startswith("potential") for n in names)


def test_keypoints_and_prediction_equal_the_cli(run, tiny):
    rows = read_csv(tiny["predict_csv"])
    _, images, epsilon = validation_frames(tiny, 0)
    keypoints, heatmaps = run.encode(images)  # uint8 [10, 16, 16, 3]
    assert keypoints.shape == (10, 1, 2) and heatmaps.shape == (10, 1, 16, 16)
    assert torch.allclose(heatmaps.sum((2, 3)), torch.ones(10, 1), atol=1e-5)
    for t in range(10):  # the CLI's estimate column, printed with 6 decimals
        assert keypoints[t, 0, 0].item() == pytest.approx(float(rows[t]["est_x0"]), abs=2e-6)
        assert keypoints[t, 0, 1].item() == pytest.approx(float(rows[t]["est_y0"]), abs=2e-6)
    p = run.predict(run=0, frames=14)  # beyond the 10 stored frames: re-simulated truth
    assert p["keypoints"].shape == (14, 1, 2) and p["images"].shape == (14, 3, 16, 16)
    assert p["truth"].shape == (14, 16, 16, 3) and p["epsilon"] == pytest.approx(epsilon)
    for t in range(14):
        assert p["keypoints"][t, 0, 0].item() == pytest.approx(float(rows[t]["pred_x0"]), abs=2e-6)
        assert p["keypoints"][t, 0, 1].item() == pytest.approx(float(rows[t]["pred_y0"]), abs=2e-6)
        assert p["mse"][t].item() == pytest.approx(float(rows[t]["mse"]), rel=1e-5)
    first_invalid = next((t for t, r in enumerate(rows) if r["valid"] == "0"), 13)
    assert p["vpt"] == first_invalid
    # From images instead of a run index: the same keypoints for the same three frames.
    dataset_run = p["dataset_run"]
    with h5py.File(tiny["data"], "r") as f:
        action = f["action"][dataset_run, 0]
    q = run.predict(images=images[:3], action=action, frames=14)
    assert torch.allclose(q["keypoints"], p["keypoints"], atol=1e-6)


def test_evaluate_equals_the_cli(tiny, tmp_path):
    report = keycld.evaluate(tiny["run"], out=tmp_path, plots=False, threads=1)
    cli = tiny["evaluation"]
    assert report["vpt"] == cli["vpt"]["per_run"]
    assert report["vpt_mean"] == pytest.approx(cli["vpt"]["mean"])
    assert report["validation_runs"] == cli["validation_runs"]
    assert report["masses"] == pytest.approx(cli["masses"])
    assert report["mean_frame_vpt"] == pytest.approx(cli["mean_frame_vpt"]["mean"])
    assert report["still_frame_vpt"] == pytest.approx(cli["still_frame_vpt"]["mean"])
    assert (tmp_path / "evaluation.json").exists()


def test_rollout_gradient_matches_finite_differences(run):
    run.dynamics_dtype = torch.float64
    try:
        x0 = torch.tensor([[0.3, 0.5]], dtype=torch.float64, requires_grad=True)
        v0 = torch.tensor([[0.4, -0.2]], dtype=torch.float64, requires_grad=True)
        u = torch.tensor([0.7], dtype=torch.float64, requires_grad=True)

        def final_x(x0, v0, u):
            x, _ = run.rollout(x0, v0, u, frames=6, solver="rk4")
            return x[:, -1]

        assert torch.autograd.gradcheck(final_x, (x0, v0, u), eps=1e-6, atol=1e-6)
        # The start velocity is projected onto the constraints' tangent space first (as predict
        # does), unless asked not to.
        tangent = run.project_velocity(x0, v0)
        assert not torch.allclose(tangent, v0)
        projected, _ = run.rollout(x0, v0, u, frames=6, solver="rk4")
        given, _ = run.rollout(x0, tangent, u, frames=6, solver="rk4", project=False)
        raw, _ = run.rollout(x0, v0, u, frames=6, solver="rk4", project=False)
        assert torch.equal(projected, given) and not torch.allclose(raw, given)
        # Dormand–Prince at tight tolerances: its step-size control is not differentiated, so
        # the gradient is that of the accepted steps, within the tolerance of the truth.
        x, xdot = run.rollout(x0, v0, u, frames=6, solver="dopri5", rtol=1e-10, atol=1e-10)
        assert x.shape == (1, 6, 2) and xdot.shape == (1, 6, 2)
        grad = torch.autograd.grad(x[0, -1, 0], x0)[0]
        step = 1e-6
        plus, _ = run.rollout(x0.detach() + torch.tensor([[step, 0]], dtype=torch.float64), v0,
                              u, frames=6, rtol=1e-12, atol=1e-12)
        minus, _ = run.rollout(x0.detach() - torch.tensor([[step, 0]], dtype=torch.float64), v0,
                               u, frames=6, rtol=1e-12, atol=1e-12)
        fd = (plus[0, -1, 0] - minus[0, -1, 0]) / (2 * step)
        assert grad[0, 0].item() == pytest.approx(fd.item(), rel=1e-4, abs=1e-6)
    finally:
        run.dynamics_dtype = torch.float32
    assert run.dynamics_dtype == torch.float32


def test_energy_terms_and_their_gradients(run):
    run.dynamics_dtype = torch.float64
    try:
        x = torch.tensor([[0.2, 0.6], [-0.5, 0.1]], dtype=torch.float64, requires_grad=True)
        V = run.potential(x)
        assert V.shape == (2,)
        dV = run.potential_gradient(x)
        assert dV.shape == (2, 2)
        for i in range(2):  # central differences of V
            for j in range(2):
                e = torch.zeros(2, 2, dtype=torch.float64)
                e[i, j] = 1e-6
                fd = (run.potential(x.detach() + e)[i] - run.potential(x.detach() - e)[i]) / 2e-6
                assert dV[i, j].item() == pytest.approx(fd.item(), rel=1e-6, abs=1e-9)
        assert run.input_matrix(x).shape == (2, 2, 1)
        M = run.mass_matrix()
        assert M.shape == (2, 2) and torch.all(torch.diag(M) > 0)
        assert torch.count_nonzero(M - torch.diag(torch.diag(M))) == 0
        # the learned dynamics satisfy M ẍ = −∇V + B u + Dᵀλ: the tangent part of the force
        v = run.project_velocity(x, torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64))
        a = run.acceleration(x, v, torch.tensor([0.3], dtype=torch.float64))
        assert a.shape == (2, 2) and torch.isfinite(a).all()
    finally:
        run.dynamics_dtype = torch.float32


def test_gradients_reach_images_and_parameters(run, tiny):
    _, images, _ = validation_frames(tiny, 0)
    frames = (images[:3].permute(0, 3, 1, 2).float() / 255).requires_grad_(True)
    keypoints, _ = run.encode(frames)
    (keypoints[:, 0, 0].sum()).backward()
    gradient = frames.grad
    assert gradient.abs().sum() > 0
    # Along the unit gradient direction the derivative is |∇|: a central difference in float32
    # (the estimator is piecewise smooth, ReLU, so h is small but above float32 noise).
    direction, h = gradient / gradient.norm(), 1e-3
    with torch.no_grad():
        plus = run.encode(frames + h * direction)[0][:, 0, 0].sum()
        minus = run.encode(frames - h * direction)[0][:, 0, 0].sum()
    assert ((plus - minus) / (2 * h)).item() == pytest.approx(gradient.norm().item(), rel=0.02)
    # A loss on a rollout trains the potential from PyTorch: a step against its gradient lowers
    # it (the final velocity of an Euler rollout from rest, pulled towards a target).
    params = {n: p for n, p in run.named_parameters().items() if n.startswith("potential")}
    x0 = keypoints.detach()[1].reshape(1, 2).double()
    goal = torch.tensor([0.5, 0.0])

    def loss():
        _, xdot = run.rollout(x0, torch.zeros(1, 2), frames=4, solver="euler")
        return (xdot[0, -1] - goal).square().sum()

    before = loss()
    before.backward()
    # Every weight of V shapes the motion, except its output bias (a constant offset of the
    # energy): that one gets no gradient.
    offset = max(n for n in params if n.endswith("bias"))
    for n, p in params.items():
        if n == offset:
            assert p.grad is None or p.grad.abs().sum() == 0, n
        else:
            assert p.grad is not None and p.grad.abs().sum() > 0, n
    saved = {n: p.detach().clone() for n, p in params.items()}
    norm = torch.sqrt(sum(p.grad.square().sum() for p in params.values() if p.grad is not None))
    with torch.no_grad():
        for p in params.values():
            if p.grad is not None:
                p -= 1e-2 * p.grad / norm
        after = loss()
    assert after.item() < before.item()
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(saved[n])
    for p in run.parameters():
        p.grad = None
    with torch.no_grad():
        assert loss().item() == before.item()


def test_control_action_is_the_energy_shaping_law(run, tiny_full):
    with pytest.raises(keycld.InputError, match="full"):  # an unactuated run: B never trained
        run.control_action([0.3, 0.4], [0.0, 0.0], [0.0, 0.5])
    run = keycld.load_run(tiny_full, threads=1)
    run.dynamics_dtype = torch.float64
    try:
        x = torch.tensor([0.3, 0.4], dtype=torch.float64)
        xdot = torch.tensor([0.2, -0.15], dtype=torch.float64)
        target = torch.tensor([0.0, 0.5], dtype=torch.float64)
        kp, kd = 25.0, 10.0
        u = run.control_action(x, xdot, target, kp=kp, kd=kd)
        # u = (P B)⁺ P (∇V − k_p M (x − x*) − k_d M ẋ), P the tangent projection at x
        m = torch.diag(run.mass_matrix()).double()
        f = run.potential_gradient(x)[0] - kp * m * (x - target) - kd * m * xdot
        P = torch.stack([run.project_velocity(x, e)[0] for e in torch.eye(2, dtype=torch.float64)],
                        dim=1)
        B = run.input_matrix(x)[0].double()
        expected = torch.linalg.pinv(P @ B) @ (P @ f)
        assert u.shape == (1,)
        assert u[0].item() == pytest.approx(expected[0].item(), rel=1e-6)
        clipped = run.control_action(x, xdot, target, kp=kp, kd=kd, u_max=1e-3)
        assert abs(clipped[0].item()) == pytest.approx(min(1e-3, abs(expected[0].item())))
    finally:
        run.dynamics_dtype = torch.float32


def test_control_action_of_a_lag_model_is_its_angle_law(tiny, tiny_full, tmp_path):
    # lag-cavae's states are (cos q, sin q); its law is u = (∂V/∂q − K_p wrap(q − q*) − K_d q̇)/g
    # with unit gains. V and g are not exposed, so check the law's structure: affine in k_p and
    # k_d with the slopes −wrap(q − q*)/g and −q̇/g, and blind to the length of x.
    config = tmp_path / "lag.toml"
    config.write_text("[model]\nmodel = \"lag-cavae\"\n[train]\nthreads = 1\naugment = false\n"
                      "[eval]\nval_runs = 1\n")
    run_cli("train", "--config", config, "--data",
            tiny["dir"] / "pendulum-full-16px-6x10-seed3.h5", "--out", tmp_path / "lag",
            "--steps", 2, "--threads", 1)
    run = keycld.load_run(tmp_path / "lag", threads=1)
    q, q_target, w = 2.9, -2.9, 0.7
    x = [math.cos(q), math.sin(q)]
    xdot = [-w * math.sin(q), w * math.cos(q)]
    target = [math.cos(q_target), math.sin(q_target)]
    e = 2.9 * 2 - 2 * math.pi  # q − q* the short way round: 5.8 − 2π

    def u(kp, kd, scale=1.0):
        return run.control_action([scale * v for v in x], [scale * v for v in xdot], target,
                                  kp=kp, kd=kd, gain_scale="unit")[0].item()

    base = u(1.0, 0.0)
    slope_kp = u(2.0, 0.0) - base  # −e/g
    slope_kd = u(1.0, 1.0) - base  # −(‖x‖²-normalised q̇ = w)/g
    assert slope_kp != 0
    assert u(5.0, 0.0) == pytest.approx(base + 4 * slope_kp, rel=1e-9, abs=1e-12)
    assert slope_kd / slope_kp == pytest.approx(w / e, rel=1e-6)
    assert u(3.0, 2.0, scale=3.0) == pytest.approx(base + 2 * slope_kp + 2 * slope_kd, rel=1e-6)
    clipped = run.control_action(x, xdot, target, kp=25.0, kd=10.0, u_max=1e-4)
    assert abs(clipped[0].item()) <= 1e-4
    with pytest.raises(keycld.InputError, match="off the origin"):
        run.control_action([0.0, 0.0], xdot, target)


def test_control_action_of_a_two_coordinate_lag_model(tiny, tmp_path):
    # The cartpole's lag-vae: states (x, 0) for the cart and (cos θ, sin θ) for the pole. Its law
    # u = g⁺(∂V/∂q − K_p (q − q*) − K_d q̇) is affine in k_p and k_d; with the cart's velocity
    # alone the k_d slope is −g⁺ (q̇_x, 0), so it doubles with q̇_x and ignores the pair's second
    # component, which is not a coordinate.
    run_cli("generate", "--env", "cartpole", "--control", "full", "--runs", 6, "--frames", 10,
            "--size", 16, "--seed", 3, "--workers", 1, "--out", tmp_path)
    config = tmp_path / "lag.toml"
    config.write_text("[model]\nmodel = \"lag-vae\"\n[train]\nthreads = 1\naugment = false\n"
                      "[eval]\nval_runs = 1\n")
    run_cli("train", "--config", config, "--data",
            tmp_path / "cartpole-full-16px-6x10-seed3.h5", "--out", tmp_path / "lag",
            "--steps", 2, "--threads", 1)
    run = keycld.load_run(tmp_path / "lag", threads=1)
    th, th_target = 2.9, -2.9
    x = [0.2, 0.0, math.cos(th), math.sin(th)]
    target = [-0.1, 0.0, math.cos(th_target), math.sin(th_target)]

    def u(kp, kd, vx=0.0, vy=0.0):
        return run.control_action(x, [vx, vy, 0.0, 0.0], target, kp=kp, kd=kd,
                                  gain_scale="unit")

    base = u(1.0, 0.0)
    assert base.shape == (2,)
    slope_kp = u(2.0, 0.0) - base
    assert torch.allclose(u(5.0, 0.0), base + 4 * slope_kp, rtol=1e-9, atol=1e-12)
    slope_kd = u(1.0, 1.0, vx=0.5) - u(1.0, 0.0, vx=0.5)
    assert torch.allclose(u(1.0, 1.0, vx=1.0) - u(1.0, 0.0, vx=1.0), 2 * slope_kd, rtol=1e-6)
    assert torch.allclose(u(1.0, 1.0, vx=0.5, vy=3.0), u(1.0, 1.0, vx=0.5), rtol=1e-12)
    with pytest.raises(keycld.InputError, match="off the origin"):
        run.control_action([0.2, 0.0, 0.0, 0.0], [0.0] * 4, target)


def test_train_from_python_equals_the_cli_and_resumes(tiny, tmp_path):
    settings = {"train": {"max_steps": 3}}
    summary = keycld.train(tmp_path / "py", config=tiny["config"], data=tiny["data"],
                           settings=settings)
    assert summary["steps"] == 3 and summary["steps_this_call"] == 3
    run_cli("train", "--config", tiny["config"], "--data", tiny["data"], "--out",
            tmp_path / "cli", "--steps", 3, "--threads", 1)
    a = keycld.load_run(tmp_path / "py", threads=1).named_parameters()
    b = keycld.load_run(tmp_path / "cli", threads=1).named_parameters()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[n], b[n]) for n in a)  # same seed, same thread count: bit for bit
    more = keycld.train(tmp_path / "py", resume=True, settings={"train": {"max_steps": 5}})
    assert more["steps"] == 5 and more["steps_this_call"] == 2
    with pytest.raises(keycld.InputError, match="already holds"):  # never overwrites a run
        keycld.train(tmp_path / "py", config=tiny["config"], data=tiny["data"])


def test_bad_input_raises_the_right_exception(run, tiny, tmp_path):
    with pytest.raises(keycld.IoError) as e:
        keycld.load_run(tmp_path / "nothing")
    assert isinstance(e.value, OSError) and "\n" not in str(e.value)
    with pytest.raises(keycld.InputError, match=r"\[T, 16, 16, 3\]"):
        run.encode(torch.zeros(2, 32, 32, 3, dtype=torch.uint8))
    with pytest.raises(keycld.InputError, match=r"\[B, 2\]"):
        run.rollout(torch.zeros(1, 4), torch.zeros(1, 4), frames=3)
    with pytest.raises(keycld.InputError):
        run.rollout(torch.zeros(1, 2), torch.zeros(1, 2), frames=3, solver="leapfrog")
    with pytest.raises(keycld.InputError, match="out of range"):
        run.predict(run=7, frames=5)
    with pytest.raises(keycld.InputError):
        run.predict(run=0, images=torch.zeros(3, 16, 16, 3, dtype=torch.uint8))
    with pytest.raises(keycld.InputError):
        run.control_action([0.0, 0.5], [0.0, 0.0], [0.0, 0.5], kp=math.nan)
    with pytest.raises(keycld.InputError, match="cannot change"):
        keycld.train(tiny["run"], resume=True, settings={"model": {"hidden": 16}})
    with pytest.raises(keycld.InputError, match="floating"):
        run.rollout(torch.zeros(1, 2, dtype=torch.bool), torch.zeros(1, 2), frames=3)
    with pytest.raises(keycld.InputError, match="unknown"):
        keycld.train(tmp_path / "r", data=tiny["data"], settings={"train": {"epochz": 2}})
    with pytest.raises(keycld.InputError):
        keycld.train(tmp_path / "r", data=tiny["data"], settings={"train": {"lr": -1.0}})
    # A list reaches the config as a TOML array; the pendulum has one constraint, not two.
    with pytest.raises(keycld.InputError, match="con_weights has 2 weights"):
        keycld.train(tmp_path / "r", data=tiny["data"],
                     settings={"train": {"con_weights": [1.0, 0.0]}})
    with pytest.raises(keycld.InputError, match="list of numbers"):
        keycld.train(tmp_path / "r", data=tiny["data"], settings={"train": {"con_weights": ["x"]}})
    with pytest.raises(keycld.IoError):
        keycld.evaluate(tmp_path / "nothing")
    with pytest.raises(keycld.FormatError):
        bad = tmp_path / "bad.h5"
        bad.write_bytes(b"not hdf5")
        keycld.load_run(tiny["run"], data=bad)
    with pytest.raises(keycld.NumericalError):
        run.rollout(torch.tensor([[0.0, 0.5]]), torch.tensor([[1e30, 0.0]]), frames=50,
                    solver="euler")


def test_ctrl_c_stops_training_saves_and_raises_keyboard_interrupt(tiny, tmp_path):
    out = tmp_path / "run"
    script = (
        "import sys, keycld\n"
        "try:\n"
        f"    keycld.train({str(out)!r}, config={str(tiny['config'])!r}, "
        f"data={str(tiny['data'])!r}, settings={{'train': {{'max_steps': 100000}}}})\n"
        "except KeyboardInterrupt as e:\n"
        "    print('KeyboardInterrupt:', e)\n"
        "    sys.exit(3)\n")
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not (out / "checkpoints" / "epoch-0001.pt").exists():  # one epoch done
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()[0]
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    text = p.communicate(timeout=120)[0]
    assert p.returncode == 3, text
    assert "KeyboardInterrupt: " in text and "interrupted" in text.lower()
    steps = keycld.load_run(out, threads=1).train_steps
    assert steps >= 5  # at least the first epoch, saved at the interruption
    more = keycld.train(out, resume=True, settings={"train": {"max_steps": steps + 2}})
    assert more["steps"] == steps + 2


def test_arguments_that_would_be_ignored_or_injected_are_refused(run, tiny, tmp_path):
    with pytest.raises(keycld.InputError, match="not a section or key"):
        keycld.train(tmp_path / "r", config=tiny["config"], data=tiny["data"],
                     settings={"train": {"seed = 5\n[model]\nhidden": 16}})
    with pytest.raises(keycld.InputError, match="preset"):
        keycld.train(tmp_path / "r", config=tiny["config"], env="cartpole")
    with pytest.raises(keycld.InputError, match="action"):
        run.predict(run=0, action=[5.0])
    with pytest.raises(keycld.InputError, match="exactly one"):
        run.rollout([0.3, 0.4], [0.0, 0.0], times=[0.0, 0.02], frames=10)
    with pytest.raises(keycld.InputError, match=r"\(0, 1\]"):
        run.rollout([0.3, 0.4], [0.0, 0.0], frames=3, rtol=math.inf, atol=math.inf)
    with pytest.raises(keycld.InputError, match="device"):
        keycld.load_run(tiny["run"], device="meta")
    with torch.inference_mode(), pytest.raises(keycld.InputError, match="no_grad"):
        run.rollout([0.3, 0.4], [0.0, 0.0], frames=3)
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(keycld.IoError, match="not a folder"):
        keycld.evaluate(tiny["run"], out=afile)


def test_start_refinement_fits_the_first_frames(run, tiny):
    _, images, _ = validation_frames(tiny, 0)
    plain = run.predict(run=0, frames=10)
    refined = run.predict(run=0, frames=10, refine_start=50)
    averaged = run.predict(run=0, frames=10, tta=True)
    assert averaged["keypoints"].shape == plain["keypoints"].shape
    assert not torch.equal(averaged["keypoints"], plain["keypoints"])
    # Render and compare lowers the error of the three frames it fits (docs/evaluation.md).
    assert refined["mse"][:3].sum() < plain["mse"][:3].sum()
    # From the images: the same refined start, hence the same prediction.
    with h5py.File(tiny["data"], "r") as f:
        action = f["action"][refined["dataset_run"], 0]
    q = run.predict(images=images[:3], action=action, frames=10, refine_start=50)
    assert torch.allclose(q["keypoints"], refined["keypoints"], atol=1e-5)
    with pytest.raises(keycld.InputError):
        run.predict(run=0, frames=10, tta=1)
    for bad in (-1, 1.5, True):
        with pytest.raises(keycld.InputError):
            run.predict(run=0, frames=10, refine_start=bad)
    with pytest.raises(keycld.InputError):
        run.predict(run=0, frames=10, refine_start=5, refine_lr=0.0)


def test_pendulum_angle_error_lists_the_start_errors_of_every_validation_run(tiny, tmp_path):
    """scripts/pendulum_angle_error.py --per-run: one row per validation run with that run's VPT
    from evaluation.json; an evaluation of another data set is refused with a message."""
    script = ROOT / "scripts" / "pendulum_angle_error.py"
    per_run = tiny["evaluation"]["vpt"]["per_run"]

    def call(*extra):
        return subprocess.run([sys.executable, str(script), str(tiny["run"]), "--per-run", *extra],
                              capture_output=True, text=True)

    p = call()
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    head = lines.index("VPT  start θ  angle error (frames 0-2)  start velocity error (°/frame)")
    rows = [line.split() for line in lines[head + 1:head + 1 + len(per_run)]]
    assert sorted(float(r[0]) for r in rows) == sorted(per_run)
    for r in rows:
        assert -180.0 <= float(r[1]) <= 180.0 and math.isfinite(float(r[3]))
    other = dict(tiny["evaluation"])
    other["vpt"] = dict(other["vpt"], per_run=per_run + [1.0])
    wrong = tmp_path / "evaluation.json"
    wrong.write_text(json.dumps(other))
    p = call(str(wrong))
    assert p.returncode != 0 and "validation runs" in p.stderr
    p = call(str(tmp_path / "missing.json"))
    assert p.returncode != 0 and "cannot read the per-run VPT" in p.stderr
