// The KeyCLD training objective for one sequence (docs/method.md §6).
#pragma once

#include <torch/torch.h>

#include <vector>

#include "keycld/models/registry.h"

namespace keycld {

struct LossTerms {
  torch::Tensor total;  // L = w_rec·L_rec + w_dyn·L_dyn + w_bce·L_bce [+ w_con·L_con] (scalar)
  torch::Tensor reconstruction;  // L_rec: Σ over frames, pixels, channels of squared error / N
  torch::Tensor dynamics;  // L_dyn: Σ over starts t and steps j = 0…P of ‖x_{t+j} − x̂_{t+j|t}‖²
  torch::Tensor heatmap;  // L_bce
  /// L_con = Σ over frames t and constraints c of Φ_c(x_t)²: how far the estimated keypoints
  /// are from the system's holonomic constraints (docs/training.md, "Constraint residual");
  /// a zero scalar for a model without constraints.
  torch::Tensor constraint;
  /// The VAE baselines' KL of the posterior against the prior, mean over windows (undefined
  /// for KeyCLD and its ablations).
  torch::Tensor kl;
};

struct LossOptions {
  int horizon = 4;  // P
  double w_rec = 1.0, w_dyn = 1.0, w_bce = 1.0;
  /// Weight of L_con (0 = the paper's objective, which meets the constraints only through the
  /// dynamics loss).
  double w_con = 0.0;
  /// Weight of each constraint c in L_con = Σ_t Σ_c w_c·Φ_c(x_t)² (empty = 1 for every one;
  /// otherwise one per constraint of the model, else InputError).
  std::vector<double> con_weights;
  /// The integrator of the dynamics loss: euler (the paper's; biased, its learned acceleration
  /// comes out about 1.38× too large for P = 4, docs/method.md §5), rk4 or verlet (exact for a
  /// constant acceleration). Dopri5 is refused.
  IntegratorMethod integrator = IntegratorMethod::kEuler;
  int substeps = 1;  // integrator steps per frame interval (Euler's bias shrinks as 1/substeps)
  /// Bound on each keypoint's acceleration inside the dynamics loss (normalized units / s²;
  /// 0 = none, the paper's). Keypoints that sit near a constraint's singularity early in
  /// training (near the pivot, or two keypoints on top of each other) get centripetal
  /// accelerations ‖ẋ‖²/r of 1e5 and more, which overflow RK4's stages; a bound far above the
  /// systems' real accelerations (docs/training.md, "Integrator") leaves the physics untouched.
  double max_acceleration = 0;
  /// The VAE baselines' weights (TrainConfig::w_kl, w_norm) and the seed of the sequence's
  /// posterior samples (drawn by the trainer from its checkpointed stream, so that a resumed
  /// run draws the same samples).
  double w_kl = 1.0, w_norm = 0.01;
  uint64_t noise_seed = 0;
};

/// A model variant with its own training objective (the paper's baselines, docs/baselines.md);
/// SequenceLoss hands such a model the sequence instead of computing KeyCLD's loss.
class OwnObjective {
 public:
  virtual ~OwnObjective() = default;
  /// The loss of one sequence: images float [N, 3, H, W] in [0, 1], the constant action u [A].
  virtual LossTerms SequenceLoss(const torch::Tensor& images, const torch::Tensor& u,
                                 const LossOptions& options) = 0;
  /// Called by the trainer once the model is built, before a fresh run's first step (a resumed
  /// run then loads its checkpoint over it): mean_image float [3, H, W] in [0, 1], the data
  /// set's /mean_image, on the model's device. Default: nothing.
  virtual void InitialiseFromData(const torch::Tensor& mean_image) { (void)mean_image; }
};

/// The dynamics term L_dyn of one sequence (docs/method.md §6, steps 1–2 below) from its
/// keypoints x float [N, 2K] (normalized image units), the constant action u [A]: a scalar,
/// differentiable in x and the model's dynamics parameters. Throws InputError if x is not
/// [N, 2K], N < P + 2, the integrator is dopri5 or substeps < 1.
torch::Tensor DynamicsLoss(Model& model, const torch::Tensor& x, const torch::Tensor& u,
                           const LossOptions& options);

/// The loss of one sequence (docs/method.md §6): images float [N, 3, H, W] in [0, 1], the constant
/// action u [A], per-frame dihedral transform ids int64 [N] (undefined = no augmentation).
/// 1. keypoints x_t of every frame; central differences ẋ_t = (x_{t+1} − x_{t−1}) / (2Δt),
///    projected onto the constraint tangent space, for t = 1 … N−2;
/// 2. from every start t = 1 … N−1−P, P frame intervals of `options.integrator` (each of
///    `options.substeps` steps of Δt / substeps), all starts as one batch;
/// 3. every frame rendered from its keypoints; 4. heatmap BCE against the detached Gaussian
///    maps of the estimates; 5. L_con, the squared constraint values of the estimates (each
///    times its `options.con_weights` entry, or a constraint count it does not match). Throws
///    InputError if N < P + 2, shapes disagree with the model, the integrator is dopri5 or
///    substeps < 1. A model with an OwnObjective gets the sequence
///    instead (the dihedral transforms are not used).
LossTerms SequenceLoss(Model& model, const torch::Tensor& images, const torch::Tensor& u,
                       const torch::Tensor& transform_ids, const LossOptions& options);

}  // namespace keycld
