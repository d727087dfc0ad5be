#include "keycld/train/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <variant>
#include <vector>

#include "keycld/data/generate.h"
#include "keycld/model/mechanics.h"
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

// Every key of the TOML file, bound to its field: the one table that reading, writing and the
// unknown-key check share. [model] dynamics (the legacy key) is special-cased.
using FieldTarget = std::variant<int*, int64_t*, uint64_t*, double*, bool*, std::string*,
                                 std::filesystem::path*, std::vector<double>*>;
struct Field {
  const char* section;
  const char* key;
  FieldTarget target;
};

std::vector<Field> Fields(TrainConfig& c) {
  return {
      {"data", "file", &c.data},
      {"data", "env", &c.env},
      {"data", "control", &c.control},
      {"data", "size", &c.size},
      {"data", "runs", &c.runs},
      {"data", "frames", &c.frames},
      {"data", "seed", &c.data_seed},
      {"model", "hidden", &c.hidden},
      {"model", "sigma", &c.sigma},
      {"model", "dense_init", &c.dense_init},
      {"model", "model", &c.model},
      {"train", "epochs", &c.epochs},
      {"train", "max_steps", &c.max_steps},
      {"train", "batch_sequences", &c.batch_sequences},
      {"train", "lr", &c.lr},
      {"train", "dynamics_lr_scale", &c.dynamics_lr_scale},
      {"train", "warmup_dynamics_lr_scale", &c.warmup_dynamics_lr_scale},
      {"train", "dynamics_lr_warmup_epochs", &c.dynamics_lr_warmup_epochs},
      {"train", "grad_clip", &c.grad_clip},
      {"train", "lr_schedule", &c.lr_schedule},
      {"train", "lr_final_scale", &c.lr_final_scale},
      {"train", "lr_decay_start", &c.lr_decay_start},
      {"train", "horizon", &c.horizon},
      {"train", "warmup_horizon", &c.warmup_horizon},
      {"train", "horizon_warmup_epochs", &c.horizon_warmup_epochs},
      {"train", "integrator", &c.integrator},
      {"train", "integrator_substeps", &c.integrator_substeps},
      {"train", "warmup_integrator", &c.warmup_integrator},
      {"train", "integrator_warmup_epochs", &c.integrator_warmup_epochs},
      {"train", "max_acceleration", &c.max_acceleration},
      {"train", "w_rec", &c.w_rec},
      {"train", "w_dyn", &c.w_dyn},
      {"train", "w_dyn_warmup_epochs", &c.w_dyn_warmup_epochs},
      {"train", "w_bce", &c.w_bce},
      {"train", "w_con", &c.w_con},
      {"train", "con_weights", &c.con_weights},
      {"train", "w_kl", &c.w_kl},
      {"train", "w_norm", &c.w_norm},
      {"train", "augment", &c.augment},
      {"train", "augment_warmup_epochs", &c.augment_warmup_epochs},
      {"train", "keypoint_relabel_epochs", &c.keypoint_relabel_epochs},
      {"train", "seed", &c.seed},
      {"train", "threads", &c.threads},
      {"train", "device", &c.device},
      {"train", "precision", &c.precision},
      {"train", "kernels", &c.kernels},
      {"eval", "val_runs", &c.val_runs},
      {"eval", "rtol", &c.rtol},
      {"eval", "atol", &c.atol},
  };
}
// Read but no longer written: [model] dynamics = "constrained" | "unconstrained".
constexpr const char* kLegacyModelKey = "dynamics";
constexpr const char* kSections[] = {"data", "model", "train", "eval"};

std::string Where(const std::string& origin, const Field& f) {
  return origin + ": [" + f.section + "] " + f.key;
}

template <typename T>
void ReadInteger(const toml::node& n, const Field& f, const std::string& origin, T* out) {
  auto v = n.as_integer();
  if (!v) throw InputError(Where(origin, f) + " has the wrong type (expected an integer)");
  const int64_t x = v->get();
  if (x < int64_t(std::numeric_limits<T>::min()) ||
      (std::is_signed_v<T> && x > int64_t(std::numeric_limits<T>::max()))) {
    throw InputError(Where(origin, f) + " = " + std::to_string(x) + " is out of range");
  }
  *out = T(x);
}

void Read(const toml::node& n, const Field& f, const std::string& origin) {
  std::visit(
      [&](auto* target) {
        using T = std::remove_pointer_t<decltype(target)>;
        if constexpr (std::is_same_v<T, double>) {
          auto v = n.value<double>();  // integers are accepted for floating-point keys
          if (!v) throw InputError(Where(origin, f) + " has the wrong type (expected a number)");
          *target = *v;
        } else if constexpr (std::is_same_v<T, bool>) {
          auto v = n.as_boolean();
          if (!v) throw InputError(Where(origin, f) + " has the wrong type (expected true/false)");
          *target = v->get();
        } else if constexpr (std::is_same_v<T, std::string> ||
                             std::is_same_v<T, std::filesystem::path>) {
          auto v = n.as_string();
          if (!v) throw InputError(Where(origin, f) + " has the wrong type (expected a string)");
          *target = T(v->get());
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          const toml::array* a = n.as_array();
          if (!a) throw InputError(Where(origin, f) + " has the wrong type (expected an array)");
          std::vector<double> values;
          for (const toml::node& e : *a) {
            auto v = e.value<double>();
            if (!v) {
              throw InputError(Where(origin, f) +
                               " has the wrong type (expected an array of numbers)");
            }
            values.push_back(*v);
          }
          *target = std::move(values);
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          int64_t x = 0;
          ReadInteger(n, f, origin, &x);
          if (x < 0) throw InputError(Where(origin, f) + " must be ≥ 0");
          *target = uint64_t(x);
        } else {
          ReadInteger(n, f, origin, target);
        }
      },
      f.target);
}

void Write(toml::table& section, const Field& f) {
  std::visit(
      [&](auto* target) {
        using T = std::remove_pointer_t<decltype(target)>;
        if constexpr (std::is_same_v<T, std::filesystem::path>) {
          section.insert(f.key, target->string());
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          section.insert(f.key, int64_t(*target));
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          toml::array a;
          for (double v : *target) a.push_back(v);
          section.insert(f.key, std::move(a));
        } else {
          section.insert(f.key, *target);
        }
      },
      f.target);
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
  const std::vector<Field> fields = Fields(*this);
  for (auto&& [k, v] : t) {
    const std::string section(k.str());
    if (std::find(std::begin(kSections), std::end(kSections), section) == std::end(kSections) ||
        !v.is_table()) {
      throw InputError(origin + ": unknown section '" + section +
                       "' (expected data, model, train, eval)");
    }
    for (auto&& [key, _] : *v.as_table()) {
      const bool known =
          std::any_of(fields.begin(), fields.end(),
                      [&](const Field& f) { return f.section == section && f.key == key.str(); }) ||
          (section == "model" && key.str() == kLegacyModelKey);
      if (!known) {
        throw InputError(origin + ": unknown key '" + std::string(key.str()) + "' in [" + section +
                         "]");
      }
    }
  }
  const std::string model_before = model;
  for (const Field& f : fields) {
    if (const toml::node* n = t[f.section][f.key].node()) Read(*n, f, origin);
  }
  const bool model_given = t["model"]["model"].node() != nullptr;
  try {
    if (model_given) model = FindModelVariant(model).name;
    if (const toml::node* n = t["model"][kLegacyModelKey].node()) {
      std::string dyn;
      Read(*n, {"model", kLegacyModelKey, &dyn}, origin);
      // The key of configurations written before model variants existed.
      const std::string legacy = ModelFromLegacyDynamics(dyn);
      if (model_given && legacy != model) {
        throw InputError("[model] dynamics = \"" + dyn + "\" contradicts model = \"" + model +
                         "\" (drop the old dynamics key)");
      }
      model = legacy;
    }
  } catch (const InputError& e) {
    model = model_before;
    throw InputError(origin + ": " + e.what());
  }
}

void TrainConfig::Validate() const {
  auto fail = [](const std::string& m) { throw InputError(m); };
  if (!env.empty()) ParseEnvName(env);
  ParseControlMode(control);
  if (size < 8 || size > 1024 || runs < 1 || frames < 3) {
    fail("[data] size must be in [8, 1024], runs ≥ 1 and frames ≥ 3, got size " +
         std::to_string(size) + ", runs " + std::to_string(runs) + ", frames " +
         std::to_string(frames));
  }
  // 256 is 8× the paper's width: the U-Net's widest convolution then holds 4h·4h·9 ≈ 9.4M
  // weights; much wider models exhaust memory (h = 100000 asked LibTorch for 720 GB).
  if (hidden < 8 || hidden % 8 != 0 || hidden > 256) {
    fail("hidden width must be a multiple of 8 (GroupNorm has 8 groups) in [8, 256], got " +
         std::to_string(hidden));
  }
  if (!(sigma > 0) || !std::isfinite(sigma)) fail("sigma must be finite and > 0");
  ParseDenseInit(dense_init);  // InputError naming both choices
  if (epochs < 1) fail("epochs must be ≥ 1, got " + std::to_string(epochs));
  if (max_steps < 0) fail("max_steps must be ≥ 0");
  // Upper bounds: the rates are float32 in LibTorch's Adam (1e300 overflowed there), and a rate
  // above 1 (3000× the paper's) only diverges.
  if (!(lr > 0 && lr <= 1) || !(dynamics_lr_scale > 0 && dynamics_lr_scale <= 100) ||
      !(warmup_dynamics_lr_scale > 0 && warmup_dynamics_lr_scale <= 100)) {
    fail(
        "learning rates must be in (0, 1] (lr) and (0, 100] (dynamics_lr_scale, "
        "warmup_dynamics_lr_scale)");
  }
  if (!(grad_clip > 0) || !std::isfinite(grad_clip)) fail("grad_clip must be finite and > 0");
  if (lr_schedule != "constant" && lr_schedule != "cosine") {  // two fixed names
    fail("lr_schedule must be constant or cosine, got '" + lr_schedule + "'");
  }
  if (!(lr_final_scale >= 0 && lr_final_scale <= 1)) fail("lr_final_scale must be in [0, 1]");
  if (!(lr_decay_start >= 0 && lr_decay_start < 1)) fail("lr_decay_start must be in [0, 1)");
  if (horizon < 1) fail("horizon must be ≥ 1, got " + std::to_string(horizon));
  if (warmup_horizon < 1) {
    fail("warmup_horizon must be ≥ 1, got " + std::to_string(warmup_horizon));
  }
  if (!(w_rec >= 0) || !(w_dyn >= 0) || !(w_bce >= 0) || !(w_kl >= 0) || !(w_norm >= 0) ||
      !(w_con >= 0) || !std::isfinite(w_rec) || !std::isfinite(w_dyn) || !std::isfinite(w_bce) ||
      !std::isfinite(w_kl) || !std::isfinite(w_norm) || !std::isfinite(w_con)) {
    fail("loss weights w_rec, w_dyn, w_bce, w_con, w_kl, w_norm must be finite and ≥ 0");
  }
  for (const auto& [key, name] :
       {std::pair{"integrator", &integrator}, std::pair{"warmup_integrator", &warmup_integrator}}) {
    const auto names = FixedStepIntegratorNames();
    if (std::find(names.begin(), names.end(), *name) == names.end()) {
      fail(std::string(key) + " must be " + JoinAlternatives(names) + ", got '" + *name + "'");
    }
  }
  if (!(max_acceleration >= 0) || !std::isfinite(max_acceleration)) {
    fail("max_acceleration must be finite and ≥ 0 (0 = no bound)");
  }
  if (integrator_substeps < 1 || integrator_substeps > 64) {
    fail("integrator_substeps must be in [1, 64], got " + std::to_string(integrator_substeps));
  }
  if (!(integrator_warmup_epochs >= 0) || !std::isfinite(integrator_warmup_epochs) ||
      !(w_dyn_warmup_epochs >= 0) || !std::isfinite(w_dyn_warmup_epochs) ||
      !(augment_warmup_epochs >= 0) || !std::isfinite(augment_warmup_epochs) ||
      !(horizon_warmup_epochs >= 0) || !std::isfinite(horizon_warmup_epochs) ||
      !(dynamics_lr_warmup_epochs >= 0) || !std::isfinite(dynamics_lr_warmup_epochs)) {
    fail(
        "integrator_warmup_epochs, w_dyn_warmup_epochs, augment_warmup_epochs, "
        "horizon_warmup_epochs and dynamics_lr_warmup_epochs must be finite and ≥ 0");
  }
  if (con_weights.size() > 64 ||
      std::any_of(con_weights.begin(), con_weights.end(),
                  [](double w) { return !(w >= 0) || !std::isfinite(w); })) {
    fail("con_weights must hold at most 64 finite weights ≥ 0, one per constraint");
  }
  if (!con_weights.empty() && model != "keycld") {
    fail("con_weights needs model = keycld (the other models have no constraints), the model is " +
         model);
  }
  if (keypoint_relabel_epochs < 0) {
    fail("keypoint_relabel_epochs must be ≥ 0, got " + std::to_string(keypoint_relabel_epochs));
  }
  if (keypoint_relabel_epochs > 0 && model != "keycld") {
    fail("keypoint_relabel_epochs needs model = keycld (the holonomic constraints decide the "
         "order), the model is " + model);
  }
  if (batch_sequences < 1 || batch_sequences > 4096) {
    fail("batch_sequences must be in [1, 4096], got " + std::to_string(batch_sequences));
  }
  if (threads < 0 || threads > 256) fail("threads must be in [0, 256] (0 = all cores)");
  if (val_runs < 0 || val_runs > 1000000) fail("val_runs must be in [0, 1000000] (0 = all)");
  // Dormand–Prince tolerances: relative and absolute errors per step, meaningless above 1.
  if (!(rtol > 0 && rtol <= 1) || !(atol > 0 && atol <= 1)) {
    fail("rtol and atol must be in (0, 1], got " + std::to_string(rtol) + " and " +
         std::to_string(atol));
  }
  if (device != "cpu" && device.rfind("cuda", 0) != 0) {
    fail("device must be cpu, cuda or cuda:N, got '" + device + "'");
  }
  ParsePrecision(precision);
  ResolveTrunkKernels(kernels, device, precision);
  // What the model's own objective accepts (the VAE baselines: docs/baselines.md).
  const ModelVariant& variant = FindModelVariant(model);
  if (!variant.loss_integrators.empty()) {
    auto allowed = [&](const std::string& name) {
      const IntegratorMethod m = ParseIntegratorMethod(name);
      return std::find(variant.loss_integrators.begin(), variant.loss_integrators.end(), m) !=
             variant.loss_integrators.end();
    };
    std::string names;
    for (IntegratorMethod m : variant.loss_integrators) {
      names += (names.empty() ? "" : " or ") + IntegratorMethodString(m);
    }
    if (!allowed(integrator) || (integrator_warmup_epochs > 0 && !allowed(warmup_integrator))) {
      fail("[train] model '" + model + "' trains with " + names + ", got integrator '" +
           integrator + "'" +
           (integrator_warmup_epochs > 0 ? " and warmup_integrator '" + warmup_integrator + "'"
                                         : std::string()) +
           " (its presets: configs/cpu-quick/*-" + model + ".toml)");
    }
  }
  if (!variant.takes_actions && !control.empty() &&
      !ModelSupportsControl(model, ParseControlMode(control))) {
    fail("[data] control = \"" + control + "\": model '" + model +
         "' has no action input (as published, it trains on unactuated data only); use "
         "control = \"none\"");
  }
  if (!variant.augmentation && augment) {
    fail("[train] model '" + model + "' trains without the dihedral augmentation (as published): " +
         "set augment = false, or train with its presets configs/cpu-quick/<env>-<control>-" +
         model + ".toml");
  }
}

int64_t TrainConfig::StepsPerEpoch(int64_t train_runs) const {
  return train_runs / std::max(1, batch_sequences);
}

int64_t TrainConfig::TotalSteps(int64_t steps_per_epoch) const {
  return max_steps > 0 ? max_steps : int64_t(epochs) * steps_per_epoch;
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

int TrainConfig::HorizonAt(int64_t step, int64_t train_runs) const {
  return InWarmup(step, train_runs, horizon_warmup_epochs) ? warmup_horizon : horizon;
}

int TrainConfig::MaxHorizon() const {
  return horizon_warmup_epochs > 0 ? std::max(horizon, warmup_horizon) : horizon;
}

double TrainConfig::DynamicsLrScaleAt(int64_t step, int64_t train_runs) const {
  return InWarmup(step, train_runs, dynamics_lr_warmup_epochs) ? warmup_dynamics_lr_scale
                                                              : dynamics_lr_scale;
}

bool TrainConfig::AugmentAt(int64_t step, int64_t train_runs) const {
  return augment && !InWarmup(step, train_runs, augment_warmup_epochs);
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

void TrainConfig::UseModel(const std::string& name) {
  model = name;
  if (model != "keycld") {
    keypoint_relabel_epochs = 0;
    con_weights.clear();
  }
}

std::string TrainConfig::ToToml() const {
  toml::table t;
  for (const char* name : kSections) t.insert(name, toml::table{});
  TrainConfig copy = *this;
  for (const Field& f : Fields(copy)) Write(*t[f.section].as_table(), f);
  std::ostringstream s;
  s << "# keycld training configuration (resolved)\n" << t << "\n";
  return s.str();
}

std::string TrainConfig::Differences(const TrainConfig& other) const {
  TrainConfig a = *this, b = other;
  const std::vector<Field> fa = Fields(a), fb = Fields(b);
  std::string out;
  for (size_t i = 0; i < fa.size(); ++i) {
    toml::table ta, tb;
    Write(ta, fa[i]);
    Write(tb, fb[i]);
    std::ostringstream va, vb;
    va << ta;  // "key = value"
    vb << tb;
    if (va.str() == vb.str()) continue;
    auto value = [](const std::string& line) {
      const size_t eq = line.find(" = ");
      return eq == std::string::npos ? line : line.substr(eq + 3);
    };
    if (!out.empty()) out += "; ";
    out += std::string("[") + fa[i].section + "] " + fa[i].key + ": " + value(va.str()) +
           " against " + value(vb.str());
  }
  return out;
}

TrunkKernels ResolveTrunkKernels(const std::string& kernels, const std::string& device,
                                 const std::string& precision) {
  const bool cpu_fp32 = device == "cpu" && precision == "fp32";
  if (kernels == "auto") {
    return cpu_fp32 && OneDnnUNetBuilt() ? TrunkKernels::kWinograd : TrunkKernels::kLibTorch;
  }
  if (kernels != "libtorch" && kernels != "onednn" && kernels != "winograd") {
    throw InputError("[train] kernels must be auto, libtorch, onednn or winograd, got '" +
                     kernels + "'");
  }
  const TrunkKernels k = ParseName<TrunkKernels>(kernels);
  if (k != TrunkKernels::kLibTorch) {
    if (!OneDnnUNetBuilt()) {
      throw InputError("[train] kernels = \"" + kernels +
                       "\" needs a keycld built with oneDNN (libdnnl-dev); use auto or libtorch");
    }
    if (!cpu_fp32) {
      throw InputError("[train] kernels = \"" + kernels + "\" runs on the CPU in fp32 only (device " +
                       device + ", precision " + precision + "); use auto or libtorch");
    }
  }
  return k;
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
