#include "keycld/models/lagrangian_model.h"

#include "keycld/dynamics/constraints.h"

namespace keycld {

LagrangianModelImpl::LagrangianModelImpl(const ModelSpec& spec, bool constrained)
    : KeypointModelImpl(spec) {
  const int K = spec.num_keypoints;
  potential_ = register_module("potential", PotentialEnergy(K, spec.hidden, spec.dense_init));
  input_matrix_ = register_module(
      "input_matrix", keycld::InputMatrix(K, spec.action_dim, spec.hidden, spec.dense_init));
  mass_ = register_module("mass", MassMatrix(K));
  // The energy model reads the modules through their holders (shared ownership).
  energy_ = std::make_shared<FunctionalEnergyModel>(FunctionalEnergyModel::Functions{
      .potential = [p = potential_](const torch::Tensor& x) mutable { return p->forward(x); },
      .potential_gradient =
          [p = potential_](const torch::Tensor& x) { return keycld::PotentialGradient(p, x); },
      .input_matrix = [b = input_matrix_](const torch::Tensor& x) mutable { return b->forward(x); },
      .mass_scalars = [m = mass_]() { return m->m(); },
  });
  dynamics_ = std::make_shared<LagrangianDynamics>(
      constrained ? spec.Constraints() : HolonomicConstraints::None(K), energy_);
}

std::vector<std::shared_ptr<torch::nn::Module>> LagrangianModelImpl::DynamicsModules() {
  return {potential_.ptr(), input_matrix_.ptr(), mass_.ptr()};
}

}  // namespace keycld
