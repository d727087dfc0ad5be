#include "keycld/eval/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
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
#include "keycld/train/trainer.h"
#include "keycld/util/atomic_file.h"
#include "keycld/util/error.h"

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

std::vector<double> ToVector(const torch::Tensor& t) {
  torch::Tensor c = t.detach().to(torch::kCPU, torch::kFloat64).contiguous().flatten();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

struct MetricsHistory {
  std::vector<double> step, loss, rec, dyn, bce;
  std::vector<double> epoch, vpt_mean, vpt_std;
};

// metrics.jsonl of the trainer; a malformed line (an interrupted write) is skipped.
MetricsHistory ReadMetrics(const fs::path& file) {
  MetricsHistory m;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("type")) continue;
    if (j["type"] == "step" && j.contains("loss")) {
      m.step.push_back(j.value("step", 0.0));
      m.loss.push_back(j.value("loss", 0.0));
      m.rec.push_back(j.value("rec", 0.0));
      m.dyn.push_back(j.value("dyn", 0.0));
      m.bce.push_back(j.value("bce", 0.0));
    } else if (j["type"] == "epoch" && j.contains("val_vpt_mean")) {
      m.epoch.push_back(j.value("epoch", 0.0));
      m.vpt_mean.push_back(j.value("val_vpt_mean", 0.0));
      m.vpt_std.push_back(j.value("val_vpt_std", 0.0));
    }
  }
  return m;
}

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

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string Sci(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

}  // namespace

EvaluationReport Evaluate(const EvaluateOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const fs::path run = options.run_dir;
  if (!fs::is_directory(run)) throw IoError("run folder not found: '" + run.string() + "'");
  if (!fs::exists(run / "config.toml")) {
    throw IoError("'" + run.string() + "' is not a training run folder (no config.toml)");
  }
  const TrainConfig cfg = TrainConfig::FromToml(run / "config.toml");
  const fs::path checkpoint =
      options.checkpoint.empty() ? run / "checkpoints" / "last.pt" : options.checkpoint;
  if (!fs::exists(checkpoint)) {
    throw IoError("no checkpoint '" + checkpoint.string() + "' (train the run first)");
  }
  if (options.energy_frames < 3) throw InputError("energy_frames must be ≥ 3");
  if (options.threads < 0) throw InputError("threads must be ≥ 0 (0 = all cores)");
  torch::set_num_threads(options.threads > 0 ? options.threads
                                             : int(std::max(1u, std::thread::hardware_concurrency())));
  const torch::Device device = ResolveDevice(options.device.empty() ? cfg.device : options.device);
  KeycldModel model = LoadModel(checkpoint, device);
  model->eval();
  const ModelSpec& spec = model->spec();

  const fs::path data_file = options.data.empty() ? cfg.DataFile() : options.data;
  if (!fs::exists(data_file)) {
    throw IoError("data set not found: '" + data_file.string() +
                  "' (the run's config names it relative to the folder training ran in; "
                  "give --data FILE)");
  }
  Dataset data = Dataset::Open(data_file);
  const DatasetInfo& info = data.info();
  if (info.env != spec.env || info.size != spec.image_size || info.nu != spec.action_dim ||
      std::abs(info.dt - spec.dt) > 1e-12) {
    throw InputError("data set '" + data_file.string() + "' (" + EnvNameString(info.env) + ", " +
                     std::to_string(info.size) + "px, dt " + Sci(info.dt) +
                     " s) does not fit the model (" + EnvNameString(spec.env) + ", " +
                     std::to_string(spec.image_size) + "px, dt " + Sci(spec.dt) + " s)");
  }
  const std::vector<int64_t> val_runs = data.ValidationRuns();
  if (val_runs.empty()) throw InputError("data set '" + data_file.string() + "' has no validation runs");

  EvaluationReport report;
  report.env = EnvNameString(spec.env);
  report.control = ControlModeString(info.control);
  report.model = ModelKindName(spec.model);
  report.has_energy = model->HasEnergy();
  report.solver = IntegratorMethodString(options.method);
  report.run_dir = run;
  report.checkpoint = checkpoint;
  report.data = data_file;
  report.epsilon = info.vpt_epsilon;
  report.validation_runs = val_runs;
  {
    TrainPosition pos;
    LoadCheckpoint(checkpoint, model, nullptr, &pos);
    report.train_steps = pos.step;
  }

  // VPT over every validation run (§8).
  torch::Tensor images, actions;
  LoadRuns(data, val_runs, &images, &actions);
  VptOptions vo;
  vo.epsilon = info.vpt_epsilon;
  vo.rtol = cfg.rtol;
  vo.atol = cfg.atol;
  vo.method = options.method;
  report.vpt = ValidPredictionTime(model, images, actions, vo);
  report.mse_mean = ToVector(report.vpt.mse.mean(0));
  report.mse_median = ToVector(std::get<0>(report.vpt.mse.median(0)));
  if (report.has_energy) report.masses = ToVector(model->mass->m());

  torch::NoGradGuard no_grad;
  // The state grid: constraint residuals of the estimates, learned vs true potential.
  int grid_count = 0;
  const std::vector<double> grid_qpos = data.ReadGridQpos(&grid_count);
  std::vector<uint8_t> grid_bytes = data.ReadGridImages();
  torch::Tensor grid_images =
      torch::from_blob(grid_bytes.data(), {grid_count, info.size, info.size, 3}, torch::kUInt8);
  torch::Tensor grid_x =
      model->Encode(ImagesToFloat(grid_images, device)).keypoints.reshape({grid_count, -1});
  {
    torch::Tensor phi =
        HolonomicConstraints::ForEnvironment(spec.env).Phi(grid_x.to(torch::kCPU, torch::kFloat64));
    report.constraint_rms = phi.square().mean().sqrt().item<double>();
    report.constraint_max = phi.abs().max().item<double>();
  }
  std::vector<double> v_learned =
      report.has_energy ? ToVector(model->Potential(grid_x)) : std::vector<double>();
  std::vector<double> v_true(static_cast<size_t>(grid_count));
  {
    Environment env(spec.env);
    const std::vector<double> zero_qvel(size_t(env.nv()), 0.0);
    for (int g = 0; g < grid_count; ++g) {
      env.Reset(std::span<const double>(grid_qpos.data() + size_t(g) * env.nq(), size_t(env.nq())),
                zero_qvel);
      v_true[size_t(g)] = env.TotalEnergy();  // zero velocity: the potential energy
    }
  }
  if (report.has_energy) {
    std::tie(report.potential_r2, report.potential_scale) = AffineFit(v_true, v_learned);
  } else {
    report.potential_r2 = report.potential_scale = std::nan("");
  }

  // Total learned energy along an unactuated rollout from validation run 0.
  std::vector<double> e_time, e_kinetic, e_potential, e_total;
  std::string energy_error = report.has_energy ? "" : "the model has no energy (node2)";
  if (report.has_energy) {
    torch::Tensor first = ImagesToFloat(images[0].slice(0, 0, 3), device);
    torch::Tensor x = model->Encode(first).keypoints.reshape({1, 3, -1});
    DoublePrecisionDynamics fp64(model);
    const PhaseState start = InitialStateFromEstimates(model, x);
    std::vector<double> times;
    for (int t = 0; t < options.energy_frames; ++t) times.push_back(t * spec.dt);
    IntegratorOptions io;
    io.rtol = cfg.rtol;
    io.atol = cfg.atol;
    io.max_steps = 1000000;
    try {
      Trajectory traj =
          model->Rollout(start.x, start.xdot, torch::zeros({1, spec.action_dim}, start.x.options()),
                         times, options.method, io);
      torch::Tensor xs = traj.x[0], vs = traj.xdot[0];
      torch::Tensor kinetic = 0.5 * (vs.square() * model->MassDiagonal()).sum(1);
      torch::Tensor potential = model->Potential(xs).reshape({-1});
      e_kinetic = ToVector(kinetic);
      e_potential = ToVector(potential);
      for (size_t i = 0; i < e_kinetic.size(); ++i) {
        e_total.push_back(e_kinetic[i] + e_potential[i]);
        e_time.push_back(times[i]);
      }
      const auto [emin, emax] = std::minmax_element(e_total.begin(), e_total.end());
      const auto [vmin, vmax] = std::minmax_element(v_learned.begin(), v_learned.end());
      report.energy_relative_variation =
          *vmax > *vmin ? (*emax - *emin) / (*vmax - *vmin) : std::nan("");
    } catch (const NumericalError& e) {
      energy_error = e.what();
      report.energy_relative_variation = std::nan("");
    }
  }

  const fs::path out = options.out_dir.empty() ? run / "report" : options.out_dir;
  fs::create_directories(out);
  auto add = [&](const fs::path& p) { report.files.push_back(p); };

  if (options.plots) {
    const int N = int(report.mse_mean.size());
    std::vector<double> frames(static_cast<size_t>(N));
    for (int t = 0; t < N; ++t) frames[size_t(t)] = t;
    PlotOptions po;
    po.title = report.env + " / " + report.control + ": prediction error (" +
               std::to_string(val_runs.size()) + " validation runs)";
    po.x_label = "frame";
    po.y_label = "per-pixel MSE";
    po.log_y = true;
    po.h_lines = {report.epsilon};
    std::vector<double> mean = report.mse_mean, median = report.mse_median;
    for (auto* v : {&mean, &median})
      for (double& m : *v) m = std::max(m, 1e-12);
    WriteLinePlot(out / "mse.png",
                  {{"mean", frames, mean, {}}, {"median", frames, median, {}}}, po);
    add(out / "mse.png");

    std::vector<std::string> categories;
    std::vector<double> vpts;
    for (size_t i = 0; i < val_runs.size(); ++i) {
      categories.push_back(std::to_string(val_runs[i]));
      vpts.push_back(report.vpt.vpt[i]);
    }
    PlotOptions pb;
    pb.title = "VPT per validation run: mean " + Fixed(report.vpt.mean, 1) + ", median " +
               Fixed(report.vpt.median, 1);
    pb.x_label = "validation run (data-set index)";
    pb.y_label = "VPT (frames)";
    pb.y_min = 0;
    pb.y_max = double(N);
    WriteBarChart(out / "vpt_per_run.png", categories, {{"VPT", {}, vpts, {}}}, pb);
    add(out / "vpt_per_run.png");

    MetricsHistory m = ReadMetrics(run / "metrics.jsonl");
    if (!m.step.empty()) {
      const int window = std::max<int>(1, int(m.step.size() / 100));
      PlotOptions pl;
      pl.title = "training losses (moving average over " + std::to_string(window) + " steps)";
      pl.x_label = "step";
      pl.y_label = "loss";
      pl.log_y = true;
      std::vector<PlotSeries> series;
      for (auto [label, values] : {std::pair{"total", &m.loss}, std::pair{"reconstruction", &m.rec},
                                   std::pair{"dynamics", &m.dyn}, std::pair{"heatmap BCE", &m.bce}}) {
        std::vector<double> smooth = MovingAverage(*values, window);
        for (double& v : smooth) v = std::max(v, 1e-12);
        series.push_back({label, m.step, smooth, {}});
      }
      WriteLinePlot(out / "training_loss.png", series, pl);
      add(out / "training_loss.png");
    }
    if (!m.epoch.empty()) {
      PlotOptions pv;
      pv.title = "validation VPT after each epoch (first " + std::to_string(cfg.val_runs) +
                 " validation runs, mean ± std)";
      pv.x_label = "epoch";
      pv.y_label = "VPT (frames)";
      pv.y_min = 0;
      WriteLinePlot(out / "training_vpt.png", {{"VPT", m.epoch, m.vpt_mean, m.vpt_std}}, pv);
      add(out / "training_vpt.png");
    }

    // Learned potential over the state grid.
    PlotOptions pp;
    if (report.has_energy) {
    pp.title = "learned potential energy over the state grid (R² vs the simulator's " +
               Fixed(report.potential_r2, 3) + ")";
    if (spec.env == EnvName::kPendulum) {
      std::vector<size_t> order(static_cast<size_t>(grid_count));
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::sort(order.begin(), order.end(),
                [&](size_t a, size_t b) { return grid_qpos[a] < grid_qpos[b]; });
      double mx = 0, my = 0;
      for (size_t i = 0; i < order.size(); ++i) mx += v_true[i], my += v_learned[i];
      mx /= double(grid_count);
      my /= double(grid_count);
      std::vector<double> angle, learned, fitted;
      for (size_t i : order) {
        angle.push_back(grid_qpos[i]);
        learned.push_back(v_learned[i]);
        fitted.push_back(my + report.potential_scale * (v_true[i] - mx));
      }
      pp.x_label = "pole angle (rad, 0 = up)";
      pp.y_label = "V (learned units)";
      WriteLinePlot(out / "potential.png",
                    {{"learned V(x̂)", angle, learned, {}},
                     {"true m·g·z, affine fit", angle, fitted, {}}},
                    pp);
    } else {
      std::map<double, int> xs, ys;
      for (int g = 0; g < grid_count; ++g) {
        xs[grid_qpos[size_t(g) * 2]] = 0;
        ys[grid_qpos[size_t(g) * 2 + 1]] = 0;
      }
      int i = 0;
      for (auto& [k, v] : xs) v = i++;
      i = 0;
      for (auto& [k, v] : ys) v = i++;
      const int nx = int(xs.size()), ny = int(ys.size());
      std::vector<double> values(static_cast<size_t>(nx * ny), std::nan(""));
      for (int g = 0; g < grid_count; ++g) {
        values[size_t(ys[grid_qpos[size_t(g) * 2 + 1]] * nx + xs[grid_qpos[size_t(g) * 2]])] =
            v_learned[size_t(g)];
      }
      if (std::any_of(values.begin(), values.end(), [](double v) { return std::isnan(v); })) {
        throw FormatError("the state grid of '" + data_file.string() + "' is not a full grid");
      }
      const double dx = nx > 1 ? (xs.rbegin()->first - xs.begin()->first) / (nx - 1) : 1;
      const double dy = ny > 1 ? (ys.rbegin()->first - ys.begin()->first) / (ny - 1) : 1;
      pp.x_label = spec.env == EnvName::kCartpole ? "cart position (m)" : "shoulder angle (rad)";
      pp.y_label = spec.env == EnvName::kCartpole ? "pole angle (rad, 0 = up)" : "elbow angle (rad)";
      WriteHeatMap(out / "potential.png", values, nx, ny, xs.begin()->first - dx / 2,
                   xs.rbegin()->first + dx / 2, ys.begin()->first - dy / 2,
                   ys.rbegin()->first + dy / 2, "learned V", pp);
    }
    add(out / "potential.png");
    }

    if (!e_total.empty()) {
      PlotOptions pe;
      pe.title = "learned energy along an unactuated " + report.solver + " rollout of " +
                 std::to_string(options.energy_frames) + " frames";
      pe.x_label = "time (s)";
      pe.y_label = "energy (learned units)";
      WriteLinePlot(out / "energy.png",
                    {{"total", e_time, e_total, {}},
                     {"kinetic", e_time, e_kinetic, {}},
                     {"potential", e_time, e_potential, {}}},
                    pe);
      add(out / "energy.png");
    }
  }

  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // evaluation.json
  json j;
  j["run_dir"] = run.string();
  j["checkpoint"] = checkpoint.string();
  j["train_steps"] = report.train_steps;
  j["data"] = data_file.string();
  j["env"] = report.env;
  j["control"] = report.control;
  j["model"] = report.model;
  j["solver"] = report.solver;
  j["rtol"] = cfg.rtol;
  j["atol"] = cfg.atol;
  j["epsilon"] = report.epsilon;
  j["validation_runs"] = report.validation_runs;
  j["vpt"] = {{"mean", report.vpt.mean},
              {"std", report.vpt.std},
              {"median", report.vpt.median},
              {"per_run", report.vpt.vpt}};
  j["mse_per_frame"] = {{"mean", report.mse_mean}, {"median", report.mse_median}};
  j["masses"] = report.masses;
  j["constraint_residual_grid"] = {{"rms", report.constraint_rms},
                                   {"max", report.constraint_max}};
  if (report.has_energy) {
    j["potential_vs_true"] = {{"r2", report.potential_r2}, {"scale", report.potential_scale}};
  }
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

  // evaluation.md
  std::ostringstream md;
  md << "# Evaluation of `" << run.string() << "`\n\n"
     << "| | |\n| --- | --- |\n"
     << "| system | " << report.env << ", control " << report.control << " |\n"
     << "| model | " << report.model << ", " << report.train_steps << " training steps |\n"
     << "| data set | `" << data_file.string() << "` |\n"
     << "| validation runs | " << val_runs.size() << " |\n"
     << "| solver | " << report.solver
     << (options.method == IntegratorMethod::kDopri5
             ? " (rtol " + Sci(cfg.rtol) + ", atol " + Sci(cfg.atol) + ")"
             : std::string(" (one step per frame)"))
     << " |\n"
     << "| VPT threshold ε | " << Sci(report.epsilon) << " |\n"
     << "| **VPT (frames)** | **" << Fixed(report.vpt.mean, 2) << " ± " << Fixed(report.vpt.std, 2)
     << "**, median " << Fixed(report.vpt.median, 1) << " |\n"
     << "| learned masses m_k | ";
  for (size_t k = 0; k < report.masses.size(); ++k) md << (k ? ", " : "") << Sci(report.masses[k]);
  md << " |\n"
     << "| constraint residual of the estimates on the state grid | RMS " << Sci(report.constraint_rms)
     << ", max " << Sci(report.constraint_max) << " (normalized image units) |\n"
     << "| learned V vs the simulator's potential (R² of an affine fit) | "
     << Fixed(report.potential_r2, 3) << " |\n"
     << "| learned energy variation along a " << options.energy_frames
     << "-frame unactuated rollout (relative to V's range over the grid) | "
     << (std::isfinite(report.energy_relative_variation) ? Sci(report.energy_relative_variation)
                                                          : "n/a " + energy_error)
     << " |\n"
     << "| wall time | " << Fixed(report.seconds, 1) << " s |\n\n";
  for (const fs::path& f : report.files) {
    md << "![" << f.stem().string() << "](" << f.filename().string() << ")\n\n";
  }
  WriteTextAtomically(out / "evaluation.md", md.str());
  report.files.push_back(out / "evaluation.json");
  report.files.push_back(out / "evaluation.md");
  return report;
}

std::string FormatEvaluationSummary(const EvaluationReport& r) {
  std::ostringstream s;
  s << r.env << " / " << r.control << ", model " << r.model << ", " << r.train_steps
    << " steps, solver " << r.solver << "\n"
    << "  VPT (frames)           " << Fixed(r.vpt.mean, 2) << " ± " << Fixed(r.vpt.std, 2)
    << ", median " << Fixed(r.vpt.median, 1) << " over " << r.vpt.vpt.size()
    << " validation runs (ε = " << Sci(r.epsilon) << ")\n"
    << "  MSE frame 1 / 10 / last " << (r.mse_mean.size() > 1 ? Sci(r.mse_mean[1]) : "-")
    << " / " << (r.mse_mean.size() > 10 ? Sci(r.mse_mean[10]) : "-") << " / "
    << (r.mse_mean.empty() ? "-" : Sci(r.mse_mean.back())) << " (mean over runs; - = no such frame)\n"
    << "  constraint residual    RMS " << Sci(r.constraint_rms) << ", max "
    << Sci(r.constraint_max) << " on the state grid\n"
    << "  masses m_k             ";
  for (size_t k = 0; k < r.masses.size(); ++k) s << (k ? ", " : "") << Sci(r.masses[k]);
  s << "\n  V vs true potential    R² " << Fixed(r.potential_r2, 3) << "\n"
    << "  energy variation       "
    << (std::isfinite(r.energy_relative_variation) ? Sci(r.energy_relative_variation) : "n/a")
    << " of V's range\n";
  return s.str();
}

}  // namespace keycld
