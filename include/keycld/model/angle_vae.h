// The parts of the Lagrangian VAE baselines, Lag-VAE and Lag-caVAE (docs/baselines.md; Zhong &
// Leonard 2020, docs/method.md §9): a posterior over an angle on the circle S¹, the
// coordinate-aware placement of a sprite, and the Lagrangian dynamics in a generalised angle
// coordinate q. Angles are carried as (cos q, sin q), the encoder's normalised mean.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "keycld/dynamics/dynamics.h"
#include "keycld/dynamics/integrators.h"

namespace keycld {

/// An action u [A], [B, A], [1, A] or undefined/empty (no action: zeros) as [B, A] in the dtype
/// of `options`; InputError for other shapes.
torch::Tensor BatchAction(const torch::Tensor& u, int64_t B, int64_t A,
                          const torch::TensorOptions& options);

/// KL(vMF(μ, κ) ‖ uniform on S¹) = κ·I₁(κ)/I₀(κ) − log I₀(κ), for concentrations κ > 0 (any
/// shape; element-wise, differentiable; exponentially scaled Bessel functions keep it finite for
/// large κ). Source: the von Mises–Fisher density exp(κ μᵀz) / (2π I₀(κ)) on S¹.
torch::Tensor VonMisesFisherKl(const torch::Tensor& kappa);

/// Samples of vMF(μ, κ) on S¹: mean directions μ [B, 2] (unit rows), concentrations κ [B] > 0
/// → [B, 2] unit rows. Wood's rejection sampler (1994) for w = μᵀz, with the proposal's draws
/// taken from `generator` (CPU) and w a differentiable function of κ (the reparameterisation of
/// the hyperspherical VAE); z = w·μ + s·√(1 − w²)·μ⊥ with a random sign s. InputError for bad
/// shapes or κ ≤ 0.
torch::Tensor SampleVonMisesFisher(const torch::Tensor& mean, const torch::Tensor& kappa,
                                   torch::Generator generator);

/// E[μᵀz] under vMF(μ, κ) on S¹: I₁(κ)/I₀(κ) (element-wise).
torch::Tensor VonMisesFisherMeanCosine(const torch::Tensor& kappa);

/// Places a sprite by the rotation q about a pivot (Lag-caVAE's coordinate-aware decoder):
/// output(p) = sprite(R(q)·(p − pivot)), R(q) = [[cos q, −sin q], [sin q, cos q]], in the
/// normalised coordinates of affine_grid (x right, y down, corners at ±1, align_corners false);
/// bilinear, zero outside the sprite. sprite [1 or B, C, H, W], cos_sin [B, 2], pivot [2] →
/// [B, C, H, W]. A feature at sprite point s lands at pivot + R(q)ᵀ·s. InputError for bad
/// shapes.
torch::Tensor PlaceSprite(const torch::Tensor& sprite, const torch::Tensor& cos_sin,
                          const torch::Tensor& pivot);

/// The published encoder and decoder MLP: in → width → width → out with ELU (the VAE baselines'
/// encoders of frames and decoders of images and sprites).
torch::nn::Sequential EluMlp(int64_t in, int64_t width, int64_t out);

/// The first-order state of the VAE baselines' training windows: a position-like tensor (the
/// coordinates' pairs) and the generalised velocities, and their time derivative.
using WindowDerivative = std::function<std::pair<torch::Tensor, torch::Tensor>(
    const torch::Tensor& position, const torch::Tensor& velocity)>;

/// The baselines' training integration (published: explicit Euler): from (position, velocity)
/// over `intervals` frame intervals of dt, each of `substeps` steps of euler or rk4 → the
/// positions at the intervals' ends, the start included (intervals + 1 tensors). InputError for
/// another method or substeps < 1 (naming `model`).
std::vector<torch::Tensor> IntegrateWindows(torch::Tensor position, torch::Tensor velocity,
                                            const WindowDerivative& f, int64_t intervals,
                                            double dt, IntegratorMethod method, int substeps,
                                            const std::string& model);

/// The number of training windows W = N − P of a sequence of N frames, for windows of P + 1
/// frames; InputError (naming `model`) unless P ≥ 1 and N ≥ P + 1.
int64_t WindowCount(const torch::Tensor& images, int64_t P, const std::string& model);

/// The targets of windowed frames: images [N, 3, H, W] → the frames t + j of window t, step j,
/// in the order [(P + 1)·W, 3, H, W] (step-major), for W windows of P + 1 frames.
torch::Tensor WindowTargets(const torch::Tensor& images, int64_t P, int64_t W);

/// The published small MLP: in → width → width → out with tanh, orthogonal initial weights.
class TanhMlpImpl : public torch::nn::Module {
 public:
  TanhMlpImpl(int64_t in, int64_t width, int64_t out, bool tanh_output = false);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Linear l1_{nullptr}, l2_{nullptr}, l3_{nullptr};
  bool tanh_output_;
};
TORCH_MODULE(TanhMlp);

/// The Lagrangian of one angle coordinate, L = ½ M(q) q̇² − V(q), with networks of (cos q, sin q)
/// (width 50, tanh, as published): the mass M(q) = m(q)² + 0.1 > 0 (m from a tanh output: the
/// published positive-definite network for one coordinate), V(q) and the input gain g(q) [A].
class AngleLagrangianImpl : public torch::nn::Module {
 public:
  AngleLagrangianImpl(int64_t action_dim, int64_t width = 50);
  /// M(q) [B] of cos_sin [B, 2].
  torch::Tensor Mass(const torch::Tensor& cos_sin);
  /// V(q) [B].
  torch::Tensor Potential(const torch::Tensor& cos_sin);
  /// The Euler–Lagrange acceleration q̈ = (g(q)·u − ∂V/∂q − ½ q̇² ∂M/∂q) / M(q): cos_sin [B, 2],
  /// q̇ [B], u [A], [B, A] or undefined → [B]. ∂/∂q = −sin q ∂/∂cos q + cos q ∂/∂sin q by
  /// autograd (with the graph kept while gradients are recorded, for training).
  torch::Tensor AngleAcceleration(const torch::Tensor& cos_sin, const torch::Tensor& qdot,
                                  const torch::Tensor& u);

  TanhMlp mass{nullptr}, potential{nullptr}, input_gain{nullptr};

 private:
  int64_t action_dim_;
};
TORCH_MODULE(AngleLagrangian);

/// The same dynamics as a second-order model in the embedding x = (cos q, sin q) ∈ R² of the
/// harness (Dynamics, states [B, 2]): q = atan2(x₂, x₁), q̇ = (x₁ẋ₂ − x₂ẋ₁)/‖x‖²,
/// ẍ = ‖x‖·(−sin q·q̈ − cos q·q̇², cos q·q̈ − sin q·q̇²), and initial velocities projected onto the
/// circle's tangent. Dormand–Prince of (x, ẋ) then integrates the published ODE of (cos q, sin q,
/// q̇).
class AngleEmbeddingDynamics : public Dynamics {
 public:
  explicit AngleEmbeddingDynamics(AngleLagrangian lagrangian)
      : lagrangian_(std::move(lagrangian)) {}
  torch::Tensor Acceleration(const torch::Tensor& x, const torch::Tensor& xdot,
                             const torch::Tensor& u) override;
  torch::Tensor ProjectVelocity(const torch::Tensor& x, const torch::Tensor& xdot) override;

 private:
  AngleLagrangian lagrangian_;
};

}  // namespace keycld
