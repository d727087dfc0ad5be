// The NODE2 network, KeyCLD §9.
#include "keycld/model/neural_ode.h"

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "keycld/util/error.h"
#include "keycld/util/text.h"

namespace keycld {
SecondOrderOdeImpl::SecondOrderOdeImpl(int64_t num_keypoints, int64_t action_dim, int64_t hidden,
                                       DenseInit init)
    : num_keypoints_(num_keypoints), action_dim_(action_dim) {
  if (num_keypoints < 1 || action_dim < 1 || hidden < 1) {
    throw InputError(
        "SecondOrderOde: need K ≥ 1, A ≥ 1 and h ≥ 1, got K = " + std::to_string(num_keypoints) +
        ", A = " + std::to_string(action_dim) + ", h = " + std::to_string(hidden));
  }
  const int64_t width = 2 * hidden;
  mlp_ = register_module(
      "mlp", CeluMlp(4 * num_keypoints + action_dim, std::vector<int64_t>{width, width, width},
                     2 * num_keypoints, init));
}

torch::Tensor SecondOrderOdeImpl::forward(const torch::Tensor& x, const torch::Tensor& xdot,
                                          const torch::Tensor& u) {
  const int64_t n = 2 * num_keypoints_;
  if (!x.defined() || x.dim() != 2 || x.size(1) != n || !at::isFloatingType(x.scalar_type()) ||
      !xdot.defined() || xdot.sizes() != x.sizes()) {
    throw InputError("SecondOrderOde: x and ẋ must be floating [B, " + std::to_string(n) +
                     "], got " + ShapeText(x) + " and " + ShapeText(xdot));
  }
  const int64_t B = x.size(0);
  torch::Tensor action;
  if (!u.defined() || u.numel() == 0) {
    action = torch::zeros({B, action_dim_}, x.options());
  } else if (u.dim() == 1 && u.size(0) == action_dim_) {
    action = u.to(x.options()).unsqueeze(0).expand({B, action_dim_});
  } else if (u.dim() == 2 && u.size(0) == B && u.size(1) == action_dim_) {
    action = u.to(x.options());
  } else {
    throw InputError("SecondOrderOde: action " + ShapeText(u) + " for " + std::to_string(B) +
                     " states (expected [" + std::to_string(B) + ", " +
                     std::to_string(action_dim_) + "] or [" + std::to_string(action_dim_) + "])");
  }
  return mlp_->forward(torch::cat({x, xdot.to(x.options()), action}, 1));
}

}  // namespace keycld
