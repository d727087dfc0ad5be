#include "keycld/eval/benchmark.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <tuple>

#include "keycld/eval/diagnostics.h"
#include "keycld/eval/evaluate.h"
#include "keycld/eval/plot.h"
#include "keycld/train/checkpoint.h"
#include "keycld/train/metrics.h"
#include "keycld/train/trained_run.h"
#include "keycld/train/trainer.h"
#include "keycld/train/vpt.h"
#include "keycld/util/atomic_file.h"
#include "keycld/util/error.h"
#include "keycld/util/progress.h"
#include "keycld/util/stats.h"
#include "keycld/util/text.h"

namespace keycld {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kCellFormat = "keycld-benchmark-cell";
constexpr int kCellVersion = 1;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

void Stats(const std::vector<int>& v, double* mean, double* std, double* median) {
  const Summary s = Summarize(v);
  *mean = s.mean;
  *std = s.std;
  *median = s.median;
}

std::string CellName(EnvName env, ControlMode control, std::string model, int seed) {
  return EnvNameString(env) + "-" + ControlModeString(control) + "-" + model + "-seed" +
         std::to_string(seed);
}

std::string SettingName(EnvName env, ControlMode control) {
  return EnvNameString(env) + "-" + ControlModeString(control);
}

// Validation images uint8 [R, N, H, W, 3] and actions float [R, A] of runs [begin, end).
void LoadValidation(const Dataset& data, const std::vector<int64_t>& runs, size_t begin, size_t end,
                    torch::Tensor* images, torch::Tensor* actions) {
  const DatasetInfo& info = data.info();
  const int64_t R = int64_t(end - begin), N = info.frames, S = info.size;
  *images = torch::empty({R, N, S, S, 3}, torch::kUInt8);
  *actions = torch::empty({R, info.nu}, torch::kFloat32);
  for (size_t i = begin; i < end; ++i) {
    auto img = data.ReadImages(int(runs[i]));
    std::memcpy((*images)[int64_t(i - begin)].data_ptr(), img.data(), img.size());
    auto u = data.ReadAction(int(runs[i]));
    for (int a = 0; a < info.nu; ++a) (*actions)[int64_t(i - begin)][a] = float(u[a]);
  }
}

// VPT of one run from a fixed-step RK4 rollout, frames invalid from the first non-finite
// keypoint on; 0 if the rollout throws.
int FallbackVpt(Model& model, const torch::Tensor& images, const torch::Tensor& actions,
                double epsilon) {
  try {
    IntegratorOptions io;
    io.substeps = 10;
    io.check_finite = false;
    const int64_t N = images.size(1);
    KeypointPrediction p = PredictKeypoints(model, images.slice(1, 0, PredictionInputFrames(model)),
                                            actions, N, IntegratorMethod::kRk4, io);
    torch::Tensor finite = torch::isfinite(p.keypoints).flatten(2).all(2).to(torch::kCPU);
    torch::Tensor kp =
        torch::where(torch::isfinite(p.keypoints), p.keypoints, torch::zeros_like(p.keypoints));
    torch::Tensor mse = PredictionMse(model, kp, images);
    mse = torch::where(finite, mse, torch::full_like(mse, std::nan("")));
    return VptFromMse(mse, epsilon).vpt.at(0);
  } catch (const NumericalError&) {
    return 0;
  }
}

json CellToJson(const BenchmarkCell& c, const TrainConfig& cfg, const DatasetInfo& info,
                const fs::path& data_file) {
  json j = {{"format", kCellFormat},
            {"version", kCellVersion},
            {"env", EnvNameString(c.env)},
            {"control", ControlModeString(c.control)},
            {"model", c.model},
            {"seed", c.seed},
            {"epochs", c.epochs},
            {"steps", c.steps},
            {"failed", c.failed},
            {"error", c.error},
            {"data", data_file.string()},
            {"vpt_epsilon", info.vpt_epsilon},
            {"rtol", cfg.rtol},
            {"atol", cfg.atol},
            {"vpt", c.vpt},
            {"vpt_mean", c.vpt_mean},
            {"vpt_std", c.vpt_std},
            {"vpt_median", c.vpt_median},
            {"validation_runs", c.vpt.size()},
            {"fallback_runs", c.fallback_runs},
            {"train_seconds", c.train_seconds},
            {"eval_seconds", c.eval_seconds}};
  if (std::isfinite(c.acceleration_scale)) j["acceleration_scale"] = c.acceleration_scale;
  if (!c.keypoints_vs_state.empty()) {
    json states = json::array();
    for (const BenchmarkCell::CoordinateError& e : c.keypoints_vs_state) {
      states.push_back(
          {{"coordinate", e.coordinate}, {"unit", e.unit}, {"error_rms", e.error_rms}});
    }
    j["keypoints_vs_state"] = states;
  }
  return j;
}

// The cell's cached result, if result.json exists and was computed for this configuration.
// The settings of a saved run that must equal the wanted ones (everything but the schedule
// and where it runs).
std::string Comparable(TrainConfig c) {
  c.epochs = 0;
  c.max_steps = 0;
  c.threads = 0;
  c.device = "cpu";
  c.kernels = "auto";  // a choice of speed, like threads
  return c.ToToml();
}

// False when the cell folder holds a run trained with other settings than `cfg` (say another
// --integrator): its result is not this cell's.
bool SameConfiguration(const fs::path& dir, const TrainConfig& cfg) {
  const fs::path saved = dir / "config.toml";
  return !fs::exists(saved) || Comparable(TrainConfig::FromToml(saved)) == Comparable(cfg);
}

bool ReadCachedCell(const fs::path& file, const TrainConfig& cfg, const fs::path& data_file,
                    BenchmarkCell* cell) {
  if (!fs::exists(file) || !SameConfiguration(file.parent_path(), cfg)) return false;
  std::ifstream in(file);
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || j.value("format", "") != kCellFormat ||
      j.value("version", 0) != kCellVersion) {
    return false;  // unreadable or foreign: recompute (it is rewritten atomically)
  }
  try {
    if (j.at("env") != EnvNameString(cell->env) ||
        j.at("control") != ControlModeString(cell->control) || j.at("model") != cell->model ||
        j.at("seed") != cell->seed || j.at("epochs") != cfg.epochs || j.at("rtol") != cfg.rtol ||
        j.at("atol") != cfg.atol || j.at("data") != data_file.string()) {
      return false;
    }
    cell->epochs = j.at("epochs");
    cell->steps = j.at("steps");
    cell->failed = j.at("failed");
    cell->error = j.at("error");
    cell->vpt = j.at("vpt").get<std::vector<int>>();
    cell->vpt_mean = j.at("vpt_mean");
    cell->vpt_std = j.at("vpt_std");
    cell->vpt_median = j.at("vpt_median");
    cell->fallback_runs = j.at("fallback_runs");
    cell->train_seconds = j.at("train_seconds");
    cell->eval_seconds = j.at("eval_seconds");
    // The state-grid checks are newer than the format: a result.json without them stays valid.
    if (j.contains("acceleration_scale")) cell->acceleration_scale = j.at("acceleration_scale");
    if (j.contains("keypoints_vs_state")) {
      for (const json& e : j.at("keypoints_vs_state")) {
        cell->keypoints_vs_state.push_back({e.at("coordinate"), e.at("unit"), e.at("error_rms")});
      }
    }
  } catch (const json::exception&) {
    return false;
  }
  cell->cached = true;
  return true;
}

}  // namespace

void WriteResultsChart(const fs::path& png, const std::vector<BenchmarkRow>& rows,
                       const std::string& title) {
  std::vector<std::pair<EnvName, ControlMode>> settings;
  std::vector<std::string> models;
  for (const BenchmarkRow& r : rows) {
    auto key = std::make_pair(r.env, r.control);
    if (std::find(settings.begin(), settings.end(), key) == settings.end()) {
      settings.push_back(key);
    }
    if (std::find(models.begin(), models.end(), r.model) == models.end()) {
      models.push_back(r.model);
    }
  }
  if (rows.empty()) throw InputError("WriteResultsChart: no rows");
  std::vector<std::string> categories;
  for (auto [env, control] : settings) {
    categories.push_back(EnvNameString(env) + " " + ControlModeString(control));
  }
  std::vector<PlotSeries> series;
  double top = 1;
  for (const std::string& m : models) {
    PlotSeries s;
    s.label = m;
    for (size_t c = 0; c < settings.size(); ++c) {
      double mean = 0, std = 0;
      for (const BenchmarkRow& r : rows) {
        if (r.model == m && r.env == settings[c].first && r.control == settings[c].second) {
          mean = r.vpt_mean;
          std = r.vpt_std;
        }
      }
      s.x.push_back(double(c));
      s.y.push_back(mean);
      s.y_err.push_back(std);
      top = std::max(top, mean + std);
    }
    series.push_back(std::move(s));
  }
  PlotOptions o;
  o.title = title;
  o.x_label = "setting";
  o.y_label = "VPT (frames), mean ± std";
  o.y_min = 0.0;
  o.y_max = 1.1 * top;
  WriteBarChart(png, categories, series, o);
}

fs::path ResolvePresetFolder(const std::string& preset) {
  if (preset.empty()) throw InputError("--preset must not be empty");
  if (fs::is_directory(preset)) return preset;
  const fs::path named = fs::path("configs") / preset;
  if (fs::is_directory(named)) return named;
  throw InputError("preset '" + preset + "' is neither a folder nor one of configs/ (" +
                   "paper, cpu-quick; run from the repository root)");
}

ValidationScore ValidationVpt(Model& model, const Dataset& data, double rtol, double atol,
                              int batch) {
  const DatasetInfo& info = data.info();
  const std::vector<int64_t> runs = data.ValidationRuns();
  if (runs.empty()) throw InputError("'" + data.path().string() + "' has no validation runs");
  if (batch < 1) throw InputError("evaluation batch must be ≥ 1");
  VptOptions vo;
  vo.epsilon = info.vpt_epsilon;
  vo.rtol = rtol;
  vo.atol = atol;
  ValidationScore score;
  for (size_t b = 0; b < runs.size(); b += size_t(batch)) {
    const size_t e = std::min(runs.size(), b + size_t(batch));
    torch::Tensor images, actions;
    LoadValidation(data, runs, b, e, &images, &actions);
    try {
      VptResult r = ValidPredictionTime(model, images, actions, vo);
      score.vpt.insert(score.vpt.end(), r.vpt.begin(), r.vpt.end());
      continue;
    } catch (const NumericalError&) {
      if (e - b == 1) {
        ++score.fallback_runs;
        score.vpt.push_back(FallbackVpt(model, images, actions, vo.epsilon));
        continue;
      }
    }
    // One run at a time, so that one diverging run does not take the batch with it.
    for (int64_t i = 0; i < int64_t(e - b); ++i) {
      torch::Tensor im = images.slice(0, i, i + 1), ac = actions.slice(0, i, i + 1);
      try {
        score.vpt.push_back(ValidPredictionTime(model, im, ac, vo).vpt.at(0));
      } catch (const NumericalError&) {
        ++score.fallback_runs;
        score.vpt.push_back(FallbackVpt(model, im, ac, vo.epsilon));
      }
    }
  }
  Stats(score.vpt, &score.mean, &score.std, &score.median);
  return score;
}

std::vector<BenchmarkRow> SummarizeCells(const std::vector<BenchmarkCell>& cells) {
  std::vector<BenchmarkRow> rows;
  std::vector<std::vector<int>> pooled;
  std::vector<double> seconds;
  for (const BenchmarkCell& c : cells) {
    size_t i = 0;
    while (i < rows.size() &&
           !(rows[i].env == c.env && rows[i].control == c.control && rows[i].model == c.model)) {
      ++i;
    }
    if (i == rows.size()) {
      BenchmarkRow r;
      r.env = c.env;
      r.control = c.control;
      r.model = c.model;
      rows.push_back(r);
      pooled.emplace_back();
      seconds.push_back(0);
    }
    if (c.failed) {
      ++rows[i].failed_seeds;
      continue;
    }
    ++rows[i].seeds;
    rows[i].fallback_runs += c.fallback_runs;
    pooled[i].insert(pooled[i].end(), c.vpt.begin(), c.vpt.end());
    seconds[i] += c.train_seconds;
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].runs = int(pooled[i].size());
    Stats(pooled[i], &rows[i].vpt_mean, &rows[i].vpt_std, &rows[i].vpt_median);
    rows[i].train_seconds = rows[i].seeds > 0 ? seconds[i] / rows[i].seeds : 0;
  }
  return rows;
}

std::string ResultsCsv(const std::vector<BenchmarkRow>& rows) {
  std::ostringstream s;
  s << "env,control,model,seeds,runs,vpt_mean,vpt_std,vpt_median,train_seconds,failed_seeds,"
       "fallback_runs\n";
  for (const BenchmarkRow& r : rows) {
    s << EnvNameString(r.env) << "," << ControlModeString(r.control) << "," << r.model << ","
      << r.seeds << "," << r.runs << "," << Fixed(r.vpt_mean, 4) << "," << Fixed(r.vpt_std, 4)
      << "," << Fixed(r.vpt_median, 1) << "," << Fixed(r.train_seconds, 1) << "," << r.failed_seeds
      << "," << r.fallback_runs << "\n";
  }
  return s.str();
}

std::string ResultsMarkdown(const BenchmarkOptions& options, const BenchmarkResult& result) {
  std::ostringstream s;
  const bool baselines =
      std::any_of(result.rows.begin(), result.rows.end(),
                  [](const BenchmarkRow& r) { return !FindModelVariant(r.model).image_keypoints; });
  s << "# Valid prediction time: KeyCLD, its ablations" << (baselines ? " and baselines" : "")
    << "\n\n";
  if (!options.command.empty()) s << "`" << options.command << "`\n\n";
  s << "VPT in frames (docs/method.md §8): for each validation run, the number of frames predicted "
       "from its first three before the rendered prediction's per-pixel MSE exceeds the data "
       "set's ε; mean ± standard deviation over the validation runs of all seeds. The best mean "
       "of each setting is in bold. The last two columns are floors (docs/evaluation.md): the VPT "
       "of drawing the data set's mean frame for every frame, and of holding each run's start "
       "frame (a model that predicts no motion); a model near either has learned little the VPT "
       "can see.\n\n";
  // The wide table: one row per setting, one column per model.
  std::vector<std::string> models;
  std::vector<std::pair<EnvName, ControlMode>> settings;
  for (const BenchmarkRow& r : result.rows) {
    if (std::find(models.begin(), models.end(), r.model) == models.end()) {
      models.push_back(r.model);
    }
    auto key = std::make_pair(r.env, r.control);
    if (std::find(settings.begin(), settings.end(), key) == settings.end()) {
      settings.push_back(key);
    }
  }
  s << "| setting |";
  for (const std::string& m : models) s << " " << m << " |";
  s << " mean frame (floor) | still frame (floor) |\n| --- |";
  for (size_t i = 0; i < models.size(); ++i) s << " --- |";
  s << " --- | --- |\n";
  for (auto [env, control] : settings) {
    double best = -1;
    for (const BenchmarkRow& r : result.rows) {
      if (r.env == env && r.control == control && r.runs > 0) best = std::max(best, r.vpt_mean);
    }
    s << "| " << EnvNameString(env) << " " << ControlModeString(control) << " |";
    for (const std::string& m : models) {
      std::string cell = "–";
      for (const BenchmarkRow& r : result.rows) {
        if (r.env != env || r.control != control || r.model != m) continue;
        if (r.runs == 0) {
          cell = "failed";
        } else {
          cell = Fixed(r.vpt_mean, 1) + " ± " + Fixed(r.vpt_std, 1);
          if (r.vpt_mean == best) cell = "**" + cell + "**";
        }
      }
      s << " " << cell << " |";
    }
    std::string floor = "–", still = "–";
    for (const SettingFloor& f : result.floors) {
      if (f.env != env || f.control != control) continue;
      floor = Fixed(f.vpt_mean, 1);
      still = Fixed(f.still_vpt_mean, 1);
    }
    s << " " << floor << " | " << still << " |\n";
  }
  s << "\n## Details\n\n"
       "| env | control | model | seeds | runs | VPT mean | std | median | training s per "
       "seed |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const BenchmarkRow& r : result.rows) {
    s << "| " << EnvNameString(r.env) << " | " << ControlModeString(r.control) << " | " << r.model
      << " | " << r.seeds;
    if (r.failed_seeds > 0) s << " (+" << r.failed_seeds << " failed)";
    s << " | " << r.runs << " | " << Fixed(r.vpt_mean, 2) << " | " << Fixed(r.vpt_std, 2) << " | "
      << Fixed(r.vpt_median, 1) << " | " << Fixed(r.train_seconds, 0) << " |\n";
  }
  const bool checked = std::any_of(result.cells.begin(), result.cells.end(), [](const auto& c) {
    return std::isfinite(c.acceleration_scale) || !c.keypoints_vs_state.empty();
  });
  if (checked) {
    s << "\n## Dynamics and keypoints per cell\n\n"
         "On the data set's state grid, as `keycld evaluate` reports them (docs/evaluation.md, "
         "\"Diagnostics\"): the learned acceleration against the simulator's (1 = right) and "
         "the RMS error of each joint coordinate read off the estimated keypoints. A VPT is "
         "only as good as these: on the cartpole a model that draws the cart and no pole can "
         "score near a good one (docs/evaluation.md, \"The VPT cannot see the cartpole's "
         "pole\"). – = not measured.\n\n"
         "| setting | model | seed | VPT mean | learned / true acceleration | keypoints vs state "
         "(RMS error) |\n| --- | --- | --- | --- | --- | --- |\n";
    for (const BenchmarkCell& c : result.cells) {
      if (c.failed) continue;
      std::string states;
      for (const BenchmarkCell::CoordinateError& e : c.keypoints_vs_state) {
        if (!states.empty()) states += ", ";
        states += e.coordinate + " " +
                  (e.unit == "deg" ? Fixed(e.error_rms, 2) + "°" : Fixed(e.error_rms, 3) + " m");
      }
      s << "| " << EnvNameString(c.env) << " " << ControlModeString(c.control) << " | "
        << c.model << " | " << c.seed << " | " << Fixed(c.vpt_mean, 2) << " | "
        << (std::isfinite(c.acceleration_scale) ? Fixed(c.acceleration_scale, 3) : "–") << " | "
        << (states.empty() ? "–" : states) << " |\n";
    }
  }
  double train = 0, eval = 0;
  int cached = 0;
  for (const BenchmarkCell& c : result.cells) {
    train += c.train_seconds;
    eval += c.eval_seconds;
    cached += c.cached;
  }
  s << "\nTraining seconds are the summed step times of a cell's run (without the per-epoch "
       "validation). All cells: training "
    << FormatDuration(train) << ", evaluation " << FormatDuration(eval) << "; this invocation took "
    << FormatDuration(result.seconds) << " of wall time (" << cached << " of "
    << result.cells.size() + size_t(result.missing_cells) << " cells were already finished).\n";
  if (!result.notes.empty()) {
    s << "\nNotes:\n";
    for (const std::string& n : result.notes) s << "- " << n << "\n";
  }
  return s.str();
}

namespace {

// One (environment, control) setting of the benchmark and its preset's config.
struct Setting {
  EnvName env;
  ControlMode control;
  TrainConfig config;
  /// A model's own preset `<env>-<control>-<model>.toml` in the preset folder (the baselines'
  /// training settings, docs/baselines.md), used instead of `config` for that model.
  std::map<std::string, TrainConfig> model_configs;
};

// Whether `model` has a cell in `setting`: a system it is built for and, for a model without an
// action input (HGN), unactuated data.
bool Fits(const std::string& model, const Setting& setting) {
  return ModelSupportsSystem(model, setting.env) && ModelSupportsControl(model, setting.control);
}

// The preset's configs of the selected settings, with the options' overrides; a combination
// that does not exist (a control mode an environment lacks) becomes a note. Read first, so that
// a bad preset is reported before hours of training.
std::vector<Setting> ReadSettings(const BenchmarkOptions& options, const fs::path& presets,
                                  BenchmarkResult* result) {
  std::vector<Setting> settings;
  for (EnvName env : options.envs) {
    for (ControlMode control : options.controls) {
      try {
        CheckControlMode(env, control);
      } catch (const InputError& e) {
        result->notes.push_back("skipped " + SettingName(env, control) + ": " + e.what());
        continue;
      }
      const fs::path file = presets / (SettingName(env, control) + ".toml");
      if (!fs::exists(file)) {
        throw InputError("preset folder '" + presets.string() + "' has no " +
                         file.filename().string());
      }
      auto read = [&](const fs::path& f) {
        TrainConfig c = TrainConfig::FromToml(f);
        if (!c.env.empty() && c.env != EnvNameString(env)) {
          throw InputError("'" + f.string() + "' is for " + c.env + ", not " + EnvNameString(env));
        }
        c.env = EnvNameString(env);
        if (c.data.empty() && c.control != ControlModeString(control)) {
          throw InputError("'" + f.string() + "' says [data] control = \"" + c.control +
                           "\", not " + ControlModeString(control));
        }
        c.control = ControlModeString(control);
        if (options.epochs > 0) c.epochs = options.epochs;
        c.max_steps = 0;
        if (options.threads > 0) c.threads = options.threads;
        if (!options.device.empty()) c.device = options.device;
        if (!options.integrator.empty()) c.integrator = options.integrator;
        if (!options.kernels.empty()) c.kernels = options.kernels;
        c.Validate();
        return c;
      };
      Setting setting{env, control, read(file), {}};
      for (const std::string& model : options.models) {
        if (!ModelSupportsSystem(model, env)) {
          result->notes.push_back("skipped " + model + " on " + SettingName(env, control) +
                                  ": it is built for " + SupportedSystems(model) +
                                  " (docs/baselines.md)");
          continue;
        }
        if (!ModelSupportsControl(model, control)) {
          result->notes.push_back("skipped " + model + " on " + SettingName(env, control) +
                                  ": it has no action input and trains on unactuated data only "
                                  "(docs/baselines.md)");
          continue;
        }
        const fs::path own = presets / (SettingName(env, control) + "-" + model + ".toml");
        if (!fs::exists(own)) {
          // The setting's preset with the model swapped in must fit the model (the baselines
          // refuse KeyCLD's augmentation and loss integrators): said now, not after hours.
          TrainConfig c = setting.config;
          c.UseModel(model);
          try {
            c.Validate();
          } catch (const InputError& e) {
            throw InputError(model + " on " + SettingName(env, control) + ": '" + presets.string() +
                             "' has no " + own.filename().string() + " and '" + file.string() +
                             "' does not fit it: " + e.what());
          }
          continue;
        }
        TrainConfig c = read(own);
        if (c.model != model) {
          throw InputError("'" + own.string() + "' says [model] model = \"" + c.model + "\", not " +
                           model);
        }
        if (c.DataFile() != setting.config.DataFile()) {
          throw InputError("'" + own.string() + "' trains on '" + c.DataFile().string() +
                           "', not on the setting's '" + setting.config.DataFile().string() + "'");
        }
        setting.model_configs[model] = c;
      }
      settings.push_back(std::move(setting));
    }
  }
  if (settings.empty()) throw InputError("no valid (environment, control) combination selected");
  return settings;
}

// Trains (or resumes) a cell's run up to cfg.epochs unless that epoch's checkpoint exists; a
// diverged training marks the cell failed. A started run must have the preset's config.
void TrainCell(const BenchmarkOptions& options, const TrainConfig& cfg, const fs::path& checkpoint,
               const std::string& label, BenchmarkCell* cell) {
  const bool started = fs::exists(cell->dir / "checkpoints" / "last.pt");
  if (started) {
    TrainConfig saved = TrainConfig::FromToml(cell->dir / "config.toml");
    if (Comparable(saved) != Comparable(cfg)) {
      throw InputError("'" + cell->dir.string() + "' was trained with another " +
                       "configuration than preset '" + options.preset +
                       "' asks for now: remove the folder or choose another --out");
    }
  }
  if (fs::exists(checkpoint)) return;
  if (!options.quiet) {
    std::printf("%s: %s (%d epochs) in %s\n", label.c_str(),
                started ? "resuming training" : "training", cfg.epochs, cell->dir.c_str());
    std::fflush(stdout);
  }
  TrainOptions t;
  t.config = cfg;
  t.run_dir = cell->dir;
  t.resume = started;
  t.progress = options.progress;
  t.quiet = options.quiet;
  try {
    Train(t);
  } catch (const NumericalError& e) {
    cell->failed = true;
    cell->error = e.what();
  } catch (const Interrupted&) {
    throw Interrupted("benchmark interrupted while training " + cell->dir.string() +
                      " (its checkpoint is saved): run the same keycld benchmark command again " +
                      "to continue");
  }
  if (!cell->failed && !fs::exists(checkpoint)) {
    throw IoError("training of '" + cell->dir.string() + "' ended without " + checkpoint.string());
  }
}

// The VPT of the cell's checkpoint over all validation runs of the data set.
void ScoreCell(const BenchmarkOptions& options, const TrainConfig& cfg, const fs::path& checkpoint,
               const fs::path& data_file, BenchmarkCell* cell) {
  const auto eval_start = std::chrono::steady_clock::now();
  TrainedRunOptions to;
  to.run = checkpoint;
  to.data = data_file;
  to.device = cfg.device;
  to.threads = cfg.threads;
  TrainedRun run = OpenTrainedRun(to);
  cell->steps = run.position.step;
  ValidationScore score =
      ValidationVpt(run.model, *run.data, cfg.rtol, cfg.atol, options.eval_batch);
  cell->vpt = score.vpt;
  cell->vpt_mean = score.mean;
  cell->vpt_std = score.std;
  cell->vpt_median = score.median;
  cell->fallback_runs = score.fallback_runs;
  // The state-grid checks (docs/evaluation.md, "Diagnostics"): a cartpole VPT means something
  // only beside the pole's angle error (the VPT cannot see the pole).
  const DatasetInfo& info = run.data->info();
  if (FindModelVariant(cell->model).image_keypoints && info.has_state() &&
      info.env != EnvName::kCustom) {
    const DynamicsDiagnostics d = DiagnoseOnStateGrid(run.model, *run.data);
    cell->acceleration_scale = d.acceleration.scale;
    for (const CoordinateDiagnostics& c : d.coordinates) {
      cell->keypoints_vs_state.push_back({c.name, c.unit, c.error_rms});
    }
  }
  cell->eval_seconds = Seconds(eval_start);
}

// A cell of `setting` before any result, and its training config (*cfg).
BenchmarkCell NewCell(const Setting& setting, const std::string& model, int seed,
                      const fs::path& out, TrainConfig* cfg) {
  BenchmarkCell cell;
  cell.env = setting.env;
  cell.control = setting.control;
  cell.model = model;
  cell.seed = seed;
  cell.dir = out / CellName(setting.env, setting.control, model, seed);
  const auto own = setting.model_configs.find(model);
  *cfg = own != setting.model_configs.end() ? own->second : setting.config;
  cfg->UseModel(model);
  cfg->seed = uint64_t(seed);
  cell.epochs = cfg->epochs;
  return cell;
}

// One cell (setting × model × seed): its cached result, or trained, scored and saved.
BenchmarkCell RunCell(const BenchmarkOptions& options, const Setting& setting,
                      const fs::path& data_file, const DatasetInfo& info, const std::string& model,
                      int seed, const fs::path& out, const std::string& label) {
  TrainConfig cfg;
  BenchmarkCell cell = NewCell(setting, model, seed, out, &cfg);
  const fs::path result_file = cell.dir / "result.json";
  if (ReadCachedCell(result_file, cfg, data_file, &cell)) {
    if (!options.quiet) {
      std::printf(
          "%s: finished before (%s)\n", label.c_str(),
          cell.failed
              ? "failed"
              : ("VPT " + Fixed(cell.vpt_mean, 2) + " ± " + Fixed(cell.vpt_std, 2)).c_str());
    }
    return cell;
  }
  char epoch_name[32];
  std::snprintf(epoch_name, sizeof epoch_name, "epoch-%04d.pt", cfg.epochs);
  const fs::path checkpoint = cell.dir / "checkpoints" / epoch_name;
  TrainCell(options, cfg, checkpoint, label, &cell);
  cell.train_seconds = TrainingSeconds(ReadMetrics(cell.dir / "metrics.jsonl"), cfg.epochs);
  if (!cell.failed) ScoreCell(options, cfg, checkpoint, data_file, &cell);
  WriteTextAtomically(result_file, CellToJson(cell, cfg, info, data_file).dump(2) + "\n");
  if (!options.quiet) {
    if (cell.failed) {
      std::printf("%s: failed: %s\n", label.c_str(), cell.error.c_str());
    } else {
      std::printf(
          "%s: VPT %.2f ± %.2f frames (median %.1f, %zu runs), training %s, evaluation %s\n",
          label.c_str(), cell.vpt_mean, cell.vpt_std, cell.vpt_median, cell.vpt.size(),
          FormatDuration(cell.train_seconds).c_str(), FormatDuration(cell.eval_seconds).c_str());
    }
    std::fflush(stdout);
  }
  return cell;
}

// The data set of a setting, found or generated, and checked to be that setting's.
Dataset OpenSettingData(const BenchmarkOptions& options, const Setting& setting,
                        fs::path* data_file) {
  PreparedDataset prepared = PrepareDataset(setting.config, options.gl, options.progress);
  if (prepared.generated && !options.quiet) {
    std::printf("wrote %s in %.1f s\n", prepared.path.c_str(), prepared.generation.seconds);
  }
  Dataset data = Dataset::Open(prepared.path);
  if (data.info().env != setting.env || data.info().control != setting.control) {
    throw InputError("'" + prepared.path.string() + "' is a " +
                     SettingName(data.info().env, data.info().control) + " data set, not " +
                     SettingName(setting.env, setting.control));
  }
  *data_file = prepared.path;
  return data;
}

SettingFloor Floors(const Setting& setting, const Dataset& data) {
  return {setting.env, setting.control, MeanFrameVpt(data).mean, StillFrameVpt(data).mean};
}

// --collect: the finished cells of a setting (from result.json, nothing recomputed) and a note
// naming the others. Advances *index past the setting's cells.
void CollectSetting(const BenchmarkOptions& options, const Setting& setting, const fs::path& out,
                    int* index, BenchmarkResult* result) {
  const fs::path data_file = setting.config.DataFile();
  if (fs::exists(data_file)) {
    result->floors.push_back(Floors(setting, Dataset::Open(data_file)));
  }
  std::vector<std::string> missing;
  for (const std::string& model : options.models) {
    for (int seed = 0; seed < options.seeds; ++seed) {
      ++*index;
      if (!Fits(model, setting)) continue;
      TrainConfig cfg;
      BenchmarkCell cell = NewCell(setting, model, seed, out, &cfg);
      if (ReadCachedCell(cell.dir / "result.json", cfg, data_file, &cell)) {
        result->cells.push_back(cell);
      } else {
        missing.push_back(CellName(setting.env, setting.control, model, seed) +
                          (SameConfiguration(cell.dir, cfg)
                               ? ""
                               : " (its folder holds a run with other settings)"));
      }
    }
  }
  result->missing_cells += int(missing.size());
  if (!missing.empty()) {
    std::string names;
    for (const auto& m : missing) names += (names.empty() ? "" : ", ") + m;
    result->notes.push_back(std::to_string(missing.size()) + " cell(s) not finished yet: " + names);
  }
}

// Notes on failed cells and on runs scored with the fallback integrator.
void AddCellNotes(BenchmarkResult* result) {
  for (const BenchmarkCell& c : result->cells) {
    if (c.failed) {
      result->notes.push_back(CellName(c.env, c.control, c.model, c.seed) + " failed: " + c.error);
    } else if (c.fallback_runs > 0) {
      result->notes.push_back(CellName(c.env, c.control, c.model, c.seed) + ": " +
                              std::to_string(c.fallback_runs) +
                              " validation run(s) diverged under Dormand–Prince and were scored "
                              "with fixed-step RK4");
    }
  }
}

}  // namespace

bool CellInShard(int index, int shard_index, int shard_count) {
  if (shard_count < 1 || shard_index < 0 || shard_index >= shard_count) {
    throw InputError("--shard " + std::to_string(shard_index) + "/" + std::to_string(shard_count) +
                     ": expected I/N with 0 ≤ I < N");
  }
  return index % shard_count == shard_index;
}

std::pair<int, int> ParseShard(const std::string& text) {
  const size_t slash = text.find('/');
  auto number = [&](const std::string& part) -> int {
    if (part.empty() || part.size() > 6 ||
        part.find_first_not_of("0123456789") != std::string::npos) {
      throw InputError("--shard '" + text + "': expected I/N with 0 ≤ I < N ≤ 100000, e.g. 0/4");
    }
    return std::stoi(part);
  };
  if (slash == std::string::npos) number("");
  const int i = number(text.substr(0, slash)), n = number(text.substr(slash + 1));
  if (n < 1 || n > 100000 || i >= n) {
    throw InputError("--shard '" + text + "': expected I/N with 0 ≤ I < N ≤ 100000, e.g. 0/4");
  }
  return {i, n};
}

BenchmarkResult RunBenchmark(const BenchmarkOptions& given) {
  const auto start = std::chrono::steady_clock::now();
  if (given.seeds < 1) throw InputError("--seeds must be ≥ 1, got " + std::to_string(given.seeds));
  if (given.epochs < 0) throw InputError("--epochs must be ≥ 1");
  if (given.threads < 0) throw InputError("--threads must be ≥ 0");
  if (given.envs.empty() || given.controls.empty() || given.models.empty()) {
    throw InputError("--envs, --controls and --models must name at least one each");
  }
  // A selection that names something twice has each cell once.
  BenchmarkOptions unique = given;
  auto dedupe = [](auto& v) {
    auto copy = v;
    v.clear();
    for (const auto& x : copy) {
      if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
    }
  };
  dedupe(unique.envs);
  dedupe(unique.controls);
  dedupe(unique.models);
  const BenchmarkOptions& options = unique;
  const fs::path presets = ResolvePresetFolder(options.preset);
  const fs::path out = options.out.empty()
                           ? fs::path("runs") / ("benchmark-" + presets.filename().string())
                           : options.out;
  BenchmarkResult result;
  const std::vector<Setting> settings = ReadSettings(options, presets, &result);
  const bool any_cell = std::any_of(settings.begin(), settings.end(), [&](const Setting& st) {
    return std::any_of(options.models.begin(), options.models.end(),
                       [&](const std::string& m) { return Fits(m, st); });
  });
  if (!any_cell) {
    std::string why;
    for (const auto& n : result.notes) why += "; " + n;
    throw InputError("nothing to run: no selected model is built for the selected settings" + why);
  }
  for (const auto& n : result.notes) {
    if (!options.quiet) std::printf("%s\n", n.c_str());
  }
  const int total = int(settings.size() * options.models.size()) * options.seeds;
  const bool sharded = options.shard_count > 1;
  CellInShard(0, options.shard_index, options.shard_count);  // validates the shard
  const int per_setting = int(options.models.size()) * options.seeds;
  int index = 0;
  for (const Setting& setting : settings) {
    const int first = index;
    bool any = false;
    for (int k = 0; k < per_setting; ++k) {
      any = any || (CellInShard(first + k, options.shard_index, options.shard_count) &&
                    Fits(options.models[size_t(k / options.seeds)], setting));
    }
    if (options.collect) {
      CollectSetting(options, setting, out, &index, &result);
      continue;
    }
    if (!any) {
      index += per_setting;
      continue;
    }
    fs::path data_file;
    const Dataset data = OpenSettingData(options, setting, &data_file);
    result.floors.push_back(Floors(setting, data));
    for (const std::string& model : options.models) {
      for (int seed = 0; seed < options.seeds; ++seed) {
        const int k = index++;
        if (!Fits(model, setting)) continue;
        if (!CellInShard(k, options.shard_index, options.shard_count)) continue;
        const std::string label = "[" + std::to_string(k + 1) + "/" + std::to_string(total) + "] " +
                                  CellName(setting.env, setting.control, model, seed);
        result.cells.push_back(
            RunCell(options, setting, data_file, data.info(), model, seed, out, label));
      }
    }
  }
  AddCellNotes(&result);
  if (sharded && !options.collect) {
    result.seconds = Seconds(start);
    return result;  // the table: keycld benchmark --collect, once the shards are done
  }
  if (options.collect && result.cells.empty()) {
    throw InputError("--collect: no cell of this selection is finished in '" + out.string() +
                     "' yet (" + std::to_string(result.missing_cells) + " to go)");
  }
  result.rows = SummarizeCells(result.cells);
  result.csv = out / "results.csv";
  result.markdown = out / "results.md";
  WriteTextAtomically(result.csv, ResultsCsv(result.rows));
  result.png = out / "results.png";
  WriteResultsChart(result.png, result.rows,
                    "Valid prediction time, preset " + presets.filename().string());
  result.seconds = Seconds(start);
  WriteTextAtomically(result.markdown, ResultsMarkdown(options, result));
  return result;
}

}  // namespace keycld
