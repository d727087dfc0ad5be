#include "keycld/train/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "keycld/data/generate.h"
#include "keycld/util/error.h"

namespace keycld {

TrainConfig TrainConfig::FromToml(const std::filesystem::path& file) {
  if (!std::filesystem::is_regular_file(file)) {
    throw IoError("config '" + file.string() + "' is not a readable file");
  }
  std::ifstream in(file);
  if (!in) throw IoError("cannot read config '" + file.string() + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  TrainConfig c;
  c.MergeToml(ss.str(), file.string());
  return c;
}

namespace {

const std::set<std::string> kKeys[] = {{"file", "env", "control", "size", "runs", "frames", "seed"},
                                       {"hidden", "sigma", "model", "dynamics"},
                                       {"epochs",
                                        "max_steps",
                                        "lr",
                                        "dynamics_lr_scale",
                                        "grad_clip",
                                        "lr_schedule",
                                        "lr_final_scale",
                                        "lr_decay_start",
                                        "horizon",
                                        "integrator",
                                        "integrator_substeps",
                                        "warmup_integrator",
                                        "integrator_warmup_epochs",
                                        "max_acceleration",
                                        "w_rec",
                                        "w_dyn",
                                        "w_dyn_warmup_epochs",
                                        "w_bce",
                                        "augment",
                                        "seed",
                                        "threads",
                                        "device",
                                        "precision"},
                                       {"val_runs", "rtol", "atol"}};
const char* kSections[] = {"data", "model", "train", "eval"};

template <typename T>
void Get(const toml::table& t, const char* section, const char* key, T* out,
         const std::string& origin) {
  const toml::node* n = t[section][key].node();
  if (!n) return;
  if constexpr (std::is_same_v<T, double>) {
    if (auto v = n->value<double>()) {
      *out = *v;
      return;
    }
  } else if constexpr (std::is_same_v<T, bool>) {
    if (auto v = n->as_boolean()) {
      *out = v->get();
      return;
    }
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (auto v = n->as_string()) {
      *out = v->get();
      return;
    }
  } else {
    if (auto v = n->as_integer()) {
      const int64_t x = v->get();
      if (x < int64_t(std::numeric_limits<T>::min()) ||
          (std::is_signed_v<T> && x > int64_t(std::numeric_limits<T>::max()))) {
        throw InputError(origin + ": [" + section + "] " + key + " = " + std::to_string(x) +
                         " is out of range");
      }
      *out = T(x);
      return;
    }
  }
  throw InputError(origin + ": [" + section + "] " + key + " has the wrong type");
}

}  // namespace

void TrainConfig::MergeToml(const std::string& text, const std::string& origin) {
  toml::table t;
  try {
    t = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    std::ostringstream s;
    s << origin << ":" << e.source().begin.line << ": " << e.description();
    throw InputError(s.str());
  }
  for (auto&& [k, v] : t) {
    std::string section(k.str());
    int idx = -1;
    for (int i = 0; i < 4; ++i)
      if (section == kSections[i]) idx = i;
    if (idx < 0 || !v.is_table()) {
      throw InputError(origin + ": unknown section '" + section +
                       "' (expected data, model, train, eval)");
    }
    for (auto&& [key, _] : *v.as_table()) {
      if (!kKeys[idx].count(std::string(key.str()))) {
        throw InputError(origin + ": unknown key '" + std::string(key.str()) + "' in [" + section +
                         "]");
      }
    }
  }
  std::string file_str, model_name, dyn;
  Get(t, "data", "file", &file_str, origin);
  if (!file_str.empty()) data = file_str;
  Get(t, "data", "env", &env, origin);
  Get(t, "data", "control", &control, origin);
  Get(t, "data", "size", &size, origin);
  Get(t, "data", "runs", &runs, origin);
  Get(t, "data", "frames", &frames, origin);
  int64_t ds = int64_t(data_seed);
  Get(t, "data", "seed", &ds, origin);
  if (ds < 0) throw InputError(origin + ": [data] seed must be ≥ 0");
  data_seed = uint64_t(ds);
  Get(t, "model", "hidden", &hidden, origin);
  Get(t, "model", "sigma", &sigma, origin);
  Get(t, "model", "model", &model_name, origin);
  Get(t, "model", "dynamics", &dyn, origin);
  try {
    if (!model_name.empty()) model = ParseModelKind(model_name);
    if (!dyn.empty()) {
      // The key of configurations written before model variants existed.
      const ModelKind legacy = ModelKindFromLegacyDynamics(dyn);
      if (!model_name.empty() && legacy != model) {
        throw InputError("[model] dynamics = \"" + dyn + "\" contradicts model = \"" + model_name +
                         "\" (drop the old dynamics key)");
      }
      model = legacy;
    }
  } catch (const InputError& e) {
    throw InputError(origin + ": " + e.what());
  }
  Get(t, "train", "epochs", &epochs, origin);
  Get(t, "train", "max_steps", &max_steps, origin);
  Get(t, "train", "lr", &lr, origin);
  Get(t, "train", "dynamics_lr_scale", &dynamics_lr_scale, origin);
  Get(t, "train", "grad_clip", &grad_clip, origin);
  Get(t, "train", "lr_schedule", &lr_schedule, origin);
  Get(t, "train", "lr_final_scale", &lr_final_scale, origin);
  Get(t, "train", "lr_decay_start", &lr_decay_start, origin);
  Get(t, "train", "horizon", &horizon, origin);
  Get(t, "train", "integrator", &integrator, origin);
  Get(t, "train", "integrator_substeps", &integrator_substeps, origin);
  Get(t, "train", "warmup_integrator", &warmup_integrator, origin);
  Get(t, "train", "integrator_warmup_epochs", &integrator_warmup_epochs, origin);
  Get(t, "train", "max_acceleration", &max_acceleration, origin);
  Get(t, "train", "w_rec", &w_rec, origin);
  Get(t, "train", "w_dyn", &w_dyn, origin);
  Get(t, "train", "w_dyn_warmup_epochs", &w_dyn_warmup_epochs, origin);
  Get(t, "train", "w_bce", &w_bce, origin);
  Get(t, "train", "augment", &augment, origin);
  int64_t s = int64_t(seed);
  Get(t, "train", "seed", &s, origin);
  if (s < 0) throw InputError(origin + ": [train] seed must be ≥ 0");
  seed = uint64_t(s);
  Get(t, "train", "threads", &threads, origin);
  Get(t, "train", "device", &device, origin);
  Get(t, "train", "precision", &precision, origin);
  Get(t, "eval", "val_runs", &val_runs, origin);
  Get(t, "eval", "rtol", &rtol, origin);
  Get(t, "eval", "atol", &atol, origin);
}

void TrainConfig::Validate() const {
  auto fail = [](const std::string& m) { throw InputError(m); };
  if (!env.empty()) ParseEnvName(env);
  ParseControlMode(control);
  if (size < 8 || runs < 1 || frames < 3) fail("[data] size, runs and frames must be positive");
  if (hidden < 8 || hidden % 8 != 0) {
    fail("hidden width must be a positive multiple of 8 (GroupNorm has 8 groups), got " +
         std::to_string(hidden));
  }
  if (!(sigma > 0)) fail("sigma must be > 0");
  if (epochs < 1) fail("epochs must be ≥ 1, got " + std::to_string(epochs));
  if (max_steps < 0) fail("max_steps must be ≥ 0");
  if (!(lr > 0) || !(dynamics_lr_scale > 0) || !std::isfinite(lr) ||
      !std::isfinite(dynamics_lr_scale)) {
    fail("learning rates must be finite and > 0");
  }
  if (!(grad_clip > 0)) fail("grad_clip must be > 0");
  if (lr_schedule != "constant" && lr_schedule != "cosine") {
    fail("lr_schedule must be constant or cosine, got '" + lr_schedule + "'");
  }
  if (!(lr_final_scale >= 0 && lr_final_scale <= 1)) fail("lr_final_scale must be in [0, 1]");
  if (!(lr_decay_start >= 0 && lr_decay_start < 1)) fail("lr_decay_start must be in [0, 1)");
  if (horizon < 1) fail("horizon must be ≥ 1, got " + std::to_string(horizon));
  if (!(w_rec >= 0) || !(w_dyn >= 0) || !(w_bce >= 0) || !std::isfinite(w_rec) ||
      !std::isfinite(w_dyn) || !std::isfinite(w_bce)) {
    fail("loss weights w_rec, w_dyn, w_bce must be finite and ≥ 0");
  }
  for (const auto& [key, name] :
       {std::pair{"integrator", &integrator}, std::pair{"warmup_integrator", &warmup_integrator}}) {
    if (*name != "euler" && *name != "rk4" && *name != "verlet") {
      fail(std::string(key) + " must be euler, rk4 or verlet, got '" + *name + "'");
    }
  }
  if (!(max_acceleration >= 0) || !std::isfinite(max_acceleration)) {
    fail("max_acceleration must be finite and ≥ 0 (0 = no bound)");
  }
  if (integrator_substeps < 1 || integrator_substeps > 64) {
    fail("integrator_substeps must be in [1, 64], got " + std::to_string(integrator_substeps));
  }
  if (!(integrator_warmup_epochs >= 0) || !std::isfinite(integrator_warmup_epochs) ||
      !(w_dyn_warmup_epochs >= 0) || !std::isfinite(w_dyn_warmup_epochs)) {
    fail("integrator_warmup_epochs and w_dyn_warmup_epochs must be finite and ≥ 0");
  }
  if (threads < 0 || threads > 256) fail("threads must be in [0, 256] (0 = all cores)");
  if (val_runs < 0) fail("val_runs must be ≥ 0 (0 = all)");
  if (!(rtol > 0) || !(atol > 0)) fail("rtol and atol must be > 0");
  if (device != "cpu" && device.rfind("cuda", 0) != 0) {
    fail("device must be cpu, cuda or cuda:N, got '" + device + "'");
  }
  if (precision != "fp32" && precision != "bf16") {
    fail("precision must be fp32 or bf16, got '" + precision + "'");
  }
}

int64_t TrainConfig::TotalSteps(int64_t train_runs) const {
  return max_steps > 0 ? max_steps : int64_t(epochs) * train_runs;
}

namespace {
bool InWarmup(int64_t step, int64_t train_runs, double warmup_epochs) {
  return warmup_epochs > 0 &&
         double(step) < warmup_epochs * double(std::max<int64_t>(1, train_runs));
}
}  // namespace

IntegratorMethod TrainConfig::IntegratorAt(int64_t step, int64_t train_runs) const {
  return ParseIntegratorMethod(
      InWarmup(step, train_runs, integrator_warmup_epochs) ? warmup_integrator : integrator);
}

int TrainConfig::SubstepsAt(int64_t step, int64_t train_runs) const {
  return InWarmup(step, train_runs, integrator_warmup_epochs) ? 1 : integrator_substeps;
}

double TrainConfig::WDynAt(int64_t step, int64_t train_runs) const {
  if (w_dyn_warmup_epochs <= 0) return w_dyn;
  const double ramp = w_dyn_warmup_epochs * double(std::max<int64_t>(1, train_runs));
  return w_dyn * std::min(1.0, double(step) / ramp);
}

double TrainConfig::LearningRateFactor(int64_t step, int64_t total) const {
  if (lr_schedule != "cosine" || total <= 0) return 1.0;
  const double start = lr_decay_start * double(total);
  const double progress =
      std::min(1.0, std::max(0.0, (double(step) - start) / (double(total) - start)));
  return lr_final_scale + (1.0 - lr_final_scale) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

std::filesystem::path TrainConfig::DataFile() const {
  if (!data.empty()) return data;
  if (env.empty()) {
    throw InputError("no data set: give --data FILE, or [data] file or env in the config");
  }
  GenerateOptions g;
  g.env = ParseEnvName(env);
  g.control = ParseControlMode(control);
  g.size = size;
  g.runs = runs;
  g.frames = frames;
  g.seed = data_seed;
  g.out_dir = "data";
  return DatasetPath(g);
}

std::string TrainConfig::ToToml() const {
  toml::table t{
      {"data", toml::table{{"file", data.string()},
                           {"env", env},
                           {"control", control},
                           {"size", size},
                           {"runs", runs},
                           {"frames", frames},
                           {"seed", int64_t(data_seed)}}},
      {"model", toml::table{{"hidden", hidden}, {"sigma", sigma}, {"model", ModelKindName(model)}}},
      {"train", toml::table{{"epochs", epochs},
                            {"max_steps", max_steps},
                            {"lr", lr},
                            {"dynamics_lr_scale", dynamics_lr_scale},
                            {"grad_clip", grad_clip},
                            {"lr_schedule", lr_schedule},
                            {"lr_final_scale", lr_final_scale},
                            {"lr_decay_start", lr_decay_start},
                            {"horizon", horizon},
                            {"integrator", integrator},
                            {"integrator_substeps", integrator_substeps},
                            {"warmup_integrator", warmup_integrator},
                            {"integrator_warmup_epochs", integrator_warmup_epochs},
                            {"max_acceleration", max_acceleration},
                            {"w_rec", w_rec},
                            {"w_dyn", w_dyn},
                            {"w_dyn_warmup_epochs", w_dyn_warmup_epochs},
                            {"w_bce", w_bce},
                            {"augment", augment},
                            {"seed", int64_t(seed)},
                            {"threads", threads},
                            {"device", device},
                            {"precision", precision}}},
      {"eval", toml::table{{"val_runs", val_runs}, {"rtol", rtol}, {"atol", atol}}},
  };
  std::ostringstream s;
  s << "# keycld training configuration (resolved)\n" << t << "\n";
  return s.str();
}

std::filesystem::path DefaultConfigsDir() {
  if (const char* env = std::getenv("KEYCLD_CONFIGS"); env && *env) return env;
  return KEYCLD_SOURCE_CONFIGS_DIR;
}

std::filesystem::path PresetFile(const std::string& preset, const std::string& env,
                                 const std::string& control) {
  if (preset != "cpu-quick" && preset != "paper") {
    throw InputError("unknown preset '" + preset + "' (expected cpu-quick or paper)");
  }
  const EnvName e = ParseEnvName(env);
  const ControlMode c = ParseControlMode(control);
  CheckControlMode(e, c);
  std::filesystem::path file =
      DefaultConfigsDir() / preset / (EnvNameString(e) + "-" + ControlModeString(c) + ".toml");
  if (!std::filesystem::exists(file)) {
    throw IoError("preset file not found: '" + file.string() + "' (set KEYCLD_CONFIGS to the " +
                  "configs/ folder of the source tree)");
  }
  return file;
}

}  // namespace keycld
