// The parts of the Lagrangian VAE baselines for systems of several bodies (docs/baselines.md,
// "Several bodies"; Zhong & Leonard 2020, docs/method.md §9): generalised coordinates that are
// angles (carried as (cos q, sin q), von Mises–Fisher posterior) or translations (carried as
// (x, 0), Gaussian posterior), a Lagrangian of n such coordinates with the published
// positive-definite mass network M(q) = L(q) L(q)ᵀ + 0.1·I, and the same dynamics as a
// second-order model of the harness's point pairs.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "keycld/dynamics/dynamics.h"
#include "keycld/model/angle_vae.h"

namespace keycld {

/// What one generalised coordinate is: an angle q ∈ S¹ (state pair (cos q, sin q)) or a
/// translation q ∈ R (state pair (q, 0)).
enum class CoordinateKind { kAngle, kTranslation };

/// KL(N(μ, σ²) ‖ N(0, 1)) = ½(μ² + σ² − 1 − log σ²), element-wise, from μ and log σ².
torch::Tensor GaussianKl(const torch::Tensor& mean, const torch::Tensor& log_variance);

/// Bilinear sampling of images at an affine map of the output grid: output(p) = image(A·p + t),
/// in the normalised coordinates of affine_grid (x right, y down, corners at ±1, align_corners
/// false), zero outside the image. image [1 or B, C, H, W], A [B, 2, 2], t [B, 2] →
/// [B, C, H, W]. The coordinate-aware decoder's placement (a sprite point s lands where
/// A·p + t = s) and the encoders' attention crops are both this map. InputError for bad shapes.
torch::Tensor AffineSample(const torch::Tensor& image, const torch::Tensor& A,
                           const torch::Tensor& t);

/// The rotation matrices R(q) = [[cos q, −sin q], [sin q, cos q]] of cos_sin [B, 2] → [B, 2, 2].
torch::Tensor RotationMatrices(const torch::Tensor& cos_sin);

/// The Lagrangian L = ½ q̇ᵀ M(q) q̇ − V(q) of n generalised coordinates with external forces
/// g(q)·u, networks of the features φ(q) (cos q, sin q per angle, q per translation): width 50,
/// tanh, orthogonal initial weights (TanhMlp, as published).
///   - M(q) = L Lᵀ + 0.1·I, L lower triangular from n(n+1)/2 outputs: positive definite, every
///     eigenvalue ≥ 0.1;
///   - V(q) [B]; g(q) [B, n, A].
class GeneralisedLagrangianImpl : public torch::nn::Module {
 public:
  /// InputError for no coordinates, A < 1 or width < 1.
  GeneralisedLagrangianImpl(std::vector<CoordinateKind> kinds, int64_t action_dim,
                            int64_t width = 50);
  int64_t coordinates() const { return int64_t(kinds_.size()); }
  const std::vector<CoordinateKind>& kinds() const { return kinds_; }
  /// φ(q): q [B, n] → [B, Σ (2 per angle, 1 per translation)].
  torch::Tensor Features(const torch::Tensor& q) const;
  /// M(q) [B, n, n] of q [B, n].
  torch::Tensor Mass(const torch::Tensor& q);
  /// V(q) [B].
  torch::Tensor Potential(const torch::Tensor& q);
  /// g(q) [B, n, A].
  torch::Tensor InputGain(const torch::Tensor& q);
  /// The Euler–Lagrange accelerations M q̈ = g u − ∂V/∂q + ∂T/∂q − Ṁ q̇ (T = ½ q̇ᵀ M q̇,
  /// Ṁ q̇ = Σₖ ∂(M q̇)/∂qₖ q̇ₖ), all derivatives by autograd (with the graph kept while gradients
  /// are recorded, for training): q, q̇ [B, n], u [A], [B, A] or undefined (no force) → [B, n].
  torch::Tensor Acceleration(const torch::Tensor& q, const torch::Tensor& qdot,
                             const torch::Tensor& u);

  TanhMlp mass{nullptr}, potential{nullptr}, input_gain{nullptr};

 private:
  // M, V and g of the features φ(q) [B, F], so that Acceleration computes φ once for all three.
  torch::Tensor MassOfFeatures(const torch::Tensor& features);
  torch::Tensor PotentialOfFeatures(const torch::Tensor& features);
  torch::Tensor InputGainOfFeatures(const torch::Tensor& features);
  std::vector<CoordinateKind> kinds_;
  int64_t action_dim_;
};
TORCH_MODULE(GeneralisedLagrangian);

/// The generalised coordinates q and velocities q̇ [B, n] of state pairs x, ẋ [B, 2n] (angle:
/// q = atan2(x₂, x₁), q̇ = (x₁ẋ₂ − x₂ẋ₁)/‖x‖²; translation: q = x₁, q̇ = ẋ₁).
std::pair<torch::Tensor, torch::Tensor> CoordinatesOfPairs(const std::vector<CoordinateKind>& kinds,
                                                           const torch::Tensor& x,
                                                           const torch::Tensor& xdot);

/// The Lagrangian's dynamics as a second-order model of the pairs (Dynamics, states [B, 2n]): per
/// angle ẍ = ‖x‖·(−sin q·q̈ − cos q·q̇², cos q·q̈ − sin q·q̇²), per translation ẍ = (q̈, 0); initial
/// velocities projected onto the circle's tangent (angles) or the first axis (translations).
/// Dormand–Prince of (x, ẋ) then integrates the ODE of (q, q̇).
class CoordinateEmbeddingDynamics : public Dynamics {
 public:
  explicit CoordinateEmbeddingDynamics(GeneralisedLagrangian lagrangian)
      : lagrangian_(std::move(lagrangian)) {}
  torch::Tensor Acceleration(const torch::Tensor& x, const torch::Tensor& xdot,
                             const torch::Tensor& u) override;
  torch::Tensor ProjectVelocity(const torch::Tensor& x, const torch::Tensor& xdot) override;

 private:
  GeneralisedLagrangian lagrangian_;
};

}  // namespace keycld
