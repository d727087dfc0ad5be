// NODE2, the black-box baseline of the paper (docs/method.md §9): KeyCLD's keypoint estimator
// and renderer with a second-order neural ODE ẍ = g(x, ẋ, u) (SecondOrderOde, model/neural_ode.h)
// instead of a Lagrangian: no mass matrix, energy or constraints. Checkpoint name "ode".
#pragma once

#include "keycld/model/neural_ode.h"
#include "keycld/models/keypoint_model.h"

namespace keycld {

class Node2ModelImpl : public KeypointModelImpl {
 public:
  explicit Node2ModelImpl(const ModelSpec& spec);

  Dynamics& dynamics() override { return *dynamics_; }
  std::vector<std::shared_ptr<torch::nn::Module>> DynamicsModules() override;

 private:
  SecondOrderOde ode_{nullptr};
  std::shared_ptr<FunctionDynamics> dynamics_;
};

}  // namespace keycld
