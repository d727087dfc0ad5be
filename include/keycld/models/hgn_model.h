// The Hamiltonian Generative Network baseline of the paper's table (docs/baselines.md; Toth et
// al. 2019, docs/method.md §9), for any system without an action input:
//   - an encoder of a stack of 5 consecutive RGB frames (15 channels, 32×32; 64-px frames are
//     average-pooled to 32 first): 8 valid 3×3 convolutions to a 48×16×16 map, the mean and log
//     variance of a Gaussian posterior over z [24, 16, 16] (N(0, 1) prior);
//   - a transformer of z: three valid 5×5 convolutions to the phase-space state
//     s = (q, p), each 16×4×4 (s [B, 32, 4, 4]);
//   - a convolutional Hamiltonian H(s) (softplus activations) and its flow
//     ṡ = (∂H/∂p, −∂H/∂q) by autograd;
//   - a decoder from q alone: residual upsampling 4 → 8 → … → H, sigmoid output.
// The adaptation to scenes with a background (docs/baselines.md), as for lag-vae: the encoder
// sees the frames minus the data set's mean frame, and the decoder's output has a per-pixel bias
// (a learned background) that starts at the mean frame.
// Trained on windows of horizon + 1 frames (horizon ≥ 4) with its own objective (OwnObjective):
// s₀ from a posterior sample of the window's first 5 frames, the flow integrated over the
// window (euler as in the comparison of Zhong & Leonard; leapfrog as in Toth et al., which is
// second order only for a separable H and first order for this network's H(q, p); or rk4),
// every frame decoded; reconstruction SSE + w_kl · KL (mean over the latent's elements). Its
// prediction starts from the first 5 frames (OwnPrediction); in the harness its states are q
// as 128 pairs [T, 128, 2] (StatePoints).
#pragma once

#include "keycld/models/model.h"
#include "keycld/train/loss.h"

namespace keycld {

class HgnModelImpl : public ModelImpl, public OwnObjective, public OwnPrediction {
 public:
  static constexpr int64_t kStackFrames = 5;      // frames per encoder input
  static constexpr int64_t kLatentChannels = 24;  // z [24, 16, 16]
  static constexpr int64_t kStateChannels = 16;   // q and p, each [16, 4, 4]

  /// Convolution width c = spec.hidden (published 64). InputError for an image size that is
  /// not 32 · 2^k.
  explicit HgnModelImpl(const ModelSpec& spec);

  struct Posterior {
    torch::Tensor mean, log_variance;  // [B, 24, 16, 16]
  };
  /// stacks [B, 5, 3, H, W] in [0, 1] → the posterior over z.
  Posterior Infer(const torch::Tensor& stacks);
  /// z [B, 24, 16, 16] → s = (q, p) [B, 32, 4, 4] (channels 0–15 q, 16–31 p).
  torch::Tensor Transform(const torch::Tensor& z);
  /// H(s) [B] of s [B, 32, 4, 4].
  torch::Tensor Hamiltonian(const torch::Tensor& s);
  /// The Hamiltonian vector field ṡ = (∂H/∂p, −∂H/∂q) [B, 32, 4, 4] by autograd; with the graph
  /// kept (differentiable in s and the parameters) while gradients are recorded, detached
  /// otherwise.
  torch::Tensor VectorField(const torch::Tensor& s);
  /// q [B, 16, 4, 4] → images [B, 3, H, W] in (0, 1): sigmoid(network(q) + background).
  torch::Tensor Decode(const torch::Tensor& q);
  /// Consecutive frames [T, 3, H, W] → [T, 5, 3, H, W]: frame t's stack t … t+4, the indices
  /// past the last frame repeating it.
  static torch::Tensor Stacks(const torch::Tensor& images);

  /// images [T, 3, H, W], consecutive frames of one run → keypoints = q of the posterior mean of
  /// every frame's stack (Stacks), [T, 128, 2]; no heatmaps. Transforms are ignored.
  Encoding Encode(const torch::Tensor& images, const torch::Tensor& transform_ids = {}) override;
  /// States q as [T, 128, 2] → images [T, 3, H, W].
  torch::Tensor Render(const torch::Tensor& keypoints) override;
  /// HGN's flow is first order in (q, p): it has no ẍ(x, ẋ); the returned dynamics throws
  /// InputError when asked for one (predictions go through PredictFromFrames).
  Dynamics& dynamics() override { return *dynamics_; }
  std::vector<torch::Tensor> PerceptionParameters() override;
  std::vector<std::shared_ptr<torch::nn::Module>> DynamicsModules() override;
  int64_t StatePoints() const override { return kStateChannels * 16 / 2; }
  int64_t EncoderFrames() const override { return kStackFrames; }

  int64_t PredictionInputFrames() const override { return kStackFrames; }
  /// s₀ from the posterior mean of the 5 frames, then the flow by `method` in the Hamiltonian's
  /// dtype (float64 under DoublePrecisionDynamics): Dormand–Prince integrates ṡ as the velocity
  /// of a second-order system whose acceleration is the flow at that velocity (ẍ = f(ẋ), so
  /// ẋ(t) = s(t) exactly; integrators.h). Actions are ignored (the model has no input).
  StatePrediction PredictFromFrames(const torch::Tensor& frames, const torch::Tensor& actions,
                                    int64_t count, IntegratorMethod method,
                                    const IntegratorOptions& options) override;

  /// Windows of P + 1 frames (P = options.horizon ≥ 4) at stride P + 1 from an offset in
  /// [0, P] drawn from options.noise_seed (disjoint windows: every frame of a run is in one
  /// window), all of them one batch: z sampled from the posterior of each window's first 5
  /// frames (draws from options.noise_seed), s₀ = Transform(z), P steps of Δt by
  /// options.integrator (euler, rk4, or verlet = leapfrog p½, q, p), with options.substeps,
  /// every state decoded. reconstruction = SSE per window, kl = KL per latent element (mean),
  /// total = w_rec · reconstruction + w_kl · kl. InputError for N < P + 1, P < 4 or dopri5.
  LossTerms SequenceLoss(const torch::Tensor& images, const torch::Tensor& u,
                         const LossOptions& options) override;
  /// mean_image [3, H, W] in [0, 1]: kept as the buffer "input_mean" (subtracted from every
  /// encoder input) and the start of the decoder's background logits. InputError for another
  /// shape.
  void InitialiseFromData(const torch::Tensor& mean_image) override;

 private:
  int64_t pool_;  // the encoder's average pooling: image size / 32
  torch::nn::Sequential encoder_{nullptr}, transformer_{nullptr}, hamiltonian_{nullptr};
  torch::nn::Conv2d decoder_in_{nullptr}, decoder_out_{nullptr};
  torch::nn::ModuleList decoder_blocks_{nullptr};
  torch::Tensor input_mean_;  // buffer [3, H, W]
  torch::Tensor background_;  // the decoder's output bias (logits) [3, H, W]
  std::shared_ptr<Dynamics> dynamics_;
};

}  // namespace keycld
