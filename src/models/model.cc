#include "keycld/models/model.h"

#include <fstream>

#include "keycld/models/registry.h"
#include "keycld/util/error.h"

namespace keycld {

int KeypointCount(EnvName env) {
  if (env == EnvName::kCustom) {
    throw InputError("KeypointCount: a custom system's keypoints come from its description");
  }
  return env == EnvName::kPendulum ? 1 : 2;
}

std::string ModelSpec::SystemName() const { return system.empty() ? EnvNameString(env) : system; }

HolonomicConstraints ModelSpec::Constraints() const {
  if (env == EnvName::kCustom) return HolonomicConstraints(num_keypoints, constraints);
  return HolonomicConstraints::ForEnvironment(env);
}

void ModelSpec::Validate() const {
  if (env == EnvName::kCustom) {
    if (num_keypoints < 1 || num_keypoints > 64) {
      throw InputError(SystemName() + ": the model spec has " + std::to_string(num_keypoints) +
                       " keypoints (expected 1 to 64)");
    }
    HolonomicConstraints(num_keypoints, constraints);  // throws for a term outside the state
    if (int(constraints.size()) >= 2 * num_keypoints) {
      throw InputError(SystemName() + ": " + std::to_string(constraints.size()) +
                       " constraints leave no degree of freedom to " +
                       std::to_string(num_keypoints) + " keypoint(s)");
    }
  } else {
    if (num_keypoints != KeypointCount(env)) {
      throw InputError(EnvNameString(env) + " has " + std::to_string(KeypointCount(env)) +
                       " keypoints, the model spec says " + std::to_string(num_keypoints));
    }
    if (!constraints.empty()) {
      throw InputError(EnvNameString(env) +
                       ": a built-in system's model spec lists no "
                       "constraints (they are the built-in ones)");
    }
  }
  if (action_dim < 1) throw InputError("action dimension must be ≥ 1");
  if (hidden < 8 || hidden % 8 != 0 || hidden < num_keypoints) {
    throw InputError("hidden width must be a positive multiple of 8, got " +
                     std::to_string(hidden));
  }
  if (image_size < 8 || image_size % 4 != 0) {
    throw InputError("image size must be a multiple of 4 (two 2x poolings in the U-Net), got " +
                     std::to_string(image_size));
  }
  if (!(sigma > 0) || !(dt > 0)) throw InputError("sigma and dt must be > 0");
  FindModelVariant(model);
}

Precision ParsePrecision(const std::string& name) { return ParseName<Precision>(name); }

std::string PrecisionName(Precision precision) { return NameOf(precision); }

bool HasNativeBf16(const torch::Device& device) {
  if (device.is_cuda()) return true;
  if (!device.is_cpu()) return false;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    line += ' ';
    return line.find(" avx512_bf16 ") != std::string::npos ||
           line.find(" amx_bf16 ") != std::string::npos;
  }
  return false;
}

ModelImpl::ModelImpl(const ModelSpec& spec) : spec_(spec) { spec_.Validate(); }

torch::Device ModelImpl::device() const { return parameters().front().device(); }

torch::Tensor ModelImpl::Acceleration(const torch::Tensor& x, const torch::Tensor& xdot,
                                      const torch::Tensor& u) {
  return dynamics().Acceleration(x, xdot, u);
}

torch::Tensor ModelImpl::ProjectVelocity(const torch::Tensor& x, const torch::Tensor& xdot) {
  return dynamics().ProjectVelocity(x, xdot);
}

Trajectory ModelImpl::Rollout(const torch::Tensor& x0, const torch::Tensor& xdot0,
                              const torch::Tensor& u, const std::vector<double>& times,
                              IntegratorMethod method, const IntegratorOptions& options) {
  return keycld::Rollout(dynamics().WithAction(u), x0, xdot0, times, method, options);
}

bool ModelImpl::HasEnergy() const { return FindModelVariant(spec_.model).has_energy; }

std::vector<RelabelledParameter> ModelImpl::KeypointRelabelling(const std::vector<int64_t>&) {
  throw InputError("model '" + spec_.model +
                   "' has no keypoint relabelling (only keycld and keycld-nc do)");
}

bool ModelImpl::StatesAreImageKeypoints() const {
  return FindModelVariant(spec_.model).image_keypoints;
}

EnergyModel& ModelImpl::RequireEnergy(const std::string& purpose) {
  if (EnergyModel* e = energy()) return *e;
  throw InputError(purpose + " needs a model with a learned Lagrangian of keypoints (keycld or " +
                   "keycld-nc: M, V and B); a " + spec_.model + " model is a " +
                   FindModelVariant(spec_.model).description);
}

torch::Tensor ModelImpl::MassScalars() { return RequireEnergy("a mass matrix").MassScalars(); }

torch::Tensor ModelImpl::MassDiagonal() { return MassMatrixDiagonal(MassScalars()); }

torch::Tensor ModelImpl::Potential(const torch::Tensor& x) {
  return RequireEnergy("a potential energy").Potential(x).reshape({x.size(0)});
}

torch::Tensor ModelImpl::PotentialGradient(const torch::Tensor& x) {
  return RequireEnergy("a potential energy").PotentialGradient(x);
}

torch::Tensor ModelImpl::InputMatrix(const torch::Tensor& x) {
  return RequireEnergy("an input matrix").InputMatrix(x);
}

std::vector<torch::Tensor> ModelImpl::DynamicsParameters() {
  std::vector<torch::Tensor> p;
  for (const auto& m : DynamicsModules()) {
    auto q = m->parameters();
    p.insert(p.end(), q.begin(), q.end());
  }
  return p;
}

void ModelImpl::SetPrecision(Precision precision) {
  if (precision == Precision::kBfloat16 && !HasNativeBf16(device())) {
    throw InputError(
        "--precision bf16 needs a CUDA device or a CPU with AVX512-BF16 or AMX "
        "(none in this CPU's flags); use fp32");
  }
  precision_ = precision;
}

DoublePrecisionDynamics::DoublePrecisionDynamics(Model model) : model_(std::move(model)) {
  for (const auto& m : model_->DynamicsModules()) m->to(torch::kFloat64);
}

DoublePrecisionDynamics::~DoublePrecisionDynamics() {
  for (const auto& m : model_->DynamicsModules()) m->to(torch::kFloat32);
}

}  // namespace keycld
