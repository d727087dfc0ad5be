#include "keycld/control/control_model.h"

#include "keycld/data/dataset.h"
#include "keycld/train/config.h"
#include "keycld/util/error.h"

namespace keycld {

namespace fs = std::filesystem;

namespace {
// Energy shaping needs V, B and M (docs/method.md §10); NODE2 learns none of them.
Model RequireEnergy(Model model) {
  if (!model) throw InputError("energy shaping needs a loaded model");
  model->RequireEnergy("energy shaping (a potential, input matrix and mass matrix)");
  return model;
}
}  // namespace

LearnedControlModel::LearnedControlModel(Model model)
    : model_(RequireEnergy(model)),
      device_(model_->MassScalars().device()),
      dtype_(model_->MassScalars().scalar_type()) {}

torch::Tensor LearnedControlModel::ToModel(const torch::Tensor& x) const {
  return x.to(device_, dtype_);
}

torch::Tensor LearnedControlModel::EstimateKeypoints(std::span<const uint8_t> rgb) {
  const int64_t s = image_size();
  if (int64_t(rgb.size()) != s * s * 3) {
    throw InputError("the model reads " + std::to_string(s) + "x" + std::to_string(s) +
                     " RGB images, got a buffer of " + std::to_string(rgb.size()) + " bytes");
  }
  c10::InferenceMode inference;
  auto image = torch::from_blob(const_cast<uint8_t*>(rgb.data()), {1, s, s, 3}, torch::kUInt8)
                   .to(device_)
                   .permute({0, 3, 1, 2})
                   .to(dtype_)
                   .div_(255.0);
  auto keypoints = model_->Encode(image).keypoints;  // [1, K, 2]
  return keypoints.reshape({1, 2 * num_keypoints()}).to(torch::kCPU, torch::kFloat64);
}

torch::Tensor LearnedControlModel::Potential(const torch::Tensor& x) {
  c10::InferenceMode inference;
  return model_->Potential(ToModel(x)).reshape({x.size(0)}).to(torch::kCPU, torch::kFloat64);
}

torch::Tensor LearnedControlModel::PotentialGradient(const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  return model_->PotentialGradient(ToModel(x)).to(torch::kCPU, torch::kFloat64);
}

torch::Tensor LearnedControlModel::InputMatrix(const torch::Tensor& x) {
  c10::InferenceMode inference;
  return model_->InputMatrix(ToModel(x)).to(torch::kCPU, torch::kFloat64);
}

torch::Tensor LearnedControlModel::MassDiagonal() {
  torch::NoGradGuard no_grad;
  return model_->MassDiagonal().to(torch::kCPU, torch::kFloat64);
}

torch::Tensor LearnedControlModel::ProjectTangent(const torch::Tensor& x, const torch::Tensor& v) {
  // In float64 on the CPU: the constraints are analytic (no parameters), and the projection of a
  // force must not lose the small tangential part of a large normal one to float32 rounding.
  torch::NoGradGuard no_grad;
  return model_->ProjectVelocity(x.to(torch::kCPU, torch::kFloat64),
                                 v.to(torch::kCPU, torch::kFloat64));
}

void CheckFullyActuated(const ModelSpec& spec, const std::string& control_mode,
                        const Environment& env) {
  if (spec.env != env.name()) {
    throw InputError("the model was trained on " + EnvNameString(spec.env) +
                     ", not on the simulated " + env.system_name());
  }
  if (spec.action_dim != env.nu()) {
    throw InputError("the model's input matrix has " + std::to_string(spec.action_dim) +
                     " column(s) but " + env.system_name() + " has " + std::to_string(env.nu()) +
                     " actuator(s): energy shaping needs every " +
                     "actuator modelled (control mode full)");
  }
  if (env.nu() < env.nq()) {
    throw InputError(env.system_name() + " has " + std::to_string(env.nu()) + " actuator(s) for " +
                     std::to_string(env.nq()) + " joints: energy shaping (docs/method.md §10) " +
                     "needs a fully actuated system (an actuator per joint)");
  }
  if (control_mode.empty()) {
    throw InputError(
        "cannot tell the model's control mode (no config.toml in its run folder): energy "
        "shaping needs a model trained on control mode 'full' data");
  }
  if (control_mode != "full") {
    throw InputError(
        "the model was trained on control mode '" + control_mode +
        "' data: its input matrix was not learned for every actuator, and energy "
        "shaping (docs/method.md §10) needs a fully actuated model (control mode 'full')");
  }
}

std::string RunControlMode(const fs::path& file_or_run) {
  fs::path run = fs::is_directory(file_or_run) ? file_or_run : file_or_run.parent_path();
  if (!fs::exists(run / "config.toml") && run.filename() == "checkpoints") {
    run = run.parent_path();
  }
  const fs::path config_file = run / "config.toml";
  if (!fs::exists(config_file)) return "";
  TrainConfig config = TrainConfig::FromToml(config_file);
  // The data set records its control mode itself; `keycld train --data FILE` without a preset
  // leaves the config's [data] control at its default, so trust the data set when it is found.
  if (!config.data.empty() && fs::exists(config.data)) {
    try {
      return ControlModeString(Dataset::Open(config.data).info().control);
    } catch (const Error&) {
      // An unreadable data set: fall back to the config.
    }
  }
  return config.control;
}

}  // namespace keycld
