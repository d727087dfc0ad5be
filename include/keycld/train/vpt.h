// Valid prediction time (docs/method.md §8), the validation metric of training and evaluation.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "keycld/models/registry.h"

namespace keycld {

/// How a prediction's start state is read from the first three frames (docs/evaluation.md,
/// "Start estimate"). The default is the paper's protocol (method.md §8): one estimate per frame,
/// x₁ and the central velocity. Two keycld additions, both from the same three frames only:
/// - dihedral_average (test-time augmentation): each frame's keypoints are the mean of the
///   estimates of its 8 dihedral transforms (the training augmentation of §6, each estimate
///   mapped back by the inverse transform).
/// - refine_steps > 0 (render and compare): from that start, refine_steps Adam steps (learning
///   rate refine_lr in normalized image units, decaying linearly to 0) minimise
///   Σ_{t=0,1,2} MSE(Render(x_t), frame t) over x₁ and ẋ₁, with x₀,₂ = x₁ ∓ ẋ₁Δt + ½ẍΔt² (ẍ: the
///   model's acceleration at the start estimate, held fixed).
struct StartEstimate {
  bool dihedral_average = false;
  int64_t refine_steps = 0;
  double refine_lr = 5e-4;
  /// Whether this is the paper's protocol (no addition).
  bool IsPaper() const { return !dihedral_average && refine_steps == 0; }
};

/// InputError unless refine_steps ∈ [0, 100000] and refine_lr is a positive finite number.
void CheckStartEstimate(const StartEstimate& start_estimate);

struct VptOptions {
  double epsilon = 0;                   // threshold: per-pixel MSE (data set attribute vpt_epsilon)
  double rtol = 1.4e-8, atol = 1.4e-8;  // Dormand–Prince tolerances
  IntegratorMethod method = IntegratorMethod::kDopri5;  // RK4 / Euler: one step per frame
  int64_t max_steps = 200000;                           // Dormand–Prince step budget per call
  int64_t render_chunk = 128;                           // frames rendered at once (memory bound)
  StartEstimate start_estimate;                         // default: the paper's start
};

struct VptResult {
  std::vector<int> vpt;  // per run: index of the first frame whose MSE exceeds ε (N−1 if none)
  double mean = 0, std = 0, median = 0;
  torch::Tensor mse;        // [R, N] per-frame MSE of the predicted video
  torch::Tensor predicted;  // [R, N, K, 2] predicted keypoints (frame 0: estimate)
  int64_t accepted_steps = 0, rejected_steps = 0;
};

/// Long-term prediction of keypoints from the first three frames of each run (docs/method.md §8):
/// keypoints of frames 0, 1, 2 are estimated; the rollout starts at x₁ with
/// ẋ₁ = (x₂ − x₀) / (2Δt), projected onto the constraint tangent space, and integrates the
/// model's dynamics in float64 with the run's constant action to frame times 1 … F−1 (frame t at
/// t·Δt). Frame 0 of the result is the estimate of frame 0. first3 uint8 [R, 3, H, W, 3],
/// actions float [R, A] → keypoints float32 [R, F, K, 2] on the model's device. `method` is
/// Dormand–Prince for evaluation (tolerances from `options`), RK4 / Euler with step Δt.
/// Throws InputError for bad shapes or F < 2 and NumericalError if the rollout diverges.
/// A variant with its own prediction (OwnPrediction, models/model.h: HGN) gets its first
/// PredictionInputFrames(model) frames instead, and K is model->StatePoints().
struct KeypointPrediction {
  torch::Tensor keypoints;  // [R, F, K, 2]
  int64_t accepted_steps = 0, rejected_steps = 0;
};
/// `start_estimate` other than the paper's (StartEstimate) is only for models whose states are
/// image keypoints (InputError otherwise); frame 0 of the result is then its x₀.
KeypointPrediction PredictKeypoints(Model& model, const torch::Tensor& first3,
                                    const torch::Tensor& actions, int64_t frames,
                                    IntegratorMethod method, const IntegratorOptions& options,
                                    const StartEstimate& start_estimate = {});

/// The render-and-compare refinement of StartEstimate (its refine_steps and refine_lr; the
/// dihedral average is the caller's): frames float [R, 3, 3, H, W] in [0, 1] (the first three
/// frames), start (x₁, ẋ₁) [R, 2K] (any float type), actions [R, A] → the refined float64
/// (x₁, ẋ₁) [R, 2K], ẋ₁ projected onto the constraint tangent space, and the refined x₀ [R, 2K]
/// in `x0`. Also reports the objective (per-pixel MSE summed over the three frames, mean over
/// runs) before and after in `loss_before`, `loss_after` when given. InputError for bad shapes
/// or options (CheckStartEstimate), NumericalError for a non-finite result.
PhaseState RefineStartState(Model& model, const torch::Tensor& frames, const PhaseState& start,
                            const torch::Tensor& actions, const StartEstimate& start_estimate,
                            torch::Tensor* x0 = nullptr, double* loss_before = nullptr,
                            double* loss_after = nullptr);

/// Keypoints of frames float [R, F, 3, H, W] in [0, 1] → [R, F, 2K] (the model's precision),
/// one estimate per frame or, with `dihedral_average`, the mean over the 8 dihedral transforms
/// (StartEstimate). InputError for bad shapes.
torch::Tensor EstimateKeypoints(Model& model, const torch::Tensor& frames, bool dihedral_average);

/// How many leading frames of a run PredictKeypoints reads: 3, or an OwnPrediction's count
/// (HGN: 5).
int64_t PredictionInputFrames(Model& model);

/// The start state of a prediction from the estimated keypoints of frames 0, 1, 2
/// (docs/method.md §8): x₁ and the central velocity (x₂ − x₀) / (2Δt), projected onto the
/// constraint tangent space. x [R, 3, 2K] → float64 x₁, ẋ₁ [R, 2K]. Call while a
/// DoublePrecisionDynamics guard is alive (the projection then runs in float64).
PhaseState InitialStateFromEstimates(Model& model, const torch::Tensor& x);

/// Per-frame MSE [R, N] (float64, CPU) between the frames rendered from predicted keypoints
/// [R, N, K, 2] and the true images uint8 [R, N, H, W, 3] (per pixel and channel, images in
/// [0, 1]), rendering `render_chunk` frames at a time. Throws InputError for mismatched shapes.
torch::Tensor PredictionMse(Model& model, const torch::Tensor& keypoints,
                            const torch::Tensor& images, int64_t render_chunk = 128);

/// VPT of each run from its per-frame MSE [R, N] (float64 on the CPU): the index of the first
/// frame whose MSE exceeds ε, N − 1 if none (docs/method.md §8). Also fills mean, std (population)
/// and median. Throws InputError for a tensor that is not [R ≥ 1, N ≥ 1].
VptResult VptFromMse(const torch::Tensor& mse, double epsilon);

/// Predicts every run from its first three frames and scores it (docs/method.md §8): keypoints of
/// frames 0, 1, 2; start at x₁ with ẋ₁ = (x₂ − x₀) / (2Δt), projected; Dormand–Prince in
/// float64 to every later frame time with the run's constant action; render; frame 0 is the
/// reconstruction of its estimate. images uint8 [R, N, H, W, 3], actions float [R, A].
/// Throws InputError for bad shapes (N < 3) and NumericalError if the rollout diverges.
VptResult ValidPredictionTime(Model& model, const torch::Tensor& images,
                              const torch::Tensor& actions, const VptOptions& options);

/// uint8 [..., H, W, 3] → float [..., 3, H, W] in [0, 1] on `device`.
torch::Tensor ImagesToFloat(const torch::Tensor& images, const torch::Device& device);

}  // namespace keycld
