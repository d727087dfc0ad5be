#include "keycld/train/keycld_model.h"

#include <fstream>
#include <string>

#include "keycld/dynamics/constraints.h"
#include "keycld/model/autocast.h"
#include "keycld/model/keypoints.h"
#include "keycld/util/error.h"

namespace keycld {

int KeypointCount(EnvName env) { return env == EnvName::kPendulum ? 1 : 2; }

void ModelSpec::Validate() const {
  if (num_keypoints != KeypointCount(env)) {
    throw InputError(EnvNameString(env) + " has " + std::to_string(KeypointCount(env)) +
                     " keypoints, the model spec says " + std::to_string(num_keypoints));
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
}

std::string DescribeModel(const ModelSpec& spec) {
  const char* what = spec.model == ModelKind::kKeycld     ? "constrained Lagrangian"
                     : spec.model == ModelKind::kKeycldNc ? "Lagrangian without constraints"
                                                          : "black-box second-order ODE";
  return ModelKindName(spec.model) + " (" + what + "), " + EnvNameString(spec.env) +
         ", h = " + std::to_string(spec.hidden) + ", " + std::to_string(spec.image_size) +
         " px, " + std::to_string(spec.action_dim) + " actuator(s)";
}

Precision ParsePrecision(const std::string& name) {
  if (name == "fp32") return Precision::kFloat32;
  if (name == "bf16") return Precision::kBfloat16;
  throw InputError("unknown precision '" + name + "' (expected fp32 or bf16)");
}

std::string PrecisionName(Precision precision) {
  return precision == Precision::kBfloat16 ? "bf16" : "fp32";
}

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


double TrainingStepFlops(const ModelSpec& spec, int64_t frames) {
  const auto estimator = UNetConvLayers(3, spec.hidden, spec.num_keypoints, spec.image_size);
  const auto renderer = UNetConvLayers(spec.hidden, spec.hidden, 3, spec.image_size);
  const double forward = ForwardFlops(estimator) + ForwardFlops(renderer);
  return double(frames) * (3.0 * forward - estimator.front().ForwardFlops());
}

KeycldModelImpl::KeycldModelImpl(const ModelSpec& spec) : spec_(spec) {
  spec_.Validate();
  const int K = spec.num_keypoints;
  // Estimator and renderer first: the same seed gives them the same weights in every variant.
  estimator = register_module("estimator", KeypointEstimator(K, spec.hidden));
  renderer = register_module(
      "renderer", Renderer(K, spec.hidden, spec.image_size, spec.image_size, spec.sigma));
  if (spec.model == ModelKind::kNode2) {
    ode = register_module("ode", SecondOrderOde(K, spec.action_dim, spec.hidden));
    dynamics_ = std::make_shared<FunctionDynamics>(
        [o = ode](const torch::Tensor& x, const torch::Tensor& xdot,
                  const torch::Tensor& u) mutable { return o->forward(x, xdot, u); });
    return;
  }
  potential = register_module("potential", PotentialEnergy(K, spec.hidden));
  input_matrix =
      register_module("input_matrix", keycld::InputMatrix(K, spec.action_dim, spec.hidden));
  mass = register_module("mass", MassMatrix(K));
  // The energy model reads the modules through their holders (shared ownership).
  auto energy = std::make_shared<FunctionalEnergyModel>(FunctionalEnergyModel::Functions{
      .potential = [p = potential](const torch::Tensor& x) mutable { return p->forward(x); },
      .potential_gradient = [p = potential](const torch::Tensor& x) {
        return keycld::PotentialGradient(p, x);
      },
      .input_matrix = [b = input_matrix](const torch::Tensor& x) mutable {
        return b->forward(x);
      },
      .mass_scalars = [m = mass]() { return m->m(); },
  });
  auto constraints = spec.model == ModelKind::kKeycld
                         ? HolonomicConstraints::ForEnvironment(spec.env)
                         : HolonomicConstraints::None(K);
  dynamics_ = std::make_shared<LagrangianDynamics>(std::move(constraints), energy);
}

torch::Device KeycldModelImpl::device() const {
  return estimator->parameters().front().device();
}

void KeycldModelImpl::RequireEnergy(const char* what) const {
  if (!HasEnergy()) {
    throw InputError(std::string("a ") + ModelKindName(spec_.model) + " model has no " + what +
                     ": its dynamics are a black-box network (only keycld and keycld-nc models " +
                     "learn M, V and B)");
  }
}

torch::Tensor KeycldModelImpl::MassDiagonal() {
  RequireEnergy("mass matrix");
  return mass->Diagonal();
}

torch::Tensor KeycldModelImpl::Potential(const torch::Tensor& x) {
  RequireEnergy("potential energy");
  return potential->forward(x);
}

torch::Tensor KeycldModelImpl::InputMatrix(const torch::Tensor& x) {
  RequireEnergy("input matrix");
  return input_matrix->forward(x);
}

void KeycldModelImpl::SetPrecision(Precision precision) {
  if (precision == Precision::kBfloat16 && !HasNativeBf16(device())) {
    throw InputError("--precision bf16 needs a CUDA device or a CPU with AVX512-BF16 or AMX "
                     "(none in this CPU's flags); use fp32");
  }
  precision_ = precision;
}

Encoding KeycldModelImpl::Encode(const torch::Tensor& images, const torch::Tensor& transform_ids) {
  if (precision_ == Precision::kFloat32) {
    auto r = estimator->Estimate(images, transform_ids);
    return {r.keypoints, r.probabilities};
  }
  torch::Tensor logits;
  {
    AutocastGuard autocast(images.device(), true, at::kBFloat16);
    logits = estimator->forward(images, transform_ids);
  }
  auto r = SpatialSoftmax(logits.to(torch::kFloat32));
  return {r.keypoints, r.probabilities};
}

torch::Tensor KeycldModelImpl::Render(const torch::Tensor& keypoints) {
  if (precision_ == Precision::kFloat32) return renderer->forward(keypoints);
  torch::Tensor images;
  {
    AutocastGuard autocast(keypoints.device(), true, at::kBFloat16);
    images = renderer->forward(keypoints);
  }
  return images.to(torch::kFloat32);
}

torch::Tensor KeycldModelImpl::PotentialGradient(const torch::Tensor& x) {
  RequireEnergy("potential energy");
  return keycld::PotentialGradient(potential, x);
}

torch::Tensor KeycldModelImpl::Acceleration(const torch::Tensor& x, const torch::Tensor& xdot,
                                            const torch::Tensor& u) {
  return dynamics_->Acceleration(x, xdot, u);
}

torch::Tensor KeycldModelImpl::ProjectVelocity(const torch::Tensor& x, const torch::Tensor& xdot) {
  return dynamics_->ProjectVelocity(x, xdot);
}

Trajectory KeycldModelImpl::Rollout(const torch::Tensor& x0, const torch::Tensor& xdot0,
                                    const torch::Tensor& u, const std::vector<double>& times,
                                    IntegratorMethod method, const IntegratorOptions& options) {
  return keycld::Rollout(dynamics_->WithAction(u), x0, xdot0, times, method, options);
}

std::vector<torch::Tensor> KeycldModelImpl::PerceptionParameters() {
  auto p = estimator->parameters();
  auto r = renderer->parameters();
  p.insert(p.end(), r.begin(), r.end());
  return p;
}

std::vector<std::shared_ptr<torch::nn::Module>> KeycldModelImpl::DynamicsModules() {
  if (spec_.model == ModelKind::kNode2) return {ode.ptr()};
  return {potential.ptr(), input_matrix.ptr(), mass.ptr()};
}

std::vector<torch::Tensor> KeycldModelImpl::DynamicsParameters() {
  std::vector<torch::Tensor> p;
  for (const auto& m : DynamicsModules()) {
    auto q = m->parameters();
    p.insert(p.end(), q.begin(), q.end());
  }
  return p;
}

DoublePrecisionDynamics::DoublePrecisionDynamics(KeycldModel model) : model_(std::move(model)) {
  for (const auto& m : model_->DynamicsModules()) m->to(torch::kFloat64);
}

DoublePrecisionDynamics::~DoublePrecisionDynamics() {
  for (const auto& m : model_->DynamicsModules()) m->to(torch::kFloat32);
}

}  // namespace keycld
