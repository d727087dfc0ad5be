"""keycld from Python: the simulator, data sets, trained runs, training and evaluation.

The module wraps keycld's C++ library (docs/python.md). Tensors are torch.Tensor and cross
without copies; ``encode``, ``render``, ``rollout``, ``potential``, ``potential_gradient``,
``input_matrix`` and ``acceleration`` build an autograd graph that ``backward()`` walks
(gradients flow into their inputs and into the model's parameters).

Conventions (docs/method.md §2): keypoints are in normalized image coordinates, x right and y
up, ±1 at the outer pixel centres; a state x of K keypoints is [B, 2K] ordered
(x₁, y₁, …, x_K, y_K); velocities in normalized units per second; times in seconds; the
learned energies in the model's own (arbitrary) unit. Images are uint8 [T, S, S, 3] (row 0 =
top), as data sets store them, or float [T, 3, S, S] in [0, 1], as the networks read them.

Errors are keycld.Error subclasses with the CLI's one-line message: InputError (ValueError:
bad argument or shape), FormatError (ValueError: a corrupt or foreign file), IoError (OSError:
a missing or unwritable file), GlError (RuntimeError), NumericalError (ArithmeticError: a
diverging rollout). Ctrl-C during train, evaluate or generate raises KeyboardInterrupt after
the C++ code has stopped cleanly (training saves its checkpoint first).
"""

import json
import math
import os
import re
import subprocess
import sys
import tomllib

import torch  # loads LibTorch's Python bindings, which the extension's tensor casters use

from . import _keycld as _k
from ._keycld import (  # noqa: F401  (re-exported)
    Error,
    FormatError,
    GlError,
    InputError,
    IoError,
    NumericalError,
    __version__,
)

__all__ = [
    "Environment", "Run", "generate", "import_video", "export_video", "load_run", "train",
    "evaluate", "dataset_info",
    "preset_file", "model_variants", "mujoco_version", "Error", "InputError", "FormatError",
    "IoError", "GlError", "NumericalError",
]


def _path(p):
    return "" if p is None else os.fspath(p)


def _threads(threads):
    """LibTorch threads to set: the caller's, or torch's current count (left unchanged)."""
    if threads is None:
        return torch.get_num_threads()
    if not isinstance(threads, int) or isinstance(threads, bool):
        raise InputError(f"threads must be an int, got {threads!r}")
    return threads


def _tensor(value, name, dtype=None):
    """A torch.Tensor from a tensor, NumPy array or nested sequence (InputError otherwise)."""
    if isinstance(value, torch.Tensor):
        return value if dtype is None else value.to(dtype)
    try:
        return torch.as_tensor(value, dtype=dtype)
    except (TypeError, ValueError, RuntimeError) as e:
        raise InputError(f"{name} must be a tensor or array of numbers: {e}") from None


def _numbers(value, name):
    """A state, velocity or action: a tensor, array or list of numbers; lists and integers
    become float64 (the C++ side casts to the dynamics' dtype); bool and complex are refused
    there."""
    is_array = isinstance(value, torch.Tensor) or hasattr(value, "__array__")
    t = _tensor(value, name, None if is_array else torch.float64)
    if not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool:
        t = t.to(torch.float64)
    return t


def _no_inference_mode(what):
    if torch.is_inference_mode_enabled():
        raise InputError(f"{what} needs autograd (∇V), which torch.inference_mode() turns off: "
                         "use torch.no_grad() instead")


def _device(device):
    if device is None:
        return ""
    name = str(device)
    if not re.fullmatch(r"cpu|cuda(:[0-9]+)?", name):
        raise InputError(f"device must be cpu, cuda or cuda:N, got {name!r}")
    return name


def mujoco_version():
    """MuJoCo's version, "major.minor.patch"."""
    return _k.mujoco_version()


def model_variants():
    """The model variants train's [model] model accepts (keycld, keycld-nc, node2, ...)."""
    return list(_k.model_variants())


def preset_file(preset, env, control="none"):
    """The TOML preset configs/<preset>/<env>-<control>.toml (preset "cpu-quick" or "paper").

    Raises InputError for an unknown preset, environment or control mode.
    """
    return _k.preset_file(preset, env, control)


def dataset_info(path):
    """The attributes of a data set file (env, control, runs, frames, size, dt, vpt_epsilon, ...).

    Raises IoError (missing) or FormatError (not a keycld data set).
    """
    return _k.dataset_info(_path(path))


def import_video(inputs, system, out, size=64, frames=50, stride=1, skip=0, crop=None, dt=None,
                 actions=None, control=None, force=False):
    """A data set from video files or folders of PNG frames, as ``keycld import`` does
    (docs/import.md): each input cropped to a square (``crop`` = (left, top, side) in source
    pixels, default the largest centred one), scaled to ``size`` pixels, cut into runs of
    ``frames`` frames; ``dt`` seconds between kept frames (default: stride / the video's rate);
    ``actions``: a CSV, one row per input frame or per run. The file has no simulator state.
    Returns {"path", "frames_read", "frames_dropped", "seconds", "info"}. Raises InputError,
    IoError, FormatError; KeyboardInterrupt on Ctrl-C (nothing is left)."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    return _k.import_video([_path(i) for i in inputs], str(system), _path(out), int(size),
                           int(frames), int(stride), int(skip),
                           [int(c) for c in crop] if crop is not None else [],
                           float(dt) if dt is not None else 0.0,
                           _path(actions) if actions is not None else "",
                           control or "", bool(force))


def export_video(data, out, runs="all", scale=1, crf=18, actions=None, force=False):
    """Writes a data set's frames as an H.264 video (``out`` ending in .mp4, .mkv, …) or a new
    folder of PNG frames (``out`` without an extension), as ``keycld export`` does; ``actions``:
    also a CSV of the actions, one row per frame; ``force``: replace an existing video or CSV.
    Returns {"frames", "runs", "fps"}."""
    return _k.export_video(_path(data), _path(out), str(runs), int(scale), int(crf),
                           _path(actions) if actions is not None else "", bool(force))


class Environment:
    """One MuJoCo simulation of a benchmark system (docs/method.md §7).

    ``Environment("pendulum" | "cartpole" | "acrobot" | "my_system.toml", assets=None)`` (a
    system description file, docs/systems.md, works too): joint angles in radians
    (0 = pointing up), cart position in metres, time in seconds; one step() advances dt seconds,
    the frame interval of the data sets. Not thread-safe. Raises InputError for an unknown
    name, IoError / FormatError for a missing or rejected MJCF file in ``assets``.
    """

    def __init__(self, name, assets=None):
        self._env = _k.Environment(name, _path(assets))

    def __repr__(self):
        return f"keycld.Environment({self.name!r}, t = {self.time:.3f} s, qpos = {self.qpos.tolist()})"

    name = property(lambda self: self._env.name, doc="The system's name.")
    nq = property(lambda self: self._env.nq, doc="Number of joint positions.")
    nv = property(lambda self: self._env.nv, doc="Number of joint velocities.")
    nu = property(lambda self: self._env.nu, doc="Number of actuators.")
    dt = property(lambda self: self._env.dt, doc="Time step = frame interval (s).")
    time = property(lambda self: self._env.time, doc="Simulation time (s).")

    @property
    def qpos(self):
        """Joint positions, float64 [nq] (rad; m for the cart)."""
        return torch.tensor(self._env.qpos, dtype=torch.float64)

    @property
    def qvel(self):
        """Joint velocities, float64 [nv] (rad/s; m/s for the cart)."""
        return torch.tensor(self._env.qvel, dtype=torch.float64)

    def reset(self, qpos, qvel):
        """Sets the state (qpos [nq], qvel [nv]), time 0 and action 0. InputError on a size."""
        self._env.reset(_numbers(qpos, "qpos").double().flatten().tolist(),
                        _numbers(qvel, "qvel").double().flatten().tolist())

    def reset_random(self, seed=0, run=0):
        """Draws the initial state of data-set run ``run`` of seed ``seed`` (docs/method.md §7):
        the state ``generate(seed=seed)`` starts run ``run`` from. The data set's frame 0 is
        one step() later (its first stored state and image)."""
        if seed < 0 or run < 0:
            raise InputError(f"seed and run must be ≥ 0, got {seed} and {run}")
        self._env.reset_random(int(seed), int(run))

    def step(self, u=None, steps=1):
        """Holds the action ``u`` [nu] (actuator units; None keeps the current one) and
        advances ``steps`` time steps."""
        u = None if u is None else _numbers(u, "u").double().flatten().tolist()
        self._env.step(u, int(steps))

    def total_energy(self):
        """Kinetic plus potential energy (J)."""
        return self._env.total_energy()

    def keypoints(self, size=64):
        """The true keypoints of the current state: float64 [K, 2], normalized image
        coordinates of a size×size render (pendulum: bob; cartpole: cart, pole tip; acrobot:
        elbow, tip)."""
        return self._env.keypoints(int(size))

    def render(self, size=64, numpy=False, gl="auto"):
        """The current state seen by the fixed camera: uint8 [size, size, 3], row 0 = top
        (a NumPy array if ``numpy``). ``gl``: auto | egl | osmesa. Raises GlError when no
        headless OpenGL works, InputError for a size outside [8, 1024]."""
        rgb = self._env.render(int(size), gl)
        return rgb.numpy() if numpy else rgb


def generate(env="pendulum", control="none", runs=500, frames=50, size=64, seed=0, workers=0,
             out="data", force=False, gl="auto"):
    """Generates a data set as ``keycld generate`` does (docs/method.md §7, docs/data.md); ``env``
    is a built-in name or a system description file (docs/systems.md). Returns
    {"path", "reused", "seconds", "frames_per_second", "info"}. An existing file with the
    same parameters is reused unless ``force``. ``workers``: render processes (0 = one per
    core). Runs in a fresh Python process (its render workers are forked, which is unsafe from
    a process that already rendered with OpenGL or runs threads). Raises InputError, IoError,
    GlError; KeyboardInterrupt on Ctrl-C (nothing is left)."""
    args = [env, control, int(runs), int(frames), int(size), int(seed), int(workers),
            os.path.abspath(_path(out)), bool(force), gl]
    child = subprocess.Popen([sys.executable, "-c", _GENERATE_CHILD, json.dumps(args)],
                             stdout=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                                 [os.path.dirname(os.path.dirname(__file__))] +
                                 os.environ.get("PYTHONPATH", "").split(os.pathsep))))
    try:
        output, _ = child.communicate()
    except KeyboardInterrupt:  # the child got the signal too: let it clean up
        output, _ = child.communicate()
    try:
        reply = json.loads(output.decode().strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise Error(f"data set generation ended without an answer (exit status "
                    f"{child.returncode})") from None
    if "error" in reply:
        kind = KeyboardInterrupt if reply["error"] == "KeyboardInterrupt" else globals().get(
            reply["error"], Error)
        raise kind(reply["message"])
    return reply["result"]


_GENERATE_CHILD = """
import json, sys
import keycld
try:
    result = keycld._k.generate(*json.loads(sys.argv[1]))
    result["path"] = str(result["path"])
    print(json.dumps({"result": result}))
except keycld.Error as e:
    print(json.dumps({"error": type(e).__name__, "message": str(e)}))
except KeyboardInterrupt as e:
    print(json.dumps({"error": "KeyboardInterrupt", "message": str(e)}))
"""


def load_run(path, checkpoint=None, data=None, device=None, threads=None):
    """Opens a trained run (a ``keycld train`` folder, or a checkpoint file inside one).

    checkpoint: a .pt file (default RUN/checkpoints/last.pt); data: the data set (default the
    one its config.toml names); device: cpu | cuda | cuda:N (default the run's); threads:
    LibTorch threads to set (default: leave torch's count). The model is in eval mode.
    Raises IoError (missing folder, checkpoint or data set), FormatError (corrupt files) and
    InputError (a data set that does not fit the model).
    """
    return Run(path, checkpoint=checkpoint, data=data, device=device, threads=threads)


class Run:
    """A trained model with its data set: ``Run(path, ...)`` is ``load_run(path, ...)``.
    Shapes: K keypoints, A actuators, S×S images, N states (rows) of width 2K."""

    def __init__(self, path, checkpoint=None, data=None, device=None, threads=None):
        self._run = _k.Run(_path(path), _path(checkpoint), _path(data), _device(device),
                           _threads(threads))
        tolerances = self.config.get("eval", {})  # the run's Dormand–Prince defaults
        self._rtol = tolerances.get("rtol", 1.4e-8)
        self._atol = tolerances.get("atol", 1.4e-8)

    def __repr__(self):
        return f"keycld.Run({str(self.run_dir)!r}: {self.description}, {self.train_steps} steps)"

    run_dir = property(lambda self: self._run.run_dir, doc="The run folder.")
    checkpoint = property(lambda self: self._run.checkpoint, doc="The loaded checkpoint.")
    data_file = property(lambda self: self._run.data_file, doc="The data set.")
    spec = property(lambda self: dict(self._run.spec),
                    doc="env, model, num_keypoints, action_dim, hidden, image_size, sigma, dt.")
    description = property(lambda self: self._run.description, doc="Variant, env and sizes.")
    train_steps = property(lambda self: self._run.train_steps, doc="Optimizer steps trained.")
    has_energy = property(lambda self: self._run.has_energy,
                          doc="Whether the model has M, V and B (keycld, keycld-nc).")
    device = property(lambda self: torch.device(self._run.device), doc="The model's device.")
    dataset_info = property(lambda self: dict(self._run.dataset_info),
                            doc="The attributes of the run's data set.")

    @property
    def config(self):
        """The run's resolved configuration ([data], [model], [train], [eval]) as a dict."""
        return tomllib.loads(self._run.config_toml)

    def named_parameters(self):
        """{name: tensor} of the model's parameters (the same storage: training them in
        PyTorch changes the model)."""
        return dict(self._run.named_parameters())

    def parameters(self):
        """The model's parameters, for a torch.optim optimiser."""
        return list(self.named_parameters().values())

    @property
    def dynamics_dtype(self):
        """dtype of the dynamics networks (mass, potential, input matrix): torch.float32 as
        trained; set torch.float64 for float64 rollouts and gradient checks."""
        return getattr(torch, self._run.dynamics_dtype())

    @dynamics_dtype.setter
    def dynamics_dtype(self, dtype):
        if dtype not in (torch.float32, torch.float64):
            raise InputError(f"the dynamics run in torch.float32 or torch.float64, got {dtype}")
        self._run.set_dynamics_dtype(str(dtype).removeprefix("torch."))

    def encode(self, images):
        """Keypoints of frames (docs/method.md §3): images uint8 [T, S, S, 3] or float
        [T, 3, S, S] in [0, 1] (a single frame without T too) → (keypoints float32 [T, K, 2],
        heatmaps [T, K, S, S] spatial-softmax probabilities). Differentiable in float input."""
        return self._run.encode(_tensor(images, "images"))

    def render(self, keypoints):
        """Images of keypoints [T, K, 2] (or [K, 2]): float32 [T, 3, S, S] in (0, 1)."""
        return self._run.render(_numbers(keypoints, "keypoints"))

    def rollout(self, x0, xdot0, u=None, times=None, frames=None, solver="dopri5", rtol=None,
                atol=None, max_steps=100000, substeps=1, project=True):
        """Integrates the learned dynamics (docs/method.md §5) from x0, xdot0 [B, 2K] (or [2K])
        with the constant action u [A] or [B, A] (default 0).

        times: strictly increasing seconds, times[0] the start; or frames: the frame grid
        0, Δt, …, (frames − 1)·Δt. solver: dopri5 (rtol / atol default to the run's [eval]
        values) | rk4 | euler | verlet (``substeps`` equal steps per interval). ``project``:
        first project xdot0 onto the tangent space of the constraints at x0 (project_velocity;
        a constrained model then stays on its constraints; no-op without constraints), as
        predict does. Returns
        (x, xdot), each [B, T, 2K] in the dynamics' dtype; differentiable with respect to x0,
        xdot0, u and the parameters (Dormand–Prince's step-size control is not
        differentiated). Raises InputError for bad shapes, NumericalError on divergence.
        """
        _no_inference_mode("rollout")
        if (times is None) == (frames is None):
            raise InputError("rollout needs exactly one of times (seconds) or frames")
        if times is None:
            if not isinstance(frames, int) or isinstance(frames, bool) or frames < 1:
                raise InputError(f"frames must be an int ≥ 1, got {frames!r}")
            dt = self.spec["dt"]
            times = [i * dt for i in range(frames)]
        try:
            times = [float(t) for t in _tensor(times, "times", torch.float64).flatten().tolist()]
        except (TypeError, ValueError) as e:
            raise InputError(f"times must be a sequence of seconds: {e}") from None
        rtol = self._rtol if rtol is None else rtol
        atol = self._atol if atol is None else atol
        x0, xdot0 = _numbers(x0, "x0"), _numbers(xdot0, "xdot0")
        if project:
            xdot0 = self.project_velocity(x0, xdot0)
        x, xdot, _, _ = self._run.rollout(
            x0, xdot0,
            None if u is None else _numbers(u, "u"), times, solver, float(rtol), float(atol),
            int(max_steps), int(substeps))
        return x, xdot

    def sequence_loss(self, images, u=None, transform_ids=None, horizon=4, integrator="euler",
                      substeps=1, max_acceleration=0.0):
        """keycld's training objective on one sequence (docs/method.md §6, train/loss.h) with
        unit weights: images uint8 [N, S, S, 3] or float [N, 3, S, S], the constant action u
        [A] (default 0), per-frame dihedral transform ids int [N] in [0, 8) (None: no
        augmentation), horizon P, integrator euler | rk4 | verlet. Returns {"total",
        "reconstruction", "dynamics", "heatmap"} as scalar tensors with their graph (a loss to
        fine-tune with from PyTorch), and "kl" for the VAE baselines (docs/baselines.md; their
        own objective, which ignores transform_ids)."""
        _no_inference_mode("sequence_loss")
        total, rec, dyn, bce, kl = self._run.sequence_loss(
            _tensor(images, "images"), None if u is None else _numbers(u, "u"),
            None if transform_ids is None else _tensor(transform_ids, "transform_ids"),
            int(horizon), integrator, int(substeps), float(max_acceleration))
        out = {"total": total, "reconstruction": rec, "dynamics": dyn, "heatmap": bce}
        if kl is not None:
            out["kl"] = kl
        return out

    def acceleration(self, x, xdot, u=None):
        """ẍ = g(x, ẋ, u) of the learned dynamics: x, ẋ [B, 2K], u [A] or [B, A] → [B, 2K]."""
        _no_inference_mode("acceleration")
        return self._run.acceleration(_numbers(x, "x"), _numbers(xdot, "xdot"),
                                      None if u is None else _numbers(u, "u"))

    def project_velocity(self, x, xdot):
        """ẋ projected onto the tangent space of the constraints at x (identity without
        constraints): [B, 2K] → [B, 2K]."""
        return self._run.project_velocity(_numbers(x, "x"), _numbers(xdot, "xdot"))

    def mass_matrix(self):
        """The constant mass matrix M = diag(m₁², m₁², …) [2K, 2K] (docs/method.md §3).
        InputError for a model without one (node2)."""
        return torch.diag(self._run.mass_diagonal())

    def potential(self, x):
        """Learned potential energy V(x): [B, 2K] → [B]. InputError without one (node2)."""
        return self._run.potential(_numbers(x, "x"))

    def potential_gradient(self, x):
        """∇V(x) by autograd: [B, 2K] → [B, 2K]."""
        _no_inference_mode("potential_gradient")
        return self._run.potential_gradient(_numbers(x, "x"))

    def input_matrix(self, x):
        """Learned input matrix B(x): [B, 2K] → [B, 2K, A] (the generalised force of u is
        B(x)·u)."""
        return self._run.input_matrix(_numbers(x, "x"))

    def predict(self, run=None, images=None, frames=50, action=None, gl="auto", tta=False,
                refine_start=0, refine_lr=5e-4):
        """Long-term video prediction (docs/method.md §8) from three frames: keypoints of frames
        0, 1, 2, the start state at frame 1, Dormand–Prince (the run's tolerances) with the
        constant action, rendered by the model's renderer; as ``keycld predict``.

        run: index among the data set's validation runs (its first three frames and action;
        ground truth beyond the stored frames is re-simulated); or images: uint8 [≥3, S, S, 3]
        with action [A] (default 0). Returns {"keypoints" [F, K, 2], "images" [F, 3, S, S]} and,
        for a run, "truth" uint8 [F, S, S, 3], "mse" float64 [F], "vpt" (first frame whose MSE
        exceeds ε, F − 1 if none), "epsilon", "dataset_run". Not differentiable (no graph).
        The start estimate (docs/evaluation.md, "Start estimate"; defaults: the paper's): tta
        averages each frame's keypoints over the 8 dihedral transforms (``--tta``);
        refine_start > 0 refines the start state by that many render-and-compare Adam steps on
        the three frames (learning rate refine_lr, normalized image units; ``--refine-start``).
        """
        if not isinstance(tta, bool):
            raise InputError(f"tta must be True or False, got {tta!r}")
        if isinstance(refine_start, bool) or not isinstance(refine_start, int):
            raise InputError(f"refine_start must be an int, got {refine_start!r}")
        if not isinstance(refine_lr, (int, float)) or not math.isfinite(refine_lr):
            raise InputError(f"refine_lr must be a finite number, got {refine_lr!r}")
        if (run is None) == (images is None):
            raise InputError("predict needs exactly one of run (a validation run index) or images")
        if run is not None and action is not None:
            raise InputError("predict(run=...) uses the run's own action; action goes with images")
        if run is not None:
            return self._run.predict_run(int(run), int(frames), gl, tta, refine_start,
                                         float(refine_lr))
        images = _tensor(images, "images")
        a = self.spec["action_dim"]
        action = torch.zeros(a, dtype=torch.float64) if action is None else _tensor(
            action, "action", torch.float64).flatten()
        return self._run.predict_images(images, action, int(frames), tta, refine_start,
                                        float(refine_lr))

    def control_action(self, x, xdot, target, kp=25.0, kd=10.0, gain_scale="mass",
                       tangent_projection=True, u_max=0.0):
        """Energy-shaping control (docs/method.md §10, docs/control.md):
        u = B(x)⁺ (∇V(x) − K_p (x − x*) − K_d ẋ) at the state x, ẋ [2K] for the target
        keypoints x* [2K]. gain_scale "mass": K = k·M (k_p in 1/s², k_d in 1/s); "unit": the
        scalars as they are. u_max > 0 clips each component. Returns float64 [A]. As
        ``keycld control``, only for a model trained on control mode "full" data of a fully
        actuated system (InputError otherwise: B(x) of other runs was never trained).
        For lag-vae and lag-cavae, whose states are one pair per generalised coordinate
        ((cos q, sin q) per angle, (x, 0) per translation: [2] for the pendulum, [4] for the
        cartpole and the acrobot), their own law in q (docs/control.md, "Lag-caVAE's law"):
        u = gᵀ(g gᵀ)⁻¹ (∂V/∂q − K_p (q − q*) − K_d q̇) with an angle's q − q* wrapped to
        (−π, π]; tangent_projection does not apply there."""
        _no_inference_mode("control_action")
        for name, v in (("kp", kp), ("kd", kd), ("u_max", u_max)):
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                raise InputError(f"{name} must be a finite number, got {v!r}")
        u = self._run.control_action(_numbers(x, "x"), _numbers(xdot, "xdot"),
                                     _numbers(target, "target"), float(kp), float(kd),
                                     gain_scale, bool(tangent_projection), float(u_max))
        return torch.tensor(u, dtype=torch.float64)


def _toml_value(key, v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise InputError(f"setting {key} must be finite, got {v}")
        return repr(v)
    if isinstance(v, (str, os.PathLike)):
        s = os.fspath(v)
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):  # an array of numbers, e.g. [train] con_weights
        if not all(isinstance(e, (int, float)) and not isinstance(e, bool) for e in v):
            raise InputError(f"setting {key} must be a list of numbers, got {v!r}")
        return "[" + ", ".join(_toml_value(key, float(e)) for e in v) + "]"
    raise InputError(f"setting {key} must be a bool, int, float, str or list of numbers, "
                     f"got {type(v).__name__}")


def _settings_toml(settings):
    """{"train": {"epochs": 2}, ...} → TOML text (sections of TrainConfig)."""
    if settings is None:
        return ""
    if not isinstance(settings, dict):
        raise InputError("settings must be a dict of sections, e.g. {'train': {'epochs': 2}}")
    lines = []
    for section, values in settings.items():
        if not isinstance(values, dict):
            raise InputError(f"settings[{section!r}] must be a dict of keys, got {values!r}")
        for name in (section, *values):
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_]+", name):
                raise InputError(f"settings: {name!r} is not a section or key name")
        lines.append(f"[{section}]")
        lines += [f"{k} = {_toml_value(f'{section}.{k}', v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def train(out, config=None, data=None, settings=None, preset=None, env=None, control="none",
          resume=False, progress=False, quiet=True):
    """Trains a run into the folder ``out``, as ``keycld train`` does (docs/training.md).

    config: a TOML file, or preset ("cpu-quick" | "paper") with env and control; settings:
    overrides by section, e.g. {"train": {"epochs": 2, "seed": 1}, "model": {"hidden": 16}};
    data: the HDF5 data set (else the one the config names, generated if missing). resume:
    continue ``out`` from its last checkpoint (only [train] epochs / max_steps / lr / threads /
    device / precision / kernels may change). Returns {"steps", "epochs_completed", "seconds",
    "seconds_per_step", "last_loss", "val_vpt_mean", "val_vpt_median", "val_runs",
    "checkpoint", ...}. Raises InputError, IoError, FormatError, NumericalError (the last good
    checkpoint is named); KeyboardInterrupt on Ctrl-C after saving a checkpoint.
    """
    settings_toml = _settings_toml(settings)  # validates the types first
    if resume and settings:
        changeable = {"epochs", "max_steps", "lr", "threads", "device", "precision", "kernels"}
        for section, values in settings.items():
            wrong = sorted(set(values) - changeable) if section == "train" else sorted(values)
            if wrong:
                raise InputError(f"resume continues the saved configuration; [{section}] "
                                 f"{', '.join(wrong)} cannot change (only [train] "
                                 f"{', '.join(sorted(changeable))})")
    if preset is not None:
        if config is not None:
            raise InputError("pass config or preset, not both")
        if env is None:
            raise InputError("a preset needs env (pendulum | cartpole | acrobot)")
        config = preset_file(preset, env, control)
    elif env is not None or control != "none":
        raise InputError("env and control choose a preset; pass them with preset=, or set the "
                         "data set with data= (its environment is read from the file)")
    return _k.train(_path(out), _path(config), settings_toml, _path(data),
                    bool(resume), bool(progress), bool(quiet))


def evaluate(run, checkpoint=None, data=None, out=None, solver="dopri5", plots=True,
             threads=None, device=None):
    """Evaluates a run as ``keycld evaluate`` does (docs/evaluation.md): VPT on every
    validation run, the diagnostics and figures, written to ``out`` (default RUN/report).
    Returns {"vpt" (per run), "vpt_mean", "vpt_std", "vpt_median", "epsilon", "mse" [R, N],
    "validation_runs", "mse_mean", "masses", "potential_r2", "files", "seconds", ...}."""
    if out is not None and os.path.exists(out) and not os.path.isdir(out):
        raise IoError(f"cannot write the report into '{os.fspath(out)}': it is not a folder")
    return _k.evaluate(_path(run), _path(checkpoint), _path(data), _path(out), solver,
                       bool(plots), _threads(threads), _device(device))
