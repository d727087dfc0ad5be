// The Lagrangian VAE baselines (lag-vae, lag-cavae; docs/baselines.md, "Several bodies"; Zhong &
// Leonard 2020, docs/method.md §9) for the cartpole and the acrobot: two generalised coordinates.
//   - cartpole: the cart's translation x (Gaussian posterior, N(0, 1) prior) and the pole's
//     angle θ (von Mises–Fisher posterior, uniform prior);
//   - acrobot: the upper link's angle θ₁ and the lower link's angle θ₂ relative to it.
// One MLP encoder per body on the whole RGB frame minus the data set's mean frame; the second
// body's encoder sees the frame through an attention crop placed by the first body's posterior
// mean (cartpole: shifted by the cart's translation; acrobot: rotated into the upper link's frame
// about a learned pivot and shifted by a learned elbow offset), as published for chains, with our
// frames in place of per-body colour channels. A Lagrangian in (x, θ) or (θ₁, θ₂)
// (GeneralisedLagrangian: M = L Lᵀ + 0.1·I, V, g). Decoders: lag-vae an MLP from the
// coordinates' features to the whole image; lag-cavae one learned RGBA sprite per body, placed
// by its coordinate (cart: translated by x; pole: rotated by θ about a learned hinge that moves
// with the cart; upper link: rotated by θ₁ about a learned pivot; lower link: rotated by θ₁ + θ₂
// about the learned elbow on the upper link) and drawn in that order over a learned background.
// States in the harness are one pair per coordinate [T, 2, 2] ((x, 0) or (cos q, sin q)); the
// dynamics are the same ODE in that embedding (CoordinateEmbeddingDynamics).
#pragma once

#include <vector>

#include "keycld/model/coordinate_vae.h"
#include "keycld/models/model.h"
#include "keycld/train/loss.h"

namespace keycld {

/// The posterior of frames over one coordinate: angle: the unnormalised mean [T, 2] and the
/// concentration κ [T] (softplus + 1, as published); translation: the mean [T] and log σ² [T].
struct CoordinatePosterior {
  CoordinateKind kind;
  torch::Tensor mean, spread;
};

class ChainLagVaeModelImpl : public ModelImpl, public OwnObjective {
 public:
  /// `coordinate_aware`: lag-cavae (sprites) or lag-vae (MLP decoder). InputError unless the
  /// system is the cartpole or the acrobot.
  ChainLagVaeModelImpl(const ModelSpec& spec, bool coordinate_aware);

  /// The coordinates' kinds: cartpole (translation, angle), acrobot (angle, angle).
  const std::vector<CoordinateKind>& kinds() const { return kinds_; }
  /// images [T, 3, H, W] in [0, 1] → the posterior of every frame, one per coordinate (the
  /// second from the attention crop placed by the first's mean).
  std::vector<CoordinatePosterior> Posterior(const torch::Tensor& images);
  /// The frames as the second body's encoder sees them: images [T, 3, H, W] minus the mean
  /// frame, cropped by the first coordinate's normalised posterior mean first [T, 2] ((x, 0) or
  /// (cos θ₁, sin θ₁)) → [T, 3, H, W].
  torch::Tensor AttentionCrop(const torch::Tensor& centred, const torch::Tensor& first);
  /// States [T, 2, 2]: (x, 0) for a translation, the normalised (cos q, sin q) for an angle; no
  /// heatmaps. The dihedral transforms are ignored (no augmentation, as published).
  Encoding Encode(const torch::Tensor& images, const torch::Tensor& transform_ids = {}) override;
  /// States [T, 2, 2] (angles not normalised: the decoder sees what the integrator gives, as
  /// published) → images [T, 3, H, W] in (0, 1).
  torch::Tensor Render(const torch::Tensor& keypoints) override;
  Dynamics& dynamics() override { return *dynamics_; }
  std::vector<torch::Tensor> PerceptionParameters() override;
  std::vector<std::shared_ptr<torch::nn::Module>> DynamicsModules() override;
  /// The windowed objective of the pendulum's lag-vae (lag_vae_model.h) for two coordinates:
  /// windows t = 0 … N − 1 − P; each coordinate's start sampled from frame t's posterior (vMF or
  /// Gaussian, draws from options.noise_seed), its velocity by the difference of frames t and
  /// t + 1's means; euler (published) or rk4 of (pairs, q̇); reconstruction = SSE per window,
  /// kl = the windows' mean of the summed KL of both coordinates, the norm penalty w_norm over
  /// the angles' encoder means. InputError for N < P + 1, bad shapes or another integrator.
  LossTerms SequenceLoss(const torch::Tensor& images, const torch::Tensor& u,
                         const LossOptions& options) override;
  /// As lag_vae_model.h: the encoders see frames minus mean_image [3, H, W] (buffer
  /// "input_mean"); the background (lag-cavae) or the decoder's output bias (lag-vae) starts at
  /// the mean frame.
  void InitialiseFromData(const torch::Tensor& mean_image) override;

  GeneralisedLagrangian lagrangian() { return lagrangian_; }

 private:
  bool coordinate_aware_;
  std::vector<CoordinateKind> kinds_;
  std::vector<torch::nn::Sequential> encoders_, sprites_;
  torch::nn::Sequential decoder_{nullptr};  // lag-vae
  // Acrobot attention: the pivot and the elbow (in the upper link's frame) of the crop.
  torch::Tensor attention_pivot_, attention_elbow_;
  // lag-cavae geometry: cartpole hinge (relative to the cart's placement); acrobot pivot, elbow.
  torch::Tensor background_, joint_a_, joint_b_;
  torch::Tensor input_mean_;
  GeneralisedLagrangian lagrangian_{nullptr};
  std::shared_ptr<CoordinateEmbeddingDynamics> dynamics_;
};

}  // namespace keycld
