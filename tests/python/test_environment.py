"""keycld.Environment and keycld.generate against physics, geometry and the data set file."""

import math
import os

import h5py
import numpy as np
import pytest
import torch

import keycld

G = 9.81  # MuJoCo's default gravity (m/s²)
# assets/envs/pendulum.xml: hinge 0.6 m above the floor, massless 0.5 m pole, a 1 kg sphere of
# radius 0.05 m at its end: moment of inertia about the hinge m l² + 2/5 m r².
INERTIA = 0.5**2 + 0.4 * 0.05**2


def test_pendulum_energy_is_that_of_the_mjcf_body():
    env = keycld.Environment("pendulum")
    assert (env.nq, env.nv, env.nu, env.dt) == (1, 1, 1, 0.02)
    theta, omega = math.pi / 3, 1.5
    env.reset([theta], [omega])
    expected = G * (0.6 + 0.5 * math.cos(theta)) + 0.5 * INERTIA * omega**2
    assert env.total_energy() == pytest.approx(expected, rel=1e-7)


def test_pendulum_small_swings_have_the_textbook_period():
    env = keycld.Environment("pendulum")
    env.reset([math.pi - 0.05], [0.0])  # 0.05 rad from hanging straight down
    crossings, previous = [], env.qpos[0].item() - math.pi
    for _ in range(400):
        env.step()
        angle = env.qpos[0].item() - math.pi
        if previous < 0 <= angle:
            crossings.append(env.time)
        previous = angle
    period = np.diff(crossings).mean()
    assert period == pytest.approx(2 * math.pi * math.sqrt(INERTIA / (G * 0.5)), rel=0.005)


def test_keypoints_follow_the_camera_geometry():
    # Camera 2.5 m in front of the plane of motion, level with the hinge: image x ∝ sin θ,
    # image y ∝ cos θ, with the same scale (square pixels).
    env = keycld.Environment("pendulum")
    points = {}
    for theta in (math.pi / 6, math.pi / 2, -math.pi / 2, 0.0):
        env.reset([theta], [0.0])
        points[theta] = env.keypoints(64)
        assert points[theta].shape == (1, 2)
    right = points[math.pi / 2][0]
    assert right[1].item() == pytest.approx(0.0, abs=1e-6)  # MuJoCo's camera frame: float32
    assert points[-math.pi / 2][0, 0].item() == pytest.approx(-right[0].item(), rel=1e-6)
    assert points[math.pi / 6][0, 0].item() == pytest.approx(0.5 * right[0].item(), rel=1e-6)
    assert points[0.0][0, 1].item() == pytest.approx(right[0].item(), rel=1e-6)


def test_generate_and_environment_agree_with_the_file(tmp_path):
    result = keycld.generate(runs=3, frames=4, size=16, seed=5, workers=1, out=tmp_path)
    assert not result["reused"] and result["info"]["runs"] == 3
    again = keycld.generate(runs=3, frames=4, size=16, seed=5, workers=1, out=tmp_path)
    assert again["reused"] and again["path"] == result["path"]
    assert keycld.dataset_info(result["path"])["frames"] == 4
    with h5py.File(result["path"], "r") as f:
        images, qpos = f["images"][...], f["qpos"][...]
    env = keycld.Environment("pendulum")
    for run in range(3):
        env.reset_random(seed=5, run=run)  # the data protocol's draw of run `run`
        for frame in range(4):
            env.step()  # frame 0 is one step after the reset (docs/data.md)
            assert env.qpos.numpy() == pytest.approx(qpos[run, frame], abs=1e-12)
            rgb = env.render(16, numpy=True)
            assert rgb.dtype == np.uint8 and rgb.shape == (16, 16, 3)
            assert np.array_equal(rgb, images[run, frame])


def test_bad_arguments_raise_one_line_errors(tmp_path):
    with pytest.raises(keycld.InputError, match="doublependulum"):
        keycld.Environment("doublependulum")
    with pytest.raises(keycld.IoError):
        keycld.Environment("pendulum", assets=tmp_path)
    env = keycld.Environment("cartpole")
    with pytest.raises(keycld.InputError) as e:
        env.reset([0.0], [0.0])
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError):  # InputError is a ValueError
        env.step(u=[1.0, 2.0, 3.0])
    with pytest.raises(keycld.InputError):
        env.render(4)
    with pytest.raises(keycld.InputError):
        keycld.generate(env="pendulum", control="under", runs=2, frames=3, size=16,
                        out=tmp_path)
    with pytest.raises(keycld.InputError):
        keycld.generate(runs=0, out=tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing half-written
    with pytest.raises(OSError):  # IoError is an OSError
        keycld.dataset_info(tmp_path / "missing.h5")


def test_numbers_keep_float64_and_actions_must_be_finite():
    env = keycld.Environment("pendulum")
    env.reset([0.1], [0.3])  # Python floats are float64, not rounded through float32
    assert env.qpos.item() == 0.1 and env.qvel.item() == 0.3
    for bad in (math.nan, math.inf, 1e11):
        with pytest.raises(keycld.InputError, match="finite"):
            env.step(u=[bad])
    with pytest.raises(keycld.InputError):
        env.keypoints(1)


def test_generate_after_rendering_in_the_same_process(tmp_path):
    # Generation forks render workers; from a process whose OpenGL state exists (a render
    # before), a fork could hang in Mesa. keycld.generate runs in a fresh process instead.
    env = keycld.Environment("pendulum")
    env.render(16)
    result = keycld.generate(runs=2, frames=3, size=16, seed=1, workers=1, out=tmp_path)
    assert keycld.dataset_info(result["path"])["runs"] == 2
    with pytest.raises(keycld.InputError, match="--runs"):  # errors cross the process boundary
        keycld.generate(runs=0, out=tmp_path)


DOUBLE_PENDULUM = (os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                                "double_pendulum", "double_pendulum.toml"))


def test_a_system_description_file_simulates_and_generates(tmp_path):
    # examples/double_pendulum: rods of 0.35 m and 0.3 m from a pivot at (0.05, 0.65) m, seen by
    # a 45° camera 2.5 m away at 0.6 m height (docs/systems.md).
    env = keycld.Environment(DOUBLE_PENDULUM)
    assert (env.name, env.nq, env.nv, env.nu) == ("double_pendulum", 2, 2, 1)
    unit = 1.0 / (2.5 * math.tan(math.pi / 8)) * 32 / 31
    for q in ([0.3, -0.2], [2.0, 1.0]):
        env.reset(q, [0.0, 0.0])
        p = env.keypoints(32).tolist()
        assert math.dist(p[0], (0.05 * unit, 0.05 * unit)) == pytest.approx(0.35 * unit, abs=1e-9)
        assert math.dist(p[0], p[1]) == pytest.approx(0.30 * unit, abs=1e-9)
    r = keycld.generate(DOUBLE_PENDULUM, runs=3, frames=4, size=16, out=tmp_path, workers=1)
    assert r["info"]["system"] == "double_pendulum" and r["info"]["env"] == "custom"
    with h5py.File(r["path"]) as f:
        assert f.attrs["system"] == "double_pendulum"
        assert "distance_to_point" in f.attrs["system_description"]


def test_import_video_reads_back_an_exported_data_set(tmp_path):
    # PNG frames are lossless: the imported frames are the generated ones, with no joint states.
    r = keycld.generate("pendulum", runs=4, frames=5, size=16, out=tmp_path, workers=1)
    e = keycld.export_video(r["path"], tmp_path / "frames")
    assert (e["frames"], e["runs"]) == (20, 4)
    imported = keycld.import_video(tmp_path / "frames", "pendulum", tmp_path / "imported.h5",
                                   size=16, frames=5, dt=r["info"]["dt"])
    assert imported["info"]["source"] == "import" and imported["info"]["runs"] == 4
    with h5py.File(r["path"]) as a, h5py.File(imported["path"]) as b:
        assert (a["images"][:] == b["images"][:]).all()
        assert "qpos" not in b
    with pytest.raises(keycld.InputError, match="at least 2 are needed"):
        keycld.import_video(tmp_path / "frames", "pendulum", tmp_path / "x.h5", size=16,
                            frames=15, dt=0.02)
