// The Lagrangian VAE baselines of the paper's table (docs/baselines.md; Zhong & Leonard 2020,
// docs/method.md §9), for systems of one angle (the pendulum):
//   - an MLP encoder of the whole RGB frame to an unnormalised (cos q, sin q) and a
//     von Mises–Fisher concentration κ (the posterior over q; uniform prior);
//   - a Lagrangian in q (AngleLagrangian: M(q) > 0, V(q), g(q));
//   - lag-vae: an MLP decoder from (cos q, sin q) to the whole image;
//     lag-cavae: the coordinate-aware decoder, one learned RGBA sprite rotated by q about a
//     learned pivot (PlaceSprite) and drawn over a learned background.
// Trained on windows of horizon + 1 frames with their own objective (OwnObjective): q₀ sampled
// from the first frame's posterior, q̇₀ by the finite difference of the first two frames' means,
// Euler (or RK4) over the window, every frame decoded; reconstruction SSE + w_kl·KL +
// w_norm·(mean ‖encoder mean‖ − 1)². States in the harness are (cos q, sin q) [T, 1, 2] — not
// image keypoints (ModelVariant::image_keypoints is false) — and the dynamics is the same ODE in
// that embedding (AngleEmbeddingDynamics), so VPT, predict and the benchmark run unchanged.
#pragma once

#include "keycld/model/angle_vae.h"
#include "keycld/models/model.h"
#include "keycld/train/loss.h"

namespace keycld {

/// The posterior of frames: the unnormalised mean [T, 2] and the concentration κ [T] (softplus
/// of the encoder's third output, plus 1, as published).
struct AnglePosterior {
  torch::Tensor mean, kappa;
};

class LagVaeModelImpl : public ModelImpl, public OwnObjective {
 public:
  /// `coordinate_aware`: lag-cavae (sprite) or lag-vae (MLP decoder). InputError unless the
  /// system is the pendulum (one angle; cartpole and acrobot need a translation coordinate and
  /// a chain of encoders, not built yet).
  LagVaeModelImpl(const ModelSpec& spec, bool coordinate_aware);

  /// images [T, 3, H, W] in [0, 1] → the posterior of every frame.
  AnglePosterior Posterior(const torch::Tensor& images);
  /// keypoints = the normalised posterior means [T, 1, 2]; no heatmaps (undefined). The
  /// dihedral transforms are ignored (the published models train without augmentation).
  Encoding Encode(const torch::Tensor& images, const torch::Tensor& transform_ids = {}) override;
  /// States (cos q, sin q) [T, 1, 2] (not normalised: the decoder sees what the integrator
  /// gives, as published) → images [T, 3, H, W] in (0, 1).
  torch::Tensor Render(const torch::Tensor& keypoints) override;
  Dynamics& dynamics() override { return *dynamics_; }
  std::vector<torch::Tensor> PerceptionParameters() override;
  std::vector<std::shared_ptr<torch::nn::Module>> DynamicsModules() override;
  /// The windowed objective (above): windows t = 0 … N − 1 − P of P + 1 frames, all of them
  /// one batch; options.integrator euler (published) or rk4 with options.substeps; the samples'
  /// draws from options.noise_seed. reconstruction = SSE per window, kl = mean KL, dynamics and
  /// heatmap 0. InputError for N < P + 1, bad shapes or another integrator.
  LossTerms SequenceLoss(const torch::Tensor& images, const torch::Tensor& u,
                         const LossOptions& options) override;

  /// The adaptation to scenes with a background (docs/baselines.md): the encoder sees each
  /// frame minus the data set's mean frame (as the published models saw moving bodies on black),
  /// lag-cavae's background starts at the mean frame (its sprite starts nearly transparent,
  /// opacity ≈ 0.05) and lag-vae's decoder output bias at the same frame. mean_image [3, H, W]
  /// in [0, 1], kept in the checkpoint (buffer "input_mean"); InputError for another shape.
  void InitialiseFromData(const torch::Tensor& mean_image) override;

  AngleLagrangian lagrangian() { return lagrangian_; }

 private:
  bool coordinate_aware_;
  torch::nn::Sequential encoder_{nullptr}, decoder_{nullptr};
  torch::Tensor background_, pivot_;  // lag-cavae: background logits [3, H, W], pivot [2]
  torch::Tensor input_mean_;          // buffer [3, H, W]: subtracted from the encoder's input
  AngleLagrangian lagrangian_{nullptr};
  std::shared_ptr<AngleEmbeddingDynamics> dynamics_;
};

}  // namespace keycld
