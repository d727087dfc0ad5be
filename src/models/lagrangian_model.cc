#include "keycld/models/lagrangian_model.h"

#include "keycld/dynamics/constraints.h"
#include "keycld/util/error.h"

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

std::vector<RelabelledParameter> LagrangianModelImpl::KeypointRelabelling(
    const std::vector<int64_t>& order) {
  std::vector<RelabelledParameter> out = PerceptionRelabelling(order);
  const auto params = named_parameters();
  auto find = [&](const std::string& name) -> torch::Tensor {
    const torch::Tensor* p = params.find(name);
    if (p == nullptr) throw InputError("keypoint relabelling: the model has no " + name);
    return *p;
  };
  // V and B read x [2K] through their first layer's columns (weight [h, 2K]); B's last layer
  // gives [2K · A] rows, A per state entry (mechanics.h).
  const std::vector<int64_t> state = StateIndexOfOrder(order);
  out.push_back({mass_->m(), TakeSlices(0, order)});
  out.push_back({find("potential.mlp.linear1.weight"), TakeSlices(1, state)});
  out.push_back({find("input_matrix.mlp.linear1.weight"), TakeSlices(1, state)});
  const int64_t A = input_matrix_->action_dim();
  const std::vector<int64_t> rows = StateIndexOfOrder(order, A);
  out.push_back({find("input_matrix.mlp.linear3.weight"), TakeSlices(0, rows)});
  out.push_back({find("input_matrix.mlp.linear3.bias"), TakeSlices(0, rows)});
  return out;
}

}  // namespace keycld
