// The extension module keycld._keycld (docs/python.md): the C++ library's simulator, data set
// generation, trained runs, training and evaluation for Python. The package's __init__.py wraps
// it (argument conversion, docstrings); this file only binds. Tensors cross as torch.Tensor
// without copies (the module links the LibTorch of the interpreter's torch), and the autograd
// graph built in C++ is the one Python's backward() walks.
#include <torch/extension.h>
// Above: torch's pybind11 tensor casters. Below: the standard-library casters.
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "keycld/control/angle_control.h"
#include "keycld/control/control_model.h"
#include "keycld/control/controller.h"
#include "keycld/data/dataset.h"
#include "keycld/data/generate.h"
#include "keycld/data/import.h"
#include "keycld/eval/evaluate.h"
#include "keycld/eval/predict.h"
#include "keycld/models/registry.h"
#include "keycld/sim/environment.h"
#include "keycld/sim/gl_context.h"
#include "keycld/sim/offscreen_renderer.h"
#include "keycld/train/config.h"
#include "keycld/train/loss.h"
#include "keycld/train/trained_run.h"
#include "keycld/train/trainer.h"
#include "keycld/train/vpt.h"
#include "keycld/util/error.h"
#include "keycld/util/interrupt.h"
#include "keycld/util/tensor_values.h"
#include "keycld/util/text.h"

namespace py = pybind11;
using namespace keycld;
namespace fs = std::filesystem;

namespace {

// ---- errors ---------------------------------------------------------------------------------

struct PythonErrors {
  PyObject *error, *input, *format, *io, *gl, *numerical;
};
PythonErrors g_errors{};

PyObject* NewError(py::module_& m, const char* name, PyObject* base, PyObject* python_base,
                   const char* doc) {
  PyObject* bases = python_base ? PyTuple_Pack(2, base, python_base) : PyTuple_Pack(1, base);
  PyObject* type =
      PyErr_NewExceptionWithDoc((std::string("keycld.") + name).c_str(), doc, bases, nullptr);
  Py_DECREF(bases);
  if (!type) throw py::error_already_set();
  m.attr(name) = py::handle(type);
  return type;
}

// The Python class of a keycld error (Interrupted is Python's KeyboardInterrupt).
PyObject* PythonErrorType(const Error& e) {
  if (dynamic_cast<const Interrupted*>(&e)) return PyExc_KeyboardInterrupt;
  if (dynamic_cast<const InputError*>(&e)) return g_errors.input;
  if (dynamic_cast<const FormatError*>(&e)) return g_errors.format;
  if (dynamic_cast<const IoError*>(&e)) return g_errors.io;
  if (dynamic_cast<const GlError*>(&e)) return g_errors.gl;
  if (dynamic_cast<const NumericalError*>(&e)) return g_errors.numerical;
  return g_errors.error;
}

void RegisterErrors(py::module_& m) {
  g_errors.error = NewError(m, "Error", PyExc_Exception, nullptr, "Base of keycld's errors.");
  g_errors.input = NewError(m, "InputError", g_errors.error, PyExc_ValueError,
                            "An argument, option or config value out of its valid range.");
  g_errors.format = NewError(m, "FormatError", g_errors.error, PyExc_ValueError,
                             "A file that is not what was expected (corrupt, foreign, wrong "
                             "version or shape).");
  g_errors.io = NewError(m, "IoError", g_errors.error, PyExc_OSError,
                         "Reading or writing a file failed (missing, unwritable, disk full).");
  g_errors.gl = NewError(m, "GlError", g_errors.error, PyExc_RuntimeError,
                         "No usable OpenGL backend for headless rendering.");
  g_errors.numerical = NewError(m, "NumericalError", g_errors.error, PyExc_ArithmeticError,
                                "Non-finite values, or an adaptive integrator out of budget.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(PythonErrorType(e), OneLine(e.what()).c_str());
    } catch (const c10::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, OneLine(e.what_without_backtrace()).c_str());
    } catch (const fs::filesystem_error& e) {
      PyErr_SetString(g_errors.io, OneLine(e.what()).c_str());
    }
  });
}

// Runs a long computation `f` without the GIL under keycld's signal handler, from a cleared
// request: Ctrl-C stops it at a safe point (Interrupted, raised as KeyboardInterrupt) and
// Python's handler is back afterwards.
template <class F>
auto Interruptible(F&& f) {
  py::gil_scoped_release release;
  ClearInterrupt();
  InterruptGuard guard;
  return f();
}

// ---- argument checks ----------------------------------------------------------------------

// x as [B, width] of `dtype` on `device`: [width] becomes [1, width]. InputError otherwise.
torch::Tensor StateRows(const torch::Tensor& x, int64_t width, const char* what,
                        const torch::Device& device, torch::ScalarType dtype) {
  if (!x.defined()) throw InputError(std::string(what) + " is missing");
  if (!x.is_floating_point()) {
    throw InputError(std::string(what) + " must be a floating-point tensor, got " +
                     std::string(c10::toString(x.scalar_type())));
  }
  torch::Tensor rows = x.dim() == 1 ? x.unsqueeze(0) : x;
  if (rows.dim() != 2 || rows.size(1) != width) {
    throw InputError(std::string(what) + " must be [B, " + std::to_string(width) + "] or [" +
                     std::to_string(width) + "], got " + ShapeText(x));
  }
  return rows.to(device, dtype);
}

// Images as the model reads them: uint8 [T, S, S, 3] (row 0 = top) or float [T, 3, S, S] in
// [0, 1], a single frame without T too; → float [T, 3, S, S] on `device`.
torch::Tensor ModelImages(const torch::Tensor& images, int size, const torch::Device& device) {
  if (!images.defined()) throw InputError("images are missing");
  torch::Tensor t = images;
  if (t.scalar_type() == torch::kUInt8) {
    if (t.dim() == 3) t = t.unsqueeze(0);
    if (t.dim() != 4 || t.size(1) != size || t.size(2) != size || t.size(3) != 3) {
      throw InputError("uint8 images must be [T, " + std::to_string(size) + ", " +
                       std::to_string(size) + ", 3] (the model's size), got " + ShapeText(images));
    }
    return ImagesToFloat(t, device);
  }
  if (!t.is_floating_point()) {
    throw InputError("images must be uint8 [T, S, S, 3] or float [T, 3, S, S], got " +
                     std::string(c10::toString(t.scalar_type())));
  }
  if (t.dim() == 3) t = t.unsqueeze(0);
  if (t.dim() != 4 || t.size(1) != 3 || t.size(2) != size || t.size(3) != size) {
    throw InputError("float images must be [T, 3, " + std::to_string(size) + ", " +
                     std::to_string(size) + "] (the model's size), got " + ShapeText(images));
  }
  return t.to(device, torch::kFloat32);
}

std::vector<double> CheckedVector(const std::vector<double>& v, size_t n, const char* what) {
  if (v.size() != n) {
    throw InputError(std::string(what) + " must have " + std::to_string(n) + " entries, got " +
                     std::to_string(v.size()));
  }
  return v;
}

py::dict SpecDict(const ModelSpec& s) {
  py::dict d;
  d["env"] = EnvNameString(s.env);
  d["system"] = s.SystemName();
  d["model"] = s.model;
  d["num_keypoints"] = s.num_keypoints;
  d["action_dim"] = s.action_dim;
  d["hidden"] = s.hidden;
  d["image_size"] = s.image_size;
  d["sigma"] = s.sigma;
  d["dt"] = s.dt;
  return d;
}

py::dict InfoDict(const DatasetInfo& i) {
  py::dict d;
  d["env"] = EnvNameString(i.env);
  d["system"] = i.system;
  d["control"] = ControlModeString(i.control);
  d["runs"] = i.runs;
  d["frames"] = i.frames;
  d["size"] = i.size;
  d["seed"] = i.seed;
  d["nq"] = i.nq;
  d["nv"] = i.nv;
  d["nu"] = i.nu;
  d["dt"] = i.dt;
  d["vpt_epsilon"] = i.vpt_epsilon;
  d["train_runs"] = i.train_runs;
  d["validation_runs"] = i.validation_runs;
  d["source"] = i.source;
  d["source_files"] = i.source_files;
  d["system_description"] = i.system_description;
  return d;
}

// ---- the simulator ------------------------------------------------------------------------

// An Environment with a renderer made on first use (one GL context per environment).
class PyEnvironment {
 public:
  // A built-in name (its MJCF from `assets` when given) or a system description file.
  PyEnvironment(const std::string& name, const std::string& assets)
      : env_(assets.empty() ? LoadSystemByName(name)
                            : BuiltinSystem(ParseEnvName(name), fs::path(assets))) {}

  Environment& env() { return env_; }

  void ResetRandom(uint64_t seed, uint64_t run) {
    Rng rng(seed, 1, run);  // the stream of the data sets' runs (data/generate.cc)
    env_.ResetRandom(rng);
  }

  void Step(const std::optional<std::vector<double>>& u, int steps) {
    if (steps < 0) throw InputError("steps must be ≥ 0, got " + std::to_string(steps));
    if (u) {
      for (double v : *u) {
        if (!std::isfinite(v) || std::abs(v) >= 1e10) {  // MuJoCo drops |u| ≥ 1e10 (mjMAXVAL)
          throw InputError("u must be finite and below 1e10 in magnitude, got " +
                           std::to_string(v));
        }
      }
      env_.SetAction(CheckedVector(*u, size_t(env_.nu()), "u"));
    }
    for (int i = 0; i < steps; ++i) env_.Step();
  }

  torch::Tensor Render(int size, const std::string& gl) {
    if (size < 8 || size > 1024) {
      throw InputError("size must be in [8, 1024], got " + std::to_string(size));
    }
    if (!context_) context_ = GlContext::Create(ParseGlBackend(gl));
    context_->MakeCurrent();
    if (!renderer_ || renderer_->size() != size) {
      renderer_.reset();
      renderer_ = std::make_unique<OffscreenRenderer>(env_, *context_, size);
    }
    torch::Tensor rgb = torch::empty({size, size, 3}, torch::kUInt8);
    renderer_->Render(env_, std::span<uint8_t>(rgb.data_ptr<uint8_t>(), size_t(rgb.numel())));
    return rgb;
  }

  torch::Tensor KeypointImagePositions(int size) const {
    if (size < 8 || size > 1024) {
      throw InputError("size must be in [8, 1024], got " + std::to_string(size));
    }
    const auto points = env_.KeypointImagePositions(size);
    torch::Tensor t = torch::empty({int64_t(points.size()), 2}, torch::kFloat64);
    for (size_t k = 0; k < points.size(); ++k) {
      t[int64_t(k)][0] = points[k][0];
      t[int64_t(k)][1] = points[k][1];
    }
    return t;
  }

 private:
  Environment env_;
  std::unique_ptr<GlContext> context_;  // declared before the renderer: destroyed after it
  std::unique_ptr<OffscreenRenderer> renderer_;
};

// ---- trained runs ------------------------------------------------------------------------

// Compute-only bindings drop the GIL: LibTorch's autograd engine refuses to run under it (and
// other Python threads go on meanwhile). Their return values are converted after it is retaken.
const auto kNoGil = py::call_guard<py::gil_scoped_release>();

struct Prediction {
  torch::Tensor keypoints, images;  // [F, K, 2], [F, 3, S, S]
  int64_t accepted_steps = 0, rejected_steps = 0;
  torch::Tensor truth, mse;  // with a ground truth: [F, S, S, 3], [F]
  int vpt = -1, dataset_run = -1;
  double epsilon = 0;
};

py::dict PredictionDict(const Prediction& p) {
  py::dict d;
  d["keypoints"] = p.keypoints;
  d["images"] = p.images;
  d["accepted_steps"] = p.accepted_steps;
  d["rejected_steps"] = p.rejected_steps;
  if (p.truth.defined()) {
    d["truth"] = p.truth;
    d["mse"] = p.mse;
    d["vpt"] = p.vpt;
    d["epsilon"] = p.epsilon;
  }
  if (p.dataset_run >= 0) d["dataset_run"] = p.dataset_run;
  return d;
}

class PyRun {
 public:
  explicit PyRun(TrainedRunOptions options) : run_(OpenTrainedRun(options)) {}

  Model& model() { return run_.model; }
  TrainedRun& run() { return run_; }
  int width() const { return 2 * run_.model->spec().num_keypoints; }

  torch::ScalarType DynamicsDtype() {
    auto params = run_.model->DynamicsParameters();
    return params.empty() ? torch::kFloat32 : params[0].scalar_type();
  }
  void SetDynamicsDtype(torch::ScalarType dtype) {
    for (auto& module : run_.model->DynamicsModules()) module->to(dtype);
  }
  // "float32" | "float64" (torch's dtypes cross as their names).
  std::string DynamicsDtypeName() {
    return DynamicsDtype() == torch::kFloat64 ? "float64" : "float32";
  }
  void SetDynamicsDtypeName(const std::string& name) {
    if (name != "float32" && name != "float64") {
      throw InputError("the dynamics run in torch.float32 or torch.float64, got " + name);
    }
    SetDynamicsDtype(name == "float64" ? torch::kFloat64 : torch::kFloat32);
  }

  torch::Tensor State(const torch::Tensor& x, const char* what) {
    return StateRows(x, width(), what, run_.model->device(), DynamicsDtype());
  }

  torch::Tensor Action(const std::optional<torch::Tensor>& u, int64_t batch) {
    const int64_t A = run_.model->spec().action_dim;
    if (!u || !u->defined()) {
      return torch::zeros(
          {A}, torch::TensorOptions().device(run_.model->device()).dtype(DynamicsDtype()));
    }
    if (!u->is_floating_point()) throw InputError("u must be a floating-point tensor");
    if (!((u->dim() == 1 && u->size(0) == A) ||
          (u->dim() == 2 && u->size(0) == batch && u->size(1) == A))) {
      throw InputError("u must be [" + std::to_string(A) + "] or [B, " + std::to_string(A) +
                       "] with B = " + std::to_string(batch) + ", got " + ShapeText(*u));
    }
    return u->to(run_.model->device(), DynamicsDtype());
  }

  // The training objective of one sequence (train/loss.h): total, reconstruction, dynamics,
  // heatmap.
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor> Loss(
      const torch::Tensor& images, const std::optional<torch::Tensor>& u,
      const std::optional<torch::Tensor>& transform_ids, int horizon, const std::string& integrator,
      int substeps, double max_acceleration) {
    torch::Tensor frames = ModelImages(images, model()->spec().image_size, model()->device());
    torch::Tensor ids;
    if (transform_ids && transform_ids->defined()) {
      if (transform_ids->dim() != 1 || transform_ids->size(0) != frames.size(0) ||
          transform_ids->is_floating_point()) {
        throw InputError("transform_ids must be integers [" + std::to_string(frames.size(0)) +
                         "] in [0, 8), got " + ShapeText(*transform_ids));
      }
      ids = transform_ids->to(model()->device(), torch::kInt64);
    }
    LossOptions o;
    o.horizon = horizon;
    o.integrator = ParseIntegratorMethod(integrator);
    o.substeps = substeps;
    o.max_acceleration = max_acceleration;
    if (horizon < 1) throw InputError("horizon must be ≥ 1, got " + std::to_string(horizon));
    LossTerms t = SequenceLoss(model(), frames, Action(u, 1).to(torch::kFloat32), ids, o);
    return {t.total, t.reconstruction, t.dynamics, t.heatmap, t.kl};  // kl: None for KeyCLD
  }

  std::tuple<torch::Tensor, torch::Tensor, int64_t, int64_t> Rollout(
      const torch::Tensor& x0, const torch::Tensor& xdot0, const std::optional<torch::Tensor>& u,
      const std::vector<double>& times, const std::string& solver, double rtol, double atol,
      int64_t max_steps, int substeps) {
    torch::Tensor x = State(x0, "x0"), v = State(xdot0, "xdot0");
    if (x.size(0) != v.size(0)) {
      throw InputError("x0 and xdot0 must have the same batch, got " + ShapeText(x0) + " and " +
                       ShapeText(xdot0));
    }
    IntegratorOptions io;
    io.rtol = rtol;
    io.atol = atol;
    io.max_steps = max_steps;
    io.substeps = substeps;
    if (!(rtol > 0 && rtol <= 1 && atol > 0 && atol <= 1)) {
      throw InputError("rtol and atol must be in (0, 1], got " + Sci(rtol) + " and " + Sci(atol));
    }
    if (max_steps < 1) throw InputError("max_steps must be ≥ 1");
    if (substeps < 1) throw InputError("substeps must be ≥ 1");
    ClearInterrupt();
    InterruptGuard guard;  // Ctrl-C stops a long rollout (KeyboardInterrupt)
    Trajectory t =
        run_.model->Rollout(x, v, Action(u, x.size(0)), times, ParseIntegratorMethod(solver), io);
    return {t.x, t.xdot, t.accepted_steps, t.rejected_steps};
  }

  // Runs without the GIL (the autograd engine refuses to run under it).
  Prediction Predict(const torch::Tensor& first_frames, const torch::Tensor& action, int frames,
                     const std::optional<std::vector<uint8_t>>& truth_frames, double epsilon,
                     const StartEstimate& start_estimate) {
    Model& model = run_.model;
    const int S = model->spec().image_size, A = model->spec().action_dim;
    if (frames < 3) throw InputError("frames must be ≥ 3, got " + std::to_string(frames));
    const int64_t F0 = std::max<int64_t>(3, PredictionInputFrames(model));
    if (first_frames.scalar_type() != torch::kUInt8 || first_frames.dim() != 4 ||
        first_frames.size(0) < F0 || first_frames.size(1) != S || first_frames.size(2) != S ||
        first_frames.size(3) != 3) {
      throw InputError("images must be uint8 [T ≥ " + std::to_string(F0) + ", " +
                       std::to_string(S) + ", " + std::to_string(S) + ", 3], got " +
                       ShapeText(first_frames));
    }
    if (action.dim() != 1 || action.size(0) != A) {
      throw InputError("action must be [" + std::to_string(A) + "], got " + ShapeText(action));
    }
    const torch::ScalarType dtype = DynamicsDtype();
    IntegratorOptions io;
    io.rtol = run_.config.rtol;
    io.atol = run_.config.atol;
    io.max_steps = std::max<int64_t>(io.max_steps, int64_t(frames) * 2000);
    KeypointPrediction p = [&] {
      torch::NoGradGuard no_grad;
      return PredictKeypoints(
          model, first_frames.slice(0, 0, PredictionInputFrames(model)).unsqueeze(0).contiguous(),
          action.to(torch::kFloat32).reshape({1, A}), frames, IntegratorMethod::kDopri5, io,
          start_estimate);
    }();
    SetDynamicsDtype(dtype);  // PredictKeypoints' float64 guard restores float32
    Prediction out;
    out.keypoints = p.keypoints[0].to(torch::kCPU);
    out.accepted_steps = p.accepted_steps;
    out.rejected_steps = p.rejected_steps;
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> rendered;
    for (int64_t s = 0; s < frames; s += 128) {
      rendered.push_back(
          model->Render(p.keypoints[0].slice(0, s, std::min<int64_t>(s + 128, frames)))
              .to(torch::kCPU));
    }
    out.images = torch::cat(rendered);
    if (truth_frames) {
      torch::Tensor truth = torch::from_blob(const_cast<uint8_t*>(truth_frames->data()),
                                             {1, frames, S, S, 3}, torch::kUInt8)
                                .clone();
      torch::Tensor mse = PredictionMse(model, p.keypoints.to(torch::kFloat32), truth);
      VptResult vpt = VptFromMse(mse, epsilon);
      out.truth = truth[0];
      out.mse = vpt.mse[0];
      out.vpt = vpt.vpt[0];
      out.epsilon = epsilon;
    }
    return out;
  }

  Prediction PredictRun(int run, int frames, const std::string& gl,
                        const StartEstimate& start_estimate) {
    const Dataset& data = *run_.data;
    const std::vector<int64_t> validation = data.ValidationRuns();
    if (run < 0 || run >= int(validation.size())) {
      throw InputError("run " + std::to_string(run) + " is out of range: '" +
                       run_.data_file.string() + "' has " + std::to_string(validation.size()) +
                       " validation runs");
    }
    if (frames < 3) throw InputError("frames must be ≥ 3, got " + std::to_string(frames));
    const int dataset_run = int(validation[size_t(run)]);
    const DatasetInfo& info = data.info();
    std::vector<uint8_t> truth = data.ReadImages(dataset_run);
    const int stored = std::min(frames, info.frames);
    truth.resize(size_t(info.size) * info.size * 3 * size_t(stored));
    if (frames > info.frames) {
      std::vector<uint8_t> more = ResimulateFrames(data, dataset_run, info.frames - 1,
                                                   frames - info.frames, ParseGlBackend(gl));
      truth.insert(truth.end(), more.begin(), more.end());
    }
    const std::vector<double> a = data.ReadAction(dataset_run);
    torch::Tensor first =
        torch::from_blob(truth.data(), {3, info.size, info.size, 3}, torch::kUInt8).clone();
    torch::Tensor action =
        torch::tensor(std::vector<double>(a.begin(), a.begin() + info.nu), torch::kFloat64);
    Prediction out = Predict(first, action, frames, truth, info.vpt_epsilon, start_estimate);
    out.dataset_run = dataset_run;
    return out;
  }

  std::vector<double> ControlAction(const torch::Tensor& x, const torch::Tensor& xdot,
                                    const torch::Tensor& target, const ControllerOptions& o) {
    if (!actuation_checked_) {  // as `keycld control`: only a model of every actuator
      CheckFullyActuated(model()->spec(), RunControlMode(run_.run_dir),
                         Environment(model()->spec().env));
      actuation_checked_ = true;
    }
    const torch::Device cpu(torch::kCPU);
    torch::Tensor xs = StateRows(x, width(), "x", cpu, torch::kFloat64);
    torch::Tensor vs = StateRows(xdot, width(), "xdot", cpu, torch::kFloat64);
    torch::Tensor ts = StateRows(target, width(), "target", cpu, torch::kFloat64);
    if (xs.size(0) != 1 || vs.size(0) != 1) throw InputError("x and xdot must be one state");
    if (!torch::isfinite(xs).all().item<bool>() || !torch::isfinite(vs).all().item<bool>()) {
      throw InputError("x and xdot must be finite");
    }
    const std::string& name = model()->spec().model;
    if (name == "lag-vae" || name == "lag-cavae") {
      // Lag-caVAE's law in q (angle_control.h) from the harness's state pairs: (cos q, sin q)
      // per angle, (x, 0) per translation (coordinate_vae.h).
      LearnedAngleControlModel angle_model(model());
      const std::vector<CoordinateKind> kinds = angle_model.kinds();
      for (size_t i = 0; i < kinds.size(); ++i) {
        if (kinds[i] != CoordinateKind::kAngle) continue;
        const int64_t c = int64_t(2 * i);
        if (!(xs.slice(1, c, c + 2).square().sum().item<double>() > 0) ||
            !(ts.slice(1, c, c + 2).square().sum().item<double>() > 0)) {
          throw InputError("x and target must be points (cos q, sin q) off the origin");
        }
      }
      auto [q, qdot] = CoordinatesOfPairs(kinds, xs, vs);
      const torch::Tensor q_target = CoordinatesOfPairs(kinds, ts, torch::zeros_like(ts)).first;
      AngleEnergyShapingController law(angle_model, TensorValues(q_target), o);
      return law.Act(TensorValues(q), TensorValues(qdot)).u;
    }
    LearnedControlModel control_model(model());  // reads the dynamics' current dtype
    EnergyShapingController controller(control_model, ts, o);
    return controller.Act(xs, vs).u;
  }

 private:
  TrainedRun run_;
  bool actuation_checked_ = false;
};

py::dict ReportDict(const EvaluationReport& r) {
  py::dict d;
  d["env"] = r.env;
  d["control"] = r.control;
  d["model"] = r.model;
  d["solver"] = r.solver;
  d["run_dir"] = r.run_dir;
  d["checkpoint"] = r.checkpoint;
  d["data"] = r.data;
  d["train_steps"] = r.train_steps;
  d["epsilon"] = r.epsilon;
  d["vpt"] = r.vpt.vpt;
  d["vpt_mean"] = r.vpt.mean;
  d["vpt_std"] = r.vpt.std;
  d["vpt_median"] = r.vpt.median;
  d["mean_frame_vpt"] = r.mean_frame_vpt.mean;    // the floors (docs/evaluation.md)
  d["still_frame_vpt"] = r.still_frame_vpt.mean;
  d["mse"] = r.vpt.mse;
  d["validation_runs"] = r.validation_runs;
  d["mse_mean"] = r.mse_mean;
  d["masses"] = r.masses;
  d["has_energy"] = r.has_energy;
  d["constraint_rms"] = r.constraint_rms;
  d["potential_r2"] = r.potential_r2;
  d["energy_relative_variation"] = r.energy_relative_variation;
  d["seconds"] = r.seconds;
  d["files"] = r.files;
  return d;
}

}  // namespace

PYBIND11_MODULE(_keycld, m) {
  m.doc() = "keycld's C++ library (bindings; use the keycld package, not this module).";
  RegisterErrors(m);
  m.attr("__version__") = KEYCLD_VERSION;
  m.def("mujoco_version", &MujocoVersion);
  m.def("model_variants", &ModelVariantNames);
  m.def("preset_file", &PresetFile);

  py::class_<PyEnvironment>(m, "Environment")
      .def(py::init<const std::string&, const std::string&>(), py::arg("name"),
           py::arg("assets") = "")
      .def_property_readonly("name", [](PyEnvironment& e) { return e.env().system_name(); })
      .def_property_readonly("nq", [](PyEnvironment& e) { return e.env().nq(); })
      .def_property_readonly("nv", [](PyEnvironment& e) { return e.env().nv(); })
      .def_property_readonly("nu", [](PyEnvironment& e) { return e.env().nu(); })
      .def_property_readonly("dt", [](PyEnvironment& e) { return e.env().timestep(); })
      .def_property_readonly("time", [](PyEnvironment& e) { return e.env().time(); })
      .def_property_readonly("qpos", [](PyEnvironment& e) { return e.env().qpos(); })
      .def_property_readonly("qvel", [](PyEnvironment& e) { return e.env().qvel(); })
      .def_property_readonly("action", [](PyEnvironment& e) { return e.env().action(); })
      .def("reset", [](PyEnvironment& e, const std::vector<double>& qpos,
                       const std::vector<double>& qvel) { e.env().Reset(qpos, qvel); })
      .def("reset_random", &PyEnvironment::ResetRandom)
      .def("step", &PyEnvironment::Step)
      .def("total_energy", [](PyEnvironment& e) { return e.env().TotalEnergy(); })
      .def("keypoints", &PyEnvironment::KeypointImagePositions)
      .def("render", &PyEnvironment::Render);

  m.def("generate",
        [](const std::string& env, const std::string& control, int runs, int frames, int size,
           uint64_t seed, int workers, const fs::path& out, bool force, const std::string& gl) {
          GenerateOptions o;
          const SystemDescription system = LoadSystemByName(env);
          if (system.builtin) {
            o.env = *system.builtin;
          } else {
            o.system = system;
          }
          o.control = ParseControlMode(control);
          o.runs = runs;
          o.frames = frames;
          o.size = size;
          o.seed = seed;
          o.workers = workers;
          o.out_dir = out;
          o.force = force;
          o.gl = ParseGlBackend(gl);
          o.progress = false;
          GenerateResult r = Interruptible([&] { return GenerateDataset(o); });
          py::dict d;
          d["path"] = r.path;
          d["reused"] = r.reused;
          d["seconds"] = r.seconds;
          d["frames_per_second"] = r.frames_per_second;
          d["info"] = InfoDict(r.info);
          return d;
        });

  m.def("dataset_info", [](const fs::path& path) { return InfoDict(Dataset::Open(path).info()); });

  m.def("import_video",
        [](const std::vector<fs::path>& inputs, const std::string& system, const fs::path& out,
           int size, int frames, int stride, int skip, const std::vector<int>& crop, double dt,
           const fs::path& actions, const std::string& control, bool force) {
          ImportOptions o;
          o.inputs = inputs;
          o.system = system;
          o.out = out;
          o.size = size;
          o.frames = frames;
          o.stride = stride;
          o.skip = skip;
          if (!crop.empty()) {
            if (crop.size() != 3) throw InputError("crop must be (left, top, side)");
            o.crop = std::array<int, 3>{crop[0], crop[1], crop[2]};
          }
          if (dt > 0) o.dt = dt;
          o.actions = actions;
          if (!control.empty()) o.control = ParseControlMode(control);
          o.force = force;
          o.progress = false;
          ImportResult r = Interruptible([&] { return ImportDataset(o); });
          py::dict d;
          d["path"] = r.path;
          d["frames_read"] = r.frames_read;
          d["frames_dropped"] = r.frames_dropped;
          d["seconds"] = r.seconds;
          d["info"] = InfoDict(r.info);
          return d;
        });
  m.def("export_video", [](const fs::path& data, const fs::path& out, const std::string& runs,
                           int scale, int crf, const fs::path& actions, bool force) {
    ExportOptions o;
    o.data = data;
    o.out = out;
    o.runs = runs;
    o.scale = scale;
    o.crf = crf;
    o.actions = actions;
    o.force = force;
    ExportResult r = Interruptible([&] { return ExportDataset(o); });
    py::dict d;
    d["frames"] = r.frames;
    d["runs"] = r.runs;
    d["fps"] = r.fps;
    return d;
  });

  py::class_<PyRun>(m, "Run")
      .def(py::init([](const fs::path& run, const fs::path& checkpoint, const fs::path& data,
                       const std::string& device, int threads) {
        TrainedRunOptions o;
        o.run = run;
        o.checkpoint = checkpoint;
        o.data = data;
        o.device = device;
        o.threads = threads;
        return std::make_unique<PyRun>(o);
      }))
      .def_property_readonly("run_dir", [](PyRun& r) { return r.run().run_dir; })
      .def_property_readonly("checkpoint", [](PyRun& r) { return r.run().checkpoint; })
      .def_property_readonly("data_file", [](PyRun& r) { return r.run().data_file; })
      .def_property_readonly("config_toml", [](PyRun& r) { return r.run().config.ToToml(); })
      .def_property_readonly("spec", [](PyRun& r) { return SpecDict(r.model()->spec()); })
      .def_property_readonly("description",
                             [](PyRun& r) { return DescribeModel(r.model()->spec()); })
      .def_property_readonly("train_steps", [](PyRun& r) { return r.run().position.step; })
      .def_property_readonly("has_energy", [](PyRun& r) { return r.model()->HasEnergy(); })
      .def_property_readonly("device", [](PyRun& r) { return r.model()->device().str(); })
      .def_property_readonly("dataset_info",
                             [](PyRun& r) {
                               if (!r.run().data) throw InputError("no data set is open");
                               return InfoDict(r.run().data->info());
                             })
      .def("named_parameters",
           [](PyRun& r) {
             std::vector<std::pair<std::string, torch::Tensor>> out;
             for (const auto& p : r.model()->named_parameters())
               out.emplace_back(p.key(), p.value());
             return out;
           })
      .def("dynamics_dtype", &PyRun::DynamicsDtypeName)
      .def("set_dynamics_dtype", &PyRun::SetDynamicsDtypeName, kNoGil)
      .def(
          "encode",
          [](PyRun& r, const torch::Tensor& images) {
            Encoding e = r.model()->Encode(
                ModelImages(images, r.model()->spec().image_size, r.model()->device()));
            return std::make_tuple(e.keypoints, e.heatmaps);
          },
          kNoGil)
      .def(
          "render",
          [](PyRun& r, const torch::Tensor& keypoints) {
            const int64_t K = r.model()->StatePoints();
            torch::Tensor k = keypoints.dim() == 2 ? keypoints.unsqueeze(0) : keypoints;
            if (!keypoints.is_floating_point() || k.dim() != 3 || k.size(1) != K ||
                k.size(2) != 2) {
              throw InputError("keypoints must be float [T, " + std::to_string(K) + ", 2], got " +
                               ShapeText(keypoints));
            }
            return r.model()->Render(k.to(r.model()->device(), torch::kFloat32));
          },
          kNoGil)
      .def(
          "acceleration",
          [](PyRun& r, const torch::Tensor& x, const torch::Tensor& xdot,
             const std::optional<torch::Tensor>& u) {
            torch::Tensor xs = r.State(x, "x"), vs = r.State(xdot, "xdot");
            return r.model()->Acceleration(xs, vs, r.Action(u, xs.size(0)));
          },
          kNoGil)
      .def(
          "project_velocity",
          [](PyRun& r, const torch::Tensor& x, const torch::Tensor& xdot) {
            return r.model()->ProjectVelocity(r.State(x, "x"), r.State(xdot, "xdot"));
          },
          kNoGil)
      .def("rollout", &PyRun::Rollout, kNoGil)
      .def("sequence_loss", &PyRun::Loss, kNoGil)
      .def(
          "mass_diagonal", [](PyRun& r) { return r.model()->MassDiagonal(); }, kNoGil)
      .def(
          "potential",
          [](PyRun& r, const torch::Tensor& x) { return r.model()->Potential(r.State(x, "x")); },
          kNoGil)
      .def(
          "potential_gradient",
          [](PyRun& r, const torch::Tensor& x) {
            return r.model()->PotentialGradient(r.State(x, "x"));
          },
          kNoGil)
      .def(
          "input_matrix",
          [](PyRun& r, const torch::Tensor& x) { return r.model()->InputMatrix(r.State(x, "x")); },
          kNoGil)
      .def("predict_run",
           [](PyRun& r, int run, int frames, const std::string& gl, bool tta, int64_t refine_steps,
              double refine_lr) {
             const StartEstimate start_estimate{tta, refine_steps, refine_lr};
             return PredictionDict(
                 Interruptible([&] { return r.PredictRun(run, frames, gl, start_estimate); }));
           })
      .def("predict_images",
           [](PyRun& r, const torch::Tensor& images, const torch::Tensor& action, int frames,
              bool tta, int64_t refine_steps, double refine_lr) {
             const StartEstimate start_estimate{tta, refine_steps, refine_lr};
             return PredictionDict(Interruptible([&] {
               return r.Predict(images, action, frames, std::nullopt, 0.0, start_estimate);
             }));
           })
      .def("control_action",
           [](PyRun& r, const torch::Tensor& x, const torch::Tensor& xdot,
              const torch::Tensor& target, double kp, double kd, const std::string& gain_scale,
              bool tangent_projection, double u_max) {
             ControllerOptions o;
             o.kp = kp;
             o.kd = kd;
             o.gain_scale = ParseGainScale(gain_scale);
             o.tangent_projection = tangent_projection;
             o.u_max = u_max;
             py::gil_scoped_release release;
             return r.ControlAction(x, xdot, target, o);
           });

  m.def("train", [](const fs::path& out, const fs::path& config, const std::string& settings,
                    const fs::path& data, bool resume, bool progress, bool quiet) {
    TrainOptions t;
    t.run_dir = out;
    t.resume = resume;
    t.progress = progress;
    t.quiet = quiet;
    if (resume) {
      const fs::path saved = out / "config.toml";
      if (!fs::exists(saved)) {
        throw InputError("nothing to resume: '" + saved.string() + "' does not exist");
      }
      if (!config.empty() || !data.empty()) {
        throw InputError(
            "resume continues the saved configuration; pass only settings of "
            "[train] epochs / max_steps / lr / threads / device / precision / kernels");
      }
      t.config = TrainConfig::FromToml(saved);
    } else if (!config.empty()) {
      t.config = TrainConfig::FromToml(config);
    }
    if (!settings.empty()) t.config.MergeToml(settings, "settings");
    if (!data.empty()) t.config.data = data;
    TrainSummary s = Interruptible([&] { return Train(t); });
    py::dict d;
    d["steps"] = s.steps;
    d["steps_this_call"] = s.steps_this_call;
    d["epochs_completed"] = s.epochs_completed;
    d["seconds"] = s.seconds;
    d["seconds_per_step"] = s.seconds_per_step;
    d["last_loss"] = s.last_loss;
    d["val_vpt_mean"] = s.val_vpt_mean;
    d["val_vpt_median"] = s.val_vpt_median;
    d["val_runs"] = s.val_runs;
    d["checkpoint"] = s.checkpoint;
    return d;
  });

  m.def("evaluate", [](const fs::path& run, const fs::path& checkpoint, const fs::path& data,
                       const fs::path& out, const std::string& solver, bool plots, int threads,
                       const std::string& device) {
    EvaluateOptions o;
    o.run_dir = run;
    o.checkpoint = checkpoint;
    o.data = data;
    o.out_dir = out;
    o.method = ParseIntegratorMethod(solver);
    o.plots = plots;
    o.threads = threads;
    o.device = device;
    EvaluationReport r = Interruptible([&] { return Evaluate(o); });
    return ReportDict(r);
  });
}
