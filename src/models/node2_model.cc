#include "keycld/models/node2_model.h"

namespace keycld {

Node2ModelImpl::Node2ModelImpl(const ModelSpec& spec) : KeypointModelImpl(spec) {
  ode_ = register_module(
      "ode", SecondOrderOde(spec.num_keypoints, spec.action_dim, spec.hidden, spec.dense_init));
  dynamics_ = std::make_shared<FunctionDynamics>(
      [o = ode_](const torch::Tensor& x, const torch::Tensor& xdot,
                 const torch::Tensor& u) mutable { return o->forward(x, xdot, u); });
}

std::vector<std::shared_ptr<torch::nn::Module>> Node2ModelImpl::DynamicsModules() {
  return {ode_.ptr()};
}

}  // namespace keycld
