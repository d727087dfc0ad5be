#include "keycld/eval/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "keycld/data/dataset.h"
#include "keycld/dynamics/constraints.h"
#include "keycld/eval/plot.h"
#include "keycld/sim/environment.h"
#include "keycld/train/checkpoint.h"
#include "keycld/train/config.h"
#include "keycld/train/metrics.h"
#include "keycld/train/relabel.h"
#include "keycld/train/trained_run.h"
#include "keycld/train/trainer.h"
#include "keycld/util/atomic_file.h"
#include "keycld/util/error.h"
#include "keycld/util/tensor_values.h"
#include "keycld/util/text.h"

namespace keycld {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::vector<double> MovingAverage(const std::vector<double>& values, int window) {
  if (window < 1) throw InputError("MovingAverage: window must be ≥ 1");
  const int64_t n = int64_t(values.size()), half = window / 2;
  std::vector<double> prefix(size_t(n + 1), 0.0);
  for (int64_t i = 0; i < n; ++i) prefix[size_t(i + 1)] = prefix[size_t(i)] + values[size_t(i)];
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t a = std::max<int64_t>(0, i - half), b = std::min<int64_t>(n, i + half + 1);
    out[size_t(i)] = (prefix[size_t(b)] - prefix[size_t(a)]) / double(b - a);
  }
  return out;
}

namespace {

// Least-squares fit y ≈ a·x + b; returns R² and a.
std::pair<double, double> AffineFit(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = double(x.size());
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) mx += x[i] / n, my += y[i] / n;
  double sxx = 0, sxy = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (sxx <= 0 || syy <= 0) return {0.0, 0.0};
  const double a = sxy / sxx;
  return {sxy * sxy / (sxx * syy), a};
}

// The pieces of one evaluation, in the order Evaluate runs them.
struct GridData {
  int count = 0;
  std::vector<double> qpos;    // [G, nq]
  torch::Tensor x;             // estimated keypoints [G, 2K]
  std::vector<double> v_true;  // simulator potential energy per grid state (J)
  std::vector<double> v_learned;
};

void CheckEvaluateOptions(const EvaluateOptions& options) {
  // The bound keeps the rollout's memory small (each frame holds a few tensors; 2·10⁹ frames
  // exhausted 24 GB) and matches predict's --frames.
  if (options.energy_frames < 3 || options.energy_frames > 100000) {
    throw InputError("--energy-frames must be in [3, 100000], got " +
                     std::to_string(options.energy_frames));
  }
  if (options.threads < 0) throw InputError("threads must be ≥ 0 (0 = all cores)");
  CheckStartEstimate(options.start_estimate);
}

TrainedRun OpenForEvaluation(const EvaluateOptions& options) {
  CheckEvaluateOptions(options);
  if (!fs::is_directory(options.run_dir)) {
    throw IoError("run folder not found: '" + options.run_dir.string() + "'");
  }
  TrainedRunOptions o;
  o.run = options.run_dir;
  o.checkpoint = options.checkpoint;
  o.data = options.data;
  o.device = options.device;
  o.threads = options.threads;
  TrainedRun run = OpenTrainedRun(o);
  if (run.data->ValidationRuns().empty()) {
    throw InputError("data set '" + run.data_file.string() + "' has no validation runs");
  }
  return run;
}

VptResult ScoreValidationRuns(TrainedRun& run, const torch::Tensor& images,
                              const torch::Tensor& actions, IntegratorMethod method,
                              const StartEstimate& start_estimate) {
  VptOptions vo;
  vo.start_estimate = start_estimate;
  vo.epsilon = run.data->info().vpt_epsilon;
  vo.rtol = run.config.rtol;
  vo.atol = run.config.atol;
  vo.method = method;
  return ValidPredictionTime(run.model, images, actions, vo);
}

// Estimates of the state-grid images, their constraint residuals and the potential fit. A data
// set imported from video has no grid (no simulator): the first frames of the validation runs
// `images` [V, T, S, S, 3] stand in for the residuals and the learned potential's range, and
// the fits against the simulator are n/a.
GridData AnalyseGrid(TrainedRun& run, const torch::Tensor& images, EvaluationReport* report) {
  torch::NoGradGuard no_grad;
  Model& model = run.model;
  const ModelSpec& spec = model->spec();
  const DatasetInfo& info = run.data->info();
  GridData g;
  if (info.has_state()) {
    StateGridEstimates e = EncodeStateGrid(model, *run.data);
    g.qpos = std::move(e.qpos);
    g.count = e.count;
    g.x = e.x;
  } else {
    const torch::Tensor first = images.select(1, 0).contiguous();
    g.x = model->Encode(ImagesToFloat(first, model->device()))
              .keypoints.reshape({first.size(0), -1});
  }
  const int64_t n = g.x.size(0);
  report->potential_r2 = report->potential_scale = std::nan("");
  report->dynamics.acceleration.scale = report->dynamics.acceleration.r2 = std::nan("");
  report->constraint_rms = report->constraint_max = std::nan("");
  report->constraint_spread = report->best_constraint_spread = std::nan("");
  if (report->image_keypoints) {
    const HolonomicConstraints constraints = spec.Constraints();
    const torch::Tensor x = g.x.to(torch::kCPU, torch::kFloat64);  // [n, 2K]
    torch::Tensor phi = constraints.Phi(x);
    report->constraint_rms = phi.square().mean().sqrt().item<double>();
    report->constraint_max = phi.abs().max().item<double>();
    // The keypoint order check of training (train/relabel.h; all K! orders, K ≤ 6).
    if (constraints.num_constraints() > 0 && spec.num_keypoints >= 2 &&
        spec.num_keypoints <= 6 && n >= 2) {
      const KeypointOrderChoice c = ChooseKeypointOrder(constraints, x.reshape({n, -1, 2}), 1.0);
      report->constraint_spread = c.current;
      report->best_constraint_spread = c.best;
      report->best_keypoint_order = c.order;
    }
  }
  if (report->has_energy) g.v_learned = TensorValues(model->Potential(g.x));
  if (!info.has_state()) return g;
  Environment env(DatasetSystem(info));
  const std::vector<double> zero_qvel(size_t(env.nv()), 0.0);
  g.v_true.resize(size_t(g.count));
  for (int i = 0; i < g.count; ++i) {
    env.Reset(std::span<const double>(g.qpos.data() + size_t(i) * env.nq(), size_t(env.nq())),
              zero_qvel);
    g.v_true[size_t(i)] = env.TotalEnergy();  // zero velocity: the potential energy
  }
  if (report->has_energy) {
    std::tie(report->potential_r2, report->potential_scale) = AffineFit(g.v_true, g.v_learned);
  }
  // The map from keypoints to a custom system's joints is not known (diagnostics.h): no
  // acceleration check.
  if (env.name() != EnvName::kCustom && report->image_keypoints) {
    report->dynamics =
        DiagnoseDynamics(model, env, g.x, g.qpos, info.control != ControlMode::kNone);
  }
  return g;
}

struct EnergyTrace {
  std::vector<double> time, kinetic, potential, total;
  std::string error;  // why there is none
};

// Total learned energy along an unactuated rollout from validation run 0.
EnergyTrace EnergyRollout(TrainedRun& run, const torch::Tensor& images, const GridData& grid,
                          const EvaluateOptions& options, EvaluationReport* report) {
  EnergyTrace e;
  if (!report->has_energy) {
    e.error = "the model has no energy (" + run.model->spec().model + ")";
    report->energy_relative_variation = std::nan("");
    return e;
  }
  torch::NoGradGuard no_grad;
  Model& model = run.model;
  const ModelSpec& spec = model->spec();
  torch::Tensor first = ImagesToFloat(images[0].slice(0, 0, 3), model->device());
  torch::Tensor x = model->Encode(first).keypoints.reshape({1, 3, -1});
  DoublePrecisionDynamics fp64(model);
  const PhaseState start = InitialStateFromEstimates(model, x);
  std::vector<double> times;
  for (int t = 0; t < options.energy_frames; ++t) times.push_back(t * spec.dt);
  IntegratorOptions io;
  io.rtol = run.config.rtol;
  io.atol = run.config.atol;
  io.max_steps = 1000000;
  try {
    Trajectory traj =
        model->Rollout(start.x, start.xdot, torch::zeros({1, spec.action_dim}, start.x.options()),
                       times, options.method, io);
    torch::Tensor xs = traj.x[0], vs = traj.xdot[0];
    e.kinetic = TensorValues(0.5 * (vs.square() * model->MassDiagonal()).sum(1));
    e.potential = TensorValues(model->Potential(xs).reshape({-1}));
    for (size_t i = 0; i < e.kinetic.size(); ++i) {
      e.total.push_back(e.kinetic[i] + e.potential[i]);
      e.time.push_back(times[i]);
    }
    const auto [emin, emax] = std::minmax_element(e.total.begin(), e.total.end());
    const auto [vmin, vmax] = std::minmax_element(grid.v_learned.begin(), grid.v_learned.end());
    report->energy_relative_variation =
        *vmax > *vmin ? (*emax - *emin) / (*vmax - *vmin) : std::nan("");
  } catch (const NumericalError& err) {
    e.error = err.what();
    report->energy_relative_variation = std::nan("");
  }
  return e;
}

std::vector<double> Frames(size_t n) {
  std::vector<double> f(n);
  for (size_t t = 0; t < n; ++t) f[t] = double(t);
  return f;
}

std::vector<double> ClampPositive(std::vector<double> v) {
  for (double& x : v) x = std::max(x, 1e-12);
  return v;
}

void PlotErrors(const EvaluationReport& r, const fs::path& out) {
  const std::vector<double> frames = Frames(r.mse_mean.size());
  PlotOptions po;
  po.title = r.env + " / " + r.control + ": prediction error (" +
             std::to_string(r.validation_runs.size()) + " validation runs)";
  po.x_label = "frame";
  po.y_label = "per-pixel MSE";
  po.log_y = true;
  po.h_lines = {r.epsilon};
  WriteLinePlot(out / "mse.png",
                {{"prediction, mean", frames, ClampPositive(r.mse_mean), {}},
                 {"prediction, median", frames, ClampPositive(r.mse_median), {}},
                 {"reconstruction of the estimates, mean",
                  frames,
                  ClampPositive(r.rollouts.reconstruction_mse_mean),
                  {}}},
                po);
  PlotOptions pk;
  pk.title = "keypoint error of the prediction against the estimated keypoints (mean)";
  pk.x_label = "frame";
  pk.y_label = "distance (normalized image units)";
  pk.log_y = true;
  WriteLinePlot(out / "keypoint_error.png",
                {{"prediction", frames, ClampPositive(r.rollouts.keypoint_error_mean), {}}}, pk);

  std::vector<std::string> categories;
  std::vector<double> vpts;
  for (size_t i = 0; i < r.validation_runs.size(); ++i) {
    categories.push_back(std::to_string(r.validation_runs[i]));
    vpts.push_back(r.vpt.vpt[i]);
  }
  PlotOptions pb;
  pb.title =
      "VPT per validation run: mean " + Fixed(r.vpt.mean, 1) + ", median " + Fixed(r.vpt.median, 1);
  pb.x_label = "validation run (data-set index)";
  pb.y_label = "VPT (frames)";
  pb.y_min = 0;
  pb.y_max = double(r.mse_mean.size());
  WriteBarChart(out / "vpt_per_run.png", categories, {{"VPT", {}, vpts, {}}}, pb);
}

void PlotTraining(const fs::path& run_dir, int val_runs, const fs::path& out,
                  std::vector<fs::path>* files) {
  const MetricsHistory m = ReadMetrics(run_dir / "metrics.jsonl");
  if (!m.steps.empty()) {
    const int window = std::max<int>(1, int(m.steps.size() / 100));
    PlotOptions pl;
    pl.title = "training losses (moving average over " + std::to_string(window) + " steps)";
    pl.x_label = "step";
    pl.y_label = "loss";
    pl.log_y = true;
    std::vector<double> step;
    for (const StepRecord& r : m.steps) step.push_back(double(r.step));
    std::vector<PlotSeries> series;
    for (auto [label, field] :
         {std::pair{"total", &StepRecord::loss}, std::pair{"reconstruction", &StepRecord::rec},
          std::pair{"dynamics", &StepRecord::dyn}, std::pair{"heatmap BCE", &StepRecord::bce}}) {
      std::vector<double> values;
      for (const StepRecord& r : m.steps) values.push_back(r.*field);
      series.push_back({label, step, ClampPositive(MovingAverage(values, window)), {}});
    }
    WriteLinePlot(out / "training_loss.png", series, pl);
    files->push_back(out / "training_loss.png");
  }
  std::vector<double> epoch, vpt_mean, vpt_std;
  for (const EpochRecord& r : m.epochs) {
    if (!r.vpt_mean) continue;
    epoch.push_back(double(r.epoch));
    vpt_mean.push_back(*r.vpt_mean);
    vpt_std.push_back(r.vpt_std.value_or(0.0));
  }
  if (!epoch.empty()) {
    PlotOptions pv;
    pv.title = "validation VPT after each epoch (first " + std::to_string(val_runs) +
               " validation runs, mean ± std)";
    pv.x_label = "epoch";
    pv.y_label = "VPT (frames)";
    pv.y_min = 0;
    WriteLinePlot(out / "training_vpt.png", {{"VPT", epoch, vpt_mean, vpt_std}}, pv);
    files->push_back(out / "training_vpt.png");
  }
}

void PlotPotential(const EvaluationReport& r, EnvName env, const GridData& g,
                   const fs::path& data_file, const fs::path& png) {
  PlotOptions pp;
  pp.title = "learned potential energy over the state grid (R² vs the simulator's " +
             Fixed(r.potential_r2, 3) + ")";
  if (env == EnvName::kPendulum) {
    std::vector<size_t> order(static_cast<size_t>(g.count));
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return g.qpos[a] < g.qpos[b]; });
    double mx = 0, my = 0;
    for (size_t i = 0; i < order.size(); ++i) mx += g.v_true[i], my += g.v_learned[i];
    mx /= double(g.count);
    my /= double(g.count);
    std::vector<double> angle, learned, fitted;
    for (size_t i : order) {
      angle.push_back(g.qpos[i]);
      learned.push_back(g.v_learned[i]);
      fitted.push_back(my + r.potential_scale * (g.v_true[i] - mx));
    }
    pp.x_label = "pole angle (rad, 0 = up)";
    pp.y_label = "V (learned units)";
    WriteLinePlot(
        png, {{"learned V(x̂)", angle, learned, {}}, {"true m·g·z, affine fit", angle, fitted, {}}},
        pp);
    return;
  }
  std::map<double, int> xs, ys;
  for (int i = 0; i < g.count; ++i) {
    xs[g.qpos[size_t(i) * 2]] = 0;
    ys[g.qpos[size_t(i) * 2 + 1]] = 0;
  }
  int i = 0;
  for (auto& [k, v] : xs) v = i++;
  i = 0;
  for (auto& [k, v] : ys) v = i++;
  const int nx = int(xs.size()), ny = int(ys.size());
  std::vector<double> values(static_cast<size_t>(nx * ny), std::nan(""));
  for (int j = 0; j < g.count; ++j) {
    values[size_t(ys[g.qpos[size_t(j) * 2 + 1]] * nx + xs[g.qpos[size_t(j) * 2]])] =
        g.v_learned[size_t(j)];
  }
  if (std::any_of(values.begin(), values.end(), [](double v) { return std::isnan(v); })) {
    throw FormatError("the state grid of '" + data_file.string() + "' is not a full grid");
  }
  const double dx = nx > 1 ? (xs.rbegin()->first - xs.begin()->first) / (nx - 1) : 1;
  const double dy = ny > 1 ? (ys.rbegin()->first - ys.begin()->first) / (ny - 1) : 1;
  pp.x_label = env == EnvName::kCartpole ? "cart position (m)" : "shoulder angle (rad)";
  pp.y_label = env == EnvName::kCartpole ? "pole angle (rad, 0 = up)" : "elbow angle (rad)";
  WriteHeatMap(png, values, nx, ny, xs.begin()->first - dx / 2, xs.rbegin()->first + dx / 2,
               ys.begin()->first - dy / 2, ys.rbegin()->first + dy / 2, "learned V", pp);
}

// Learned against true accelerations at the grid states, in keypoint units.
void PlotAcceleration(const DynamicsDiagnostics& d, const fs::path& png) {
  std::vector<PlotSeries> series;
  double lo = 0, hi = 0;
  for (const CoordinateDiagnostics& c : d.coordinates) {
    for (const auto* v : {&c.learned_acceleration, &c.true_acceleration}) {
      for (double x : *v) lo = std::min(lo, x), hi = std::max(hi, x);
    }
    PlotSeries s{c.name, c.true_acceleration, c.learned_acceleration, {}};
    s.markers = true;
    series.push_back(s);
  }
  if (!(hi > lo)) hi = lo + 1;
  series.push_back({"learned = true", {lo, hi}, {lo, hi}, {}});
  PlotOptions p;
  p.title = "learned vs true acceleration at the grid states (scale " +
            Fixed(d.acceleration.scale, 3) + ", R² " + Fixed(d.acceleration.r2, 3) + ")";
  p.x_label = "simulator (normalized units / s²)";
  p.y_label = "learned (normalized units / s²)";
  WriteLinePlot(png, series, p);
}

void PlotEnergy(const EnergyTrace& e, const std::string& solver, int frames, const fs::path& png) {
  PlotOptions pe;
  pe.title = "learned energy along an unactuated " + solver + " rollout of " +
             std::to_string(frames) + " frames";
  pe.x_label = "time (s)";
  pe.y_label = "energy (learned units)";
  WriteLinePlot(png,
                {{"total", e.time, e.total, {}},
                 {"kinetic", e.time, e.kinetic, {}},
                 {"potential", e.time, e.potential, {}}},
                pe);
}

json FitJson(const ScaleFit& f) {
  return {{"scale", f.scale}, {"r2", f.r2}, {"samples", f.samples}};
}

json DynamicsJson(const DynamicsDiagnostics& d) {
  json per = json::array(), states = json::array(), input = json::array();
  for (const CoordinateDiagnostics& c : d.coordinates) {
    per.push_back({{"coordinate", c.name},
                   {"scale", c.acceleration.scale},
                   {"r2", c.acceleration.r2},
                   {"lever", c.lever}});
    json s = {{"coordinate", c.name},
              {"unit", c.unit},
              {"error_rms", c.error_rms},
              {"error_mean", c.error_mean},
              {"error_max", c.error_max}};
    if (c.unit == "deg") {
      s["link_length_mean"] = c.link_length_mean;
      s["link_length_std"] = c.link_length_std;
    }
    states.push_back(s);
  }
  for (const ScaleFit& f : d.input) input.push_back(FitJson(f));
  json j = {{"acceleration_scale", d.acceleration.scale},
            {"acceleration_r2", d.acceleration.r2},
            {"per_coordinate", per}};
  if (!d.input.empty()) j["input_scale"] = input;
  return {{"dynamics_vs_true", j}, {"keypoints_vs_state", states}};
}

json RolloutJson(const RolloutDiagnostics& r) {
  return {{"keypoint_error_per_frame", r.keypoint_error_mean},
          {"reconstruction_mse_per_frame", r.reconstruction_mse_mean},
          {"reconstruction_vpt",
           {{"mean", r.reconstruction_vpt.mean},
            {"std", r.reconstruction_vpt.std},
            {"median", r.reconstruction_vpt.median}}},
          {"failed_runs", r.failed_runs},
          {"failures_dynamics", r.failures_dynamics},
          {"failures_rendering", r.failures_rendering},
          {"keypoint_error_at_failure", r.keypoint_error_at_failure}};
}

// Why a baseline has no constraint residual and no acceleration check.
constexpr const char* kNotImageKeypoints =
    "n/a (the model's states are generalised coordinates, not image keypoints)";

// The keypoint order check (train/relabel.h), a table row, or nothing where there is none.
std::string KeypointOrderRow(const EvaluationReport& r) {
  if (r.best_keypoint_order.empty()) return "";
  return "| keypoint order: spread of the constraints Σ Var Φ over the same estimates, the "
         "model's / the least of any order (" +
         KeypointOrderString(r.best_keypoint_order) + ") | " + Sci(r.constraint_spread) + " / " +
         Sci(r.best_constraint_spread) + " |\n";
}

// The constraint residual, or why there is none.
std::string ConstraintResidual(const EvaluationReport& r) {
  if (!r.image_keypoints) return kNotImageKeypoints;
  return "RMS " + Sci(r.constraint_rms) + ", max " + Sci(r.constraint_max);
}

// The learned mass scalars, or why there are none.
std::string Masses(const EvaluationReport& r) {
  if (r.masses.empty()) return "n/a (no learned Lagrangian of keypoints: " + r.model + ")";
  std::string out;
  for (size_t k = 0; k < r.masses.size(); ++k) out += (k ? ", " : "") + Sci(r.masses[k]);
  return out;
}

// Why a report has no acceleration check.
std::string NoAccelerationCheck(const EvaluationReport& r) {
  if (!r.image_keypoints) return kNotImageKeypoints;
  return r.has_simulator ? "n/a (needs the map from keypoints to joints: built-in systems only)"
                         : "n/a (needs a simulator: imported data set)";
}

std::string DynamicsMarkdown(const EvaluationReport& report) {
  const DynamicsDiagnostics& d = report.dynamics;
  const RolloutDiagnostics& r = report.rollouts;
  std::ostringstream md;
  md << "| learned / true acceleration at the grid states (1 = right) | ";
  if (std::isfinite(d.acceleration.scale)) {
    md << "**" << Fixed(d.acceleration.scale, 3) << "** (R² " << Fixed(d.acceleration.r2, 3)
       << "; ";
    for (size_t i = 0; i < d.coordinates.size(); ++i) {
      md << (i ? ", " : "") << d.coordinates[i].name << " "
         << Fixed(d.coordinates[i].acceleration.scale, 3);
    }
    md << ") |\n";
  } else {
    md << NoAccelerationCheck(report) << " |\n";
  }
  for (size_t a = 0; a < d.input.size(); ++a) {
    md << "| learned / true effect of actuator " << a + 1 << " | " << Fixed(d.input[a].scale, 3)
       << " (R² " << Fixed(d.input[a].r2, 3) << ") |\n";
  }
  for (const CoordinateDiagnostics& c : d.coordinates) {
    md << "| " << c.name << " from the keypoints vs the true state | RMS error " << Sci(c.error_rms)
       << " " << c.unit << " (mean " << Sci(c.error_mean) << ", max " << Sci(c.error_max) << ")";
    if (c.unit == "deg") {
      md << "; link length " << Fixed(c.link_length_mean, 4) << " ± " << Sci(c.link_length_std);
    }
    md << " |\n";
  }
  md << "| VPT the estimator and renderer allow (reconstruction of the estimates) | "
     << Fixed(r.reconstruction_vpt.mean, 2) << " ± " << Fixed(r.reconstruction_vpt.std, 2) << " |\n"
     << "| runs whose prediction fails, by cause | " << r.failed_runs << ": " << r.failures_dynamics
     << " dynamics (the frame renders well from its own estimate), " << r.failures_rendering
     << " rendering; keypoint error at failure " << Sci(r.keypoint_error_at_failure) << " |\n";
  return md.str();
}

void WriteEvaluationJson(const EvaluationReport& report, const TrainedRun& run,
                         const EvaluateOptions& options, const std::string& energy_error,
                         const fs::path& out) {
  json j;
  j["run_dir"] = report.run_dir.string();
  j["checkpoint"] = report.checkpoint.string();
  j["train_steps"] = report.train_steps;
  j["train_integrator"] = report.train_integrator;
  j["integrator_warmup_epochs"] = report.integrator_warmup_epochs;
  j["data"] = report.data.string();
  j["env"] = report.env;
  j["control"] = report.control;
  j["model"] = report.model;
  j["solver"] = report.solver;
  j["rtol"] = run.config.rtol;
  j["atol"] = run.config.atol;
  j["epsilon"] = report.epsilon;
  j["validation_runs"] = report.validation_runs;
  j["start_estimate"] = {{"dihedral_average", options.start_estimate.dihedral_average},
                         {"refine_steps", options.start_estimate.refine_steps},
                         {"refine_lr", options.start_estimate.refine_lr}};
  j["vpt"] = {{"mean", report.vpt.mean},
              {"std", report.vpt.std},
              {"median", report.vpt.median},
              {"per_run", report.vpt.vpt}};
  j["mse_per_frame"] = {{"mean", report.mse_mean}, {"median", report.mse_median}};
  j["mean_frame_vpt"] = {{"mean", report.mean_frame_vpt.mean},
                         {"std", report.mean_frame_vpt.std},
                         {"median", report.mean_frame_vpt.median}};
  j["still_frame_vpt"] = {{"mean", report.still_frame_vpt.mean},
                          {"std", report.still_frame_vpt.std},
                          {"median", report.still_frame_vpt.median}};
  j["masses"] = report.masses;
  j["constraint_residual_grid"] = {{"rms", report.constraint_rms}, {"max", report.constraint_max}};
  if (!report.best_keypoint_order.empty()) {
    j["keypoint_order"] = {{"constraint_spread", report.constraint_spread},
                           {"best_constraint_spread", report.best_constraint_spread},
                           {"best_order", report.best_keypoint_order}};
  }
  if (report.has_energy) {
    j["potential_vs_true"] = {{"r2", report.potential_r2}, {"scale", report.potential_scale}};
  }
  j.update(DynamicsJson(report.dynamics));
  j["rollout_keypoints"] = RolloutJson(report.rollouts);
  j["energy_rollout"] = {{"frames", options.energy_frames},
                         {"relative_variation", std::isfinite(report.energy_relative_variation)
                                                    ? json(report.energy_relative_variation)
                                                    : json(nullptr)}};
  if (!energy_error.empty()) j["energy_rollout"]["error"] = energy_error;
  j["dopri5_steps"] = {{"accepted", report.vpt.accepted_steps},
                       {"rejected", report.vpt.rejected_steps}};
  j["seconds"] = report.seconds;
  j["keycld_version"] = KEYCLD_VERSION;
  WriteTextAtomically(out / "evaluation.json", j.dump(2) + "\n");
}

// How the prediction's start was estimated, for evaluation.md.
std::string DescribeStartEstimate(const StartEstimate& s) {
  if (s.IsPaper()) return "estimates of frames 0-2, central velocity (the paper's)";
  std::string text = s.dihedral_average ? "mean over the 8 dihedral transforms" : "one estimate";
  text += " per frame";
  if (s.refine_steps > 0) {
    text += ", refined by render and compare (" + std::to_string(s.refine_steps) +
            " Adam steps, lr " + Sci(s.refine_lr) + ")";
  }
  return text;
}

// Where the constraint residuals were measured.
std::string ResidualStates(const EvaluationReport& r) {
  return r.has_simulator ? "the state grid" : "the validation runs' first frames";
}

// The R² of the learned potential against the simulator's, or why there is none.
std::string PotentialFit(const EvaluationReport& r) {
  if (std::isfinite(r.potential_r2)) return "R² " + Fixed(r.potential_r2, 3);
  if (!r.has_simulator) return "n/a (needs a simulator: imported data set)";
  return "n/a";
}

void WriteEvaluationMarkdown(const EvaluationReport& report, const TrainedRun& run,
                             const EvaluateOptions& options, const std::string& energy_error,
                             const fs::path& out) {
  std::ostringstream md;
  md << "# Evaluation of `" << report.run_dir.string() << "`\n\n"
     << "| | |\n| --- | --- |\n"
     << "| system | " << report.env << ", control " << report.control << " |\n"
     << "| model | " << report.model << ", " << report.train_steps << " training steps ("
     << report.train_integrator << " in the dynamics loss"
     << (report.integrator_warmup_epochs > 0
             ? ", after " + Fixed(report.integrator_warmup_epochs, 1) + " warm-up epochs"
             : std::string())
     << ") |\n"
     << "| data set | `" << report.data.string() << "` |\n"
     << "| validation runs | " << report.validation_runs.size() << " |\n"
     << "| solver | " << report.solver
     << (options.method == IntegratorMethod::kDopri5
             ? " (rtol " + Sci(run.config.rtol) + ", atol " + Sci(run.config.atol) + ")"
             : std::string(" (one step per frame)"))
     << " |\n"
     << "| start state | " << DescribeStartEstimate(options.start_estimate) << " |\n"
     << "| VPT threshold ε | " << Sci(report.epsilon) << " |\n"
     << "| **VPT (frames)** | **" << Fixed(report.vpt.mean, 2) << " ± " << Fixed(report.vpt.std, 2)
     << "**, median " << Fixed(report.vpt.median, 1) << " |\n"
     << "| VPT of the data set's mean frame drawn for every frame (a floor) | "
     << Fixed(report.mean_frame_vpt.mean, 2) << " ± " << Fixed(report.mean_frame_vpt.std, 2)
     << ", median " << Fixed(report.mean_frame_vpt.median, 1) << " |\n"
     << "| VPT of the start frame (frame 1) held for every frame: a model that predicts no motion | "
     << Fixed(report.still_frame_vpt.mean, 2) << " ± " << Fixed(report.still_frame_vpt.std, 2)
     << ", median " << Fixed(report.still_frame_vpt.median, 1) << " |\n"
     << DynamicsMarkdown(report) << "| learned masses m_k | " << Masses(report);
  md << " |\n"
     << "| constraint residual of the estimates on " << ResidualStates(report) << " | "
     << ConstraintResidual(report) << (report.image_keypoints ? " (normalized image units)" : "")
     << " |\n"
     << KeypointOrderRow(report)
     << "| learned V vs the simulator's potential (R² of an affine fit) | " << PotentialFit(report)
     << " |\n"
     << "| learned energy variation along a " << options.energy_frames
     << "-frame unactuated rollout (relative to V's range over " << ResidualStates(report) << ") | "
     << (std::isfinite(report.energy_relative_variation) ? Sci(report.energy_relative_variation)
                                                         : "n/a " + energy_error)
     << " |\n"
     << "| wall time | " << Fixed(report.seconds, 1) << " s |\n\n";
  for (const fs::path& f : report.files) {
    md << "![" << f.stem().string() << "](" << f.filename().string() << ")\n\n";
  }
  WriteTextAtomically(out / "evaluation.md", md.str());
}

void FillRunFacts(const TrainedRun& run, const EvaluateOptions& options, EvaluationReport* report) {
  const ModelSpec& spec = run.model->spec();
  report->env = spec.SystemName();
  report->control = ControlModeString(run.data->info().control);
  report->model = spec.model;
  report->has_energy = run.model->HasEnergy();
  report->has_simulator = run.data->info().has_state();
  report->image_keypoints = run.model->StatesAreImageKeypoints();
  report->solver = IntegratorMethodString(options.method);
  report->run_dir = run.run_dir;
  report->checkpoint = run.checkpoint;
  report->data = run.data_file;
  report->epsilon = run.data->info().vpt_epsilon;
  report->validation_runs = run.data->ValidationRuns();
  report->train_steps = run.position.step;
  report->train_integrator = run.config.integrator;
  report->integrator_warmup_epochs = run.config.integrator_warmup_epochs;
}

}  // namespace

namespace {

// The VPT of drawing one image for every frame of each validation run: reference(run's frames
// [N, S, S, 3] float64 in [0, 1]) gives that run's image [S, S, 3].
VptResult ConstantImageVpt(const Dataset& data,
                           const std::function<torch::Tensor(const torch::Tensor&)>& reference) {
  const DatasetInfo& info = data.info();
  const int64_t S = info.size, N = info.frames;
  std::vector<torch::Tensor> mse;  // per run [N]
  for (int64_t run : data.ValidationRuns()) {
    std::vector<uint8_t> pixels = data.ReadImages(int(run));
    const torch::Tensor images =
        torch::from_blob(pixels.data(), {N, S, S, 3}, torch::kUInt8).to(torch::kFloat64) / 255.0;
    mse.push_back((images - reference(images)).square().mean({1, 2, 3}));
  }
  return VptFromMse(torch::stack(mse), info.vpt_epsilon);
}

}  // namespace

VptResult MeanFrameVpt(const Dataset& data) {
  const int64_t S = data.info().size;
  std::vector<float> mean = data.ReadMeanImage();
  const torch::Tensor m =
      torch::from_blob(mean.data(), {S, S, 3}, torch::kFloat32).to(torch::kFloat64);
  return ConstantImageVpt(data, [&](const torch::Tensor&) { return m; });
}

VptResult StillFrameVpt(const Dataset& data) {
  if (data.info().frames < 2) {
    throw InputError("the still-frame VPT needs runs of at least 2 frames; " +
                     data.path().string() + " has " + std::to_string(data.info().frames));
  }
  return ConstantImageVpt(data, [](const torch::Tensor& images) { return images[1]; });
}

EvaluationReport Evaluate(const EvaluateOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  TrainedRun run = OpenForEvaluation(options);
  EvaluationReport report;
  FillRunFacts(run, options, &report);

  torch::Tensor images, actions;
  LoadRuns(*run.data, report.validation_runs, &images, &actions);
  report.vpt = ScoreValidationRuns(run, images, actions, options.method, options.start_estimate);
  report.mse_mean = TensorValues(report.vpt.mse.mean(0));
  report.mse_median = TensorValues(std::get<0>(report.vpt.mse.median(0)));
  report.rollouts = DiagnoseRollouts(run.model, images, report.vpt, report.epsilon);
  report.mean_frame_vpt = MeanFrameVpt(*run.data);
  report.still_frame_vpt = StillFrameVpt(*run.data);
  if (report.has_energy) report.masses = TensorValues(run.model->MassScalars());

  const GridData grid = AnalyseGrid(run, images, &report);
  const EnergyTrace energy = EnergyRollout(run, images, grid, options, &report);

  const fs::path out = options.out_dir.empty() ? run.run_dir / "report" : options.out_dir;
  fs::create_directories(out);
  if (options.plots) {
    PlotErrors(report, out);
    report.files = {out / "mse.png", out / "keypoint_error.png", out / "vpt_per_run.png"};
    PlotTraining(run.run_dir, run.config.val_runs, out, &report.files);
    if (report.has_energy && grid.count > 0) {
      PlotPotential(report, run.model->spec().env, grid, run.data_file, out / "potential.png");
      report.files.push_back(out / "potential.png");
    }
    if (!report.dynamics.coordinates.empty()) {
      PlotAcceleration(report.dynamics, out / "acceleration.png");
      report.files.push_back(out / "acceleration.png");
    }
    if (!energy.total.empty()) {
      PlotEnergy(energy, report.solver, options.energy_frames, out / "energy.png");
      report.files.push_back(out / "energy.png");
    }
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  WriteEvaluationJson(report, run, options, energy.error, out);
  WriteEvaluationMarkdown(report, run, options, energy.error, out);
  report.files.push_back(out / "evaluation.json");
  report.files.push_back(out / "evaluation.md");
  return report;
}

namespace {

// checkpoints.{json,md} and, with plots, the VPT and acceleration scale after each epoch.
void WriteCheckpointTable(const EvaluateOptions& options, const std::vector<CheckpointRow>& rows,
                          int64_t validation_runs) {
  const fs::path out = options.out_dir.empty() ? options.run_dir / "report" : options.out_dir;
  fs::create_directories(out);
  json j = json::array();
  std::ostringstream md;
  md << "# Checkpoints of `" << options.run_dir.string() << "`\n\n"
     << "VPT over all " << validation_runs << " validation runs ("
     << IntegratorMethodString(options.method) << "), learned / true acceleration at the grid "
     << "states (1 = right), keypoint error of the rollouts.\n\n"
     << "| epoch | step | VPT mean ± std | median | acceleration scale (R²) | VPT with perfect "
        "dynamics | failures: dynamics / rendering |\n"
     << "| --- | --- | --- | --- | --- | --- | --- |\n";
  std::vector<double> epochs, vpt, vpt_std, scale;
  for (const CheckpointRow& r : rows) {
    json row = {{"checkpoint", r.checkpoint.string()},
                {"epoch", r.epoch},
                {"step", r.step},
                {"vpt", {{"mean", r.vpt.mean}, {"std", r.vpt.std}, {"median", r.vpt.median}}},
                {"rollout_keypoints", RolloutJson(r.rollouts)}};
    row.update(DynamicsJson(r.dynamics));
    j.push_back(row);
    md << "| " << r.epoch << " | " << r.step << " | " << Fixed(r.vpt.mean, 2) << " ± "
       << Fixed(r.vpt.std, 2) << " | " << Fixed(r.vpt.median, 1) << " | "
       << Fixed(r.dynamics.acceleration.scale, 3) << " (" << Fixed(r.dynamics.acceleration.r2, 3)
       << ") | " << Fixed(r.rollouts.reconstruction_vpt.mean, 2) << " | "
       << r.rollouts.failures_dynamics << " / " << r.rollouts.failures_rendering << " |\n";
    epochs.push_back(double(r.epoch));
    vpt.push_back(r.vpt.mean);
    vpt_std.push_back(r.vpt.std);
    scale.push_back(r.dynamics.acceleration.scale);
  }
  if (options.plots) {
    PlotOptions p;
    p.title = "VPT over every validation run after each epoch (mean ± std)";
    p.x_label = "epoch";
    p.y_label = "VPT (frames)";
    p.y_min = 0;
    WriteLinePlot(out / "checkpoints_vpt.png", {{"VPT", epochs, vpt, vpt_std}}, p);
    PlotOptions pa;
    pa.title = "learned / true acceleration at the grid states after each epoch";
    pa.x_label = "epoch";
    pa.y_label = "acceleration scale";
    pa.h_lines = {1.0};
    md << "\n![VPT](checkpoints_vpt.png)\n";
    // No acceleration check (a baseline, a custom system, an imported data set): no plot.
    if (std::all_of(scale.begin(), scale.end(), [](double v) { return std::isfinite(v); })) {
      WriteLinePlot(out / "checkpoints_acceleration.png", {{"scale", epochs, scale, {}}}, pa);
      md << "\n![acceleration](checkpoints_acceleration.png)\n";
    }
  }
  WriteTextAtomically(out / "checkpoints.json", j.dump(2) + "\n");
  WriteTextAtomically(out / "checkpoints.md", md.str());
}

}  // namespace

std::vector<CheckpointRow> EvaluateCheckpoints(const EvaluateOptions& options) {
  CheckEvaluateOptions(options);
  const fs::path dir = options.run_dir / "checkpoints";
  std::vector<fs::path> files;
  if (fs::is_directory(dir)) {
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("epoch-", 0) == 0 && e.path().extension() == ".pt") files.push_back(e.path());
    }
  }
  if (files.empty()) {
    throw IoError("no epoch checkpoints (checkpoints/epoch-NNNN.pt) in '" +
                  options.run_dir.string() + "'");
  }
  std::sort(files.begin(), files.end());
  std::vector<CheckpointRow> rows;
  torch::Tensor images, actions;
  for (const fs::path& file : files) {
    EvaluateOptions o = options;
    o.checkpoint = file;
    TrainedRun run = OpenForEvaluation(o);
    if (!images.defined()) LoadRuns(*run.data, run.data->ValidationRuns(), &images, &actions);
    CheckpointRow row;
    row.checkpoint = file;
    row.epoch = run.position.epoch;
    row.step = run.position.step;
    row.vpt = ScoreValidationRuns(run, images, actions, options.method, options.start_estimate);
    row.rollouts = DiagnoseRollouts(run.model, images, row.vpt, run.data->info().vpt_epsilon);
    EvaluationReport scratch;
    FillRunFacts(run, options, &scratch);
    AnalyseGrid(run, images, &scratch);
    row.dynamics = scratch.dynamics;
    rows.push_back(std::move(row));
    std::printf("  %s: VPT %.2f ± %.2f, acceleration scale %.3f\n", file.filename().c_str(),
                rows.back().vpt.mean, rows.back().vpt.std, rows.back().dynamics.acceleration.scale);
    std::fflush(stdout);
  }

  WriteCheckpointTable(options, rows, images.size(0));
  return rows;
}

std::string FormatEvaluationSummary(const EvaluationReport& r) {
  std::ostringstream s;
  s << r.env << " / " << r.control << ", model " << r.model << ", " << r.train_steps
    << " steps, solver " << r.solver << "\n"
    << "  VPT (frames)           " << Fixed(r.vpt.mean, 2) << " ± " << Fixed(r.vpt.std, 2)
    << ", median " << Fixed(r.vpt.median, 1) << " over " << r.vpt.vpt.size()
    << " validation runs (ε = " << Sci(r.epsilon) << ")\n"
    << "  VPT, mean frame        " << Fixed(r.mean_frame_vpt.mean, 2)
    << " (the data set's mean frame drawn for every frame: a floor)\n"
    << "  VPT, still frame       " << Fixed(r.still_frame_vpt.mean, 2)
    << " (the start frame held for every frame: no motion predicted)\n"
    << "  MSE frame 1 / 10 / last " << (r.mse_mean.size() > 1 ? Sci(r.mse_mean[1]) : "-") << " / "
    << (r.mse_mean.size() > 10 ? Sci(r.mse_mean[10]) : "-") << " / "
    << (r.mse_mean.empty() ? "-" : Sci(r.mse_mean.back()))
    << " (mean over runs; - = no such frame)\n"
    << "  constraint residual    " << ConstraintResidual(r)
    << (r.image_keypoints ? " on " + ResidualStates(r) : std::string()) << "\n"
    << "  masses m_k             " << Masses(r);
  s << "\n  V vs true potential    " << PotentialFit(r) << "\n"
    << "  energy variation       "
    << (std::isfinite(r.energy_relative_variation) ? Sci(r.energy_relative_variation) : "n/a")
    << " of V's range\n"
    << "  acceleration scale     "
    << (std::isfinite(r.dynamics.acceleration.scale)
            ? Fixed(r.dynamics.acceleration.scale, 3) + " (R² " +
                  Fixed(r.dynamics.acceleration.r2, 3) +
                  "; learned / true at the grid states, 1 = right)"
            : NoAccelerationCheck(r))
    << "\n"
    << "  VPT, perfect dynamics  " << Fixed(r.rollouts.reconstruction_vpt.mean, 2)
    << " (renderer and estimator alone); failures: " << r.rollouts.failures_dynamics
    << " dynamics, " << r.rollouts.failures_rendering << " rendering\n";
  return s.str();
}

}  // namespace keycld
