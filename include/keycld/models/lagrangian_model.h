// KeyCLD and its unconstrained ablation KeyCLD-NC (docs/method.md §3, §5, §9): keypoints, a
// constant diagonal mass matrix, a learned potential energy V(x) and input matrix B(x);
//   keycld     the constrained Euler–Lagrange equations with the system's holonomic
//              constraints, ẍ = M⁻¹ (f − Dᵀ λ), f = −∇V + B u;
//   keycld-nc  the same Lagrangian without constraints, ẍ = M⁻¹ f.
// Checkpoint names of the modules: "potential", "input_matrix", "mass".
#pragma once

#include "keycld/model/mechanics.h"
#include "keycld/models/keypoint_model.h"

namespace keycld {

class LagrangianModelImpl : public KeypointModelImpl {
 public:
  /// `constrained`: the system's constraints (keycld) or none (keycld-nc).
  LagrangianModelImpl(const ModelSpec& spec, bool constrained);

  Dynamics& dynamics() override { return *dynamics_; }
  EnergyModel* energy() override { return energy_.get(); }
  std::vector<std::shared_ptr<torch::nn::Module>> DynamicsModules() override;
  /// The perception's share, the mass scalars m_k, the input columns of V's and B's first
  /// layers and the rows of B's last layer (the generalised force of keypoint k).
  std::vector<RelabelledParameter> KeypointRelabelling(const std::vector<int64_t>& order) override;

 private:
  PotentialEnergy potential_{nullptr};
  keycld::InputMatrix input_matrix_{nullptr};
  MassMatrix mass_{nullptr};
  std::shared_ptr<EnergyModel> energy_;
  std::shared_ptr<LagrangianDynamics> dynamics_;
};

}  // namespace keycld
