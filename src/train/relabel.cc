#include "keycld/train/relabel.h"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <string>
#include <type_traits>

#include "keycld/util/error.h"

namespace keycld {

double ConstraintSpread(const HolonomicConstraints& constraints, const torch::Tensor& x) {
  if (!x.defined() || x.dim() != 2 || x.size(0) < 2 || !at::isFloatingType(x.scalar_type())) {
    throw InputError("ConstraintSpread: states must be floating [N, 2K] with N ≥ 2");
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor phi = constraints.Phi(x.to(torch::kFloat64));  // [N, C]
  if (phi.size(1) == 0) return 0.0;
  return phi.var(0, /*unbiased=*/false).sum().item<double>();
}

KeypointOrderChoice ChooseKeypointOrder(const HolonomicConstraints& constraints,
                                        const torch::Tensor& keypoints, double ratio) {
  if (!keypoints.defined() || keypoints.dim() != 3 || keypoints.size(2) != 2 ||
      keypoints.size(0) < 2) {
    throw InputError("ChooseKeypointOrder: keypoints must be [N, K, 2] with N ≥ 2");
  }
  if (!(ratio > 0 && ratio <= 1)) {
    throw InputError("ChooseKeypointOrder: ratio must be in (0, 1], got " + std::to_string(ratio));
  }
  const int64_t N = keypoints.size(0), K = keypoints.size(1);
  if (K > 6) {
    throw InputError("the keypoint order is chosen among all K! orders, for K ≤ 6 keypoints; "
                     "this model has " + std::to_string(K));
  }
  std::vector<int64_t> order(static_cast<size_t>(K));
  std::iota(order.begin(), order.end(), 0);
  KeypointOrderChoice choice;
  bool first = true;
  do {
    torch::Tensor index = torch::tensor(order, torch::kInt64).to(keypoints.device());
    const double spread =
        ConstraintSpread(constraints, keypoints.index_select(1, index).reshape({N, 2 * K}));
    if (first) choice.current = spread;  // the identity comes first
    if (first || spread < choice.best) {
      choice.best = spread;
      choice.order = order;
    }
    first = false;
  } while (std::next_permutation(order.begin(), order.end()));
  bool identity = true;
  for (int64_t k = 0; k < K; ++k) identity = identity && choice.order[size_t(k)] == k;
  choice.relabel = !identity && choice.best < ratio * choice.current;
  return choice;
}

std::string KeypointOrderString(const std::vector<int64_t>& order) {
  std::string out;
  for (int64_t k : order) out += (out.empty() ? "" : ", ") + std::to_string(k);
  return out;
}

namespace {

// Adam's state of parameter p: LibTorch 1.13 keys it by the TensorImpl's address printed as a
// string (what c10::guts::to_string gives), LibTorch 2 by the address itself.
template <typename StateMap>
typename StateMap::iterator FindAdamState(StateMap& states, const torch::Tensor& p) {
  void* impl = p.unsafeGetTensorImpl();
  if constexpr (std::is_same_v<typename StateMap::key_type, std::string>) {
    std::ostringstream key;
    key << impl;
    return states.find(key.str());
  } else {
    return states.find(impl);
  }
}

}  // namespace

void RelabelKeypoints(Model& model, const std::vector<int64_t>& order, torch::optim::Adam* adam) {
  const std::vector<RelabelledParameter> changes = model->KeypointRelabelling(order);
  torch::NoGradGuard no_grad;
  for (const RelabelledParameter& c : changes) {
    torch::Tensor p = c.parameter;
    p.copy_(c.relabel(p.clone()));
    if (p.grad().defined()) p.mutable_grad().copy_(c.relabel(p.grad().clone()));
    if (adam == nullptr) continue;
    auto& states = adam->state();
    auto it = FindAdamState(states, p);
    if (it == states.end()) continue;  // no step taken yet
    auto& s = static_cast<torch::optim::AdamParamState&>(*it->second);
    s.exp_avg(c.relabel(s.exp_avg()).contiguous());
    s.exp_avg_sq(c.relabel(s.exp_avg_sq()).contiguous());
    if (s.max_exp_avg_sq().defined()) s.max_exp_avg_sq(c.relabel(s.max_exp_avg_sq()).contiguous());
  }
}

}  // namespace keycld
