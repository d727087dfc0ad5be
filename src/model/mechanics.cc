// Mass matrix, potential energy and input matrix, KeyCLD §3.
#include "keycld/model/mechanics.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>

#include <cmath>
#include <string>
#include <utility>

#include "keycld/util/error.h"

namespace keycld {
namespace {

void CheckState(const torch::Tensor& x, int64_t num_keypoints, const char* who) {
  if (!x.defined() || x.dim() < 1 || x.size(-1) != 2 * num_keypoints ||
      !at::isFloatingType(x.scalar_type())) {
    throw InputError(std::string(who) + ": state must be floating [..., 2K] with 2K = " +
                     std::to_string(2 * num_keypoints));
  }
}

}  // namespace

DenseInit ParseDenseInit(const std::string& name) {
  if (name == "paper") return DenseInit::kPaper;
  if (name == "fan-in") return DenseInit::kFanIn;
  throw InputError("dense_init must be paper (N(0, 0.01²)) or fan-in (U(±1/√fan_in)), got '" +
                   name + "'");
}

CeluMlpImpl::CeluMlpImpl(int64_t in_features, std::vector<int64_t> hidden, int64_t out_features,
                         DenseInit init)
    : in_features_(in_features), out_features_(out_features) {
  bool ok = in_features >= 1 && out_features >= 1;
  for (int64_t w : hidden) ok = ok && w >= 1;
  if (!ok) {
    throw InputError("CeluMlp: layer widths must be positive, got in = " +
                     std::to_string(in_features) + ", out = " + std::to_string(out_features));
  }
  hidden.push_back(out_features);
  int64_t width = in_features;
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < hidden.size(); ++i) {
    auto layer =
        register_module("linear" + std::to_string(i + 1), torch::nn::Linear(width, hidden[i]));
    if (init == DenseInit::kFanIn) {
      const double bound = 1.0 / std::sqrt(double(width));
      torch::nn::init::uniform_(layer->weight, -bound, bound);
    } else {
      torch::nn::init::normal_(layer->weight, 0.0, kDenseInitStd);
    }
    torch::nn::init::zeros_(layer->bias);
    layers_.push_back(layer);
    width = hidden[i];
  }
}

torch::Tensor CeluMlpImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    y = layers_[i]->forward(y);
    if (i + 1 < layers_.size()) y = at::celu(y);
  }
  return y;
}

torch::Tensor CeluMlpImpl::InputGradient(const torch::Tensor& x) {
  // Forward pass keeping the pre-activations z_i of the hidden layers.
  std::vector<torch::Tensor> z;
  torch::Tensor y = x;
  for (size_t i = 0; i + 1 < layers_.size(); ++i) {
    z.push_back(layers_[i]->forward(y));
    y = at::celu(z.back());
  }
  // Backward by hand: g = Σ_out W_last, then g ← (g ⊙ celu'(z_i)) W_i down to the input.
  torch::Tensor g = layers_.back()->weight.sum(0);  // [h_last] (or [in] without hidden layers)
  for (size_t i = z.size(); i-- > 0;) {
    g = at::matmul(g * z[i].clamp_max(0).exp(), layers_[i]->weight);
  }
  return z.empty() ? g.expand_as(x) : g;
}

PotentialEnergyImpl::PotentialEnergyImpl(int64_t num_keypoints, int64_t hidden, DenseInit init)
    : num_keypoints_(num_keypoints) {
  if (num_keypoints < 1 || hidden < 1) {
    throw InputError("PotentialEnergy: need K ≥ 1 and h ≥ 1, got K = " +
                     std::to_string(num_keypoints) + ", h = " + std::to_string(hidden));
  }
  mlp_ = register_module("mlp",
                         CeluMlp(2 * num_keypoints, std::vector<int64_t>{hidden, hidden}, 1, init));
}

torch::Tensor PotentialEnergyImpl::forward(const torch::Tensor& x) {
  CheckState(x, num_keypoints_, "PotentialEnergy");
  return mlp_->forward(x).squeeze(-1);
}

torch::Tensor PotentialGradient(const PotentialEnergy& potential, const torch::Tensor& x) {
  CheckState(x, potential->num_keypoints(), "PotentialGradient");
  return potential.ptr()->mlp()->InputGradient(x);
}

InputMatrixImpl::InputMatrixImpl(int64_t num_keypoints, int64_t action_dim, int64_t hidden,
                                 DenseInit init)
    : num_keypoints_(num_keypoints), action_dim_(action_dim) {
  if (num_keypoints < 1 || action_dim < 1 || hidden < 1) {
    throw InputError(
        "InputMatrix: need K ≥ 1, A ≥ 1 and h ≥ 1, got K = " + std::to_string(num_keypoints) +
        ", A = " + std::to_string(action_dim) + ", h = " + std::to_string(hidden));
  }
  mlp_ = register_module("mlp", CeluMlp(2 * num_keypoints, std::vector<int64_t>{hidden, hidden},
                                        2 * num_keypoints * action_dim, init));
}

torch::Tensor InputMatrixImpl::forward(const torch::Tensor& x) {
  CheckState(x, num_keypoints_, "InputMatrix");
  torch::Tensor flat = mlp_->forward(x);  // [..., 2K·A], row-major over (2K, A)
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 1);
  shape.push_back(2 * num_keypoints_);
  shape.push_back(action_dim_);
  return flat.reshape(shape);
}

MassMatrixImpl::MassMatrixImpl(int64_t num_keypoints) : num_keypoints_(num_keypoints) {
  if (num_keypoints < 1) {
    throw InputError("MassMatrix: need K ≥ 1, got K = " + std::to_string(num_keypoints));
  }
  m_ = register_parameter("m", at::ones({num_keypoints}));
}

torch::Tensor MassMatrixImpl::Masses() const { return m_.square(); }

torch::Tensor MassMatrixImpl::Diagonal() const { return Masses().repeat_interleave(2); }

torch::Tensor MassMatrixImpl::InverseDiagonal() const { return Diagonal().reciprocal(); }

}  // namespace keycld
