// The learned mechanical terms of the constrained Lagrangian (KeyCLD §3, §5;
// docs/method.md): the constant mass matrix M, the potential energy V(x) and the input
// matrix B(x), as functions of the keypoint state x = (x₁, y₁, …, x_K, y_K) [..., 2K] in
// normalized image coordinates (KeyCLD §2).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>
#include <vector>

namespace keycld {

/// Standard deviation of the initial dense weights of V and B (KeyCLD §3); biases start at 0.
inline constexpr double kDenseInitStd = 0.01;

/// How the dense weights of the dynamics networks (V, B; NODE2's g) start; biases start at 0.
/// - kPaper: N(0, kDenseInitStd²), KeyCLD §3.
/// - kFanIn: U(−1/√fan_in, 1/√fan_in), the default of a LibTorch / PyTorch Linear layer. With
///   N(0, 0.01²) the three layers of a network multiply to a gain near 1e-6, and the network
///   learns its input-output modes one after another (a deep linear network from a small
///   start): the pendulum's B(x) ∝ (y, −x) needs two, and the second stayed unlearned for a whole
///   cpu-quick training (docs/method.md, Departures).
enum class DenseInit { kPaper, kFanIn };
/// "paper" | "fan-in" → DenseInit; InputError naming both for anything else.
DenseInit ParseDenseInit(const std::string& name);

/// Multilayer perceptron in → hidden[0] → … → hidden[n−1] → out with CELU (α = 1) after every
/// hidden layer and a linear output; weights initialised as `init` says, biases 0.
/// forward: [..., in] → [..., out]. Submodules: "linear1" … "linear{n+1}".
/// Throws InputError for non-positive widths.
class CeluMlpImpl : public torch::nn::Module {
 public:
  CeluMlpImpl(int64_t in_features, std::vector<int64_t> hidden, int64_t out_features,
              DenseInit init = DenseInit::kPaper);
  torch::Tensor forward(const torch::Tensor& x);
  /// ∂(Σ outputs)/∂x [..., in] at x [..., in], written out by the chain rule (no autograd
  /// pass): Wᵢᵀ(celu'(zᵢ) ⊙ …) with celu'(z) = exp(min(z, 0)). Built of differentiable
  /// operations, so under gradient mode the result carries its graph to the weights and to x
  /// (the second derivatives the dynamics loss needs) without a double-backward pass.
  torch::Tensor InputGradient(const torch::Tensor& x);

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }

 private:
  int64_t in_features_, out_features_;
  std::vector<torch::nn::Linear> layers_;
};
TORCH_MODULE(CeluMlp);

/// Potential energy V(x) (KeyCLD §3): CeluMlp 2K → h → h → 1. Submodule "mlp".
/// forward: x [..., 2K] → V [...] (one scalar per state, arbitrary energy units per unit
/// mass scale). Throws InputError for K < 1, h < 1 or a state of the wrong width.
class PotentialEnergyImpl : public torch::nn::Module {
 public:
  PotentialEnergyImpl(int64_t num_keypoints, int64_t hidden = 32,
                      DenseInit init = DenseInit::kPaper);
  torch::Tensor forward(const torch::Tensor& x);

  int64_t num_keypoints() const { return num_keypoints_; }
  CeluMlp& mlp() { return mlp_; }

 private:
  int64_t num_keypoints_;
  CeluMlp mlp_{nullptr};
};
TORCH_MODULE(PotentialEnergy);

/// ∇V(x) [..., 2K] of `potential` at states x [..., 2K], by the chain rule through the MLP
/// (CeluMlpImpl::InputGradient; each state's energy depends only on that state). When
/// gradient mode is on, the result keeps its graph, so a loss on it trains V's weights and,
/// if x requires grad, flows back into x (and the estimator). Under torch::NoGradGuard it
/// returns a tensor without history. Equal to autograd's gradient (tests/mechanics_test.cc),
/// at about a third of its cost in the dynamics loss (docs/benchmarks.md).
torch::Tensor PotentialGradient(const PotentialEnergy& potential, const torch::Tensor& x);

/// Input matrix B(x) (KeyCLD §3): CeluMlp 2K → h → h → 2K·A reshaped to [2K, A], so that the
/// generalised force of action u [..., A] is B(x)·u. Submodule "mlp".
/// forward: x [..., 2K] → B [..., 2K, A]. Throws InputError for K < 1, A < 1, h < 1 or a
/// state of the wrong width.
class InputMatrixImpl : public torch::nn::Module {
 public:
  InputMatrixImpl(int64_t num_keypoints, int64_t action_dim, int64_t hidden = 32,
                  DenseInit init = DenseInit::kPaper);
  torch::Tensor forward(const torch::Tensor& x);

  int64_t num_keypoints() const { return num_keypoints_; }
  int64_t action_dim() const { return action_dim_; }

 private:
  int64_t num_keypoints_, action_dim_;
  CeluMlp mlp_{nullptr};
};
TORCH_MODULE(InputMatrix);

/// Constant diagonal mass matrix (KeyCLD §3): M = diag(m₁², m₁², m₂², m₂², …, m_K², m_K²),
/// one learned scalar m_k per keypoint (parameter "m" [K], initialised 1; squared so that the
/// masses stay positive). Throws InputError for K < 1.
class MassMatrixImpl : public torch::nn::Module {
 public:
  explicit MassMatrixImpl(int64_t num_keypoints);

  /// The point masses m_k² [K].
  torch::Tensor Masses() const;
  /// The diagonal of M [2K] (state ordering x₁, y₁, …).
  torch::Tensor Diagonal() const;
  /// The diagonal of M⁻¹ [2K].
  torch::Tensor InverseDiagonal() const;
  /// Same as Diagonal().
  torch::Tensor forward() const { return Diagonal(); }

  const torch::Tensor& m() const { return m_; }
  int64_t num_keypoints() const { return num_keypoints_; }

 private:
  int64_t num_keypoints_;
  torch::Tensor m_;
};
TORCH_MODULE(MassMatrix);

}  // namespace keycld
