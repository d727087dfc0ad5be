#include "keycld/train/keycld_model.h"

#include "keycld/dynamics/constraints.h"
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

KeycldModelImpl::KeycldModelImpl(const ModelSpec& spec) : spec_(spec) {
  spec_.Validate();
  const int K = spec.num_keypoints;
  estimator = register_module("estimator", KeypointEstimator(K, spec.hidden));
  renderer = register_module(
      "renderer", Renderer(K, spec.hidden, spec.image_size, spec.image_size, spec.sigma));
  potential = register_module("potential", PotentialEnergy(K, spec.hidden));
  input_matrix = register_module("input_matrix", keycld::InputMatrix(K, spec.action_dim, spec.hidden));
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
  auto constraints = spec.dynamics == DynamicsKind::kConstrained
                         ? HolonomicConstraints::ForEnvironment(spec.env)
                         : HolonomicConstraints::None(K);
  dynamics_ = std::make_shared<LagrangianDynamics>(std::move(constraints), energy);
}

Encoding KeycldModelImpl::Encode(const torch::Tensor& images, const torch::Tensor& transform_ids) {
  auto r = estimator->Estimate(images, transform_ids);
  return {r.keypoints, r.probabilities};
}

torch::Tensor KeycldModelImpl::Render(const torch::Tensor& keypoints) {
  return renderer->forward(keypoints);
}

torch::Tensor KeycldModelImpl::PotentialGradient(const torch::Tensor& x) {
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

std::vector<torch::Tensor> KeycldModelImpl::DynamicsParameters() {
  std::vector<torch::Tensor> p;
  for (auto* m : std::initializer_list<torch::nn::Module*>{potential.get(), input_matrix.get(),
                                                           mass.get()}) {
    auto q = m->parameters();
    p.insert(p.end(), q.begin(), q.end());
  }
  return p;
}

DoublePrecisionDynamics::DoublePrecisionDynamics(KeycldModel model) : model_(std::move(model)) {
  model_->potential->to(torch::kFloat64);
  model_->input_matrix->to(torch::kFloat64);
  model_->mass->to(torch::kFloat64);
}

DoublePrecisionDynamics::~DoublePrecisionDynamics() {
  model_->potential->to(torch::kFloat32);
  model_->input_matrix->to(torch::kFloat32);
  model_->mass->to(torch::kFloat32);
}

}  // namespace keycld
