// Keypoint order (docs/training.md, "Keypoint order"). The estimator's K output channels start
// in an arbitrary order, but the holonomic constraints name their keypoints (the cartpole's
// first keypoint is the cart on the rail, the acrobot's first is the elbow at a fixed distance
// from the pivot; docs/method.md §4). A model can learn to see both bodies with the labels
// swapped, and then no constraint holds along the data: the dynamics cannot fit and training
// ends far from the truth. Along data, a holonomic constraint's value Φ_c is constant (a
// rollout keeps it at its start value), so the order under which the constraint values vary
// least over the estimated keypoints of many frames is the order the constraints mean; the
// trainer relabels the model to it (keypoint_relabel_epochs).
#pragma once

#include <torch/optim/adam.h>
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "keycld/dynamics/constraints.h"
#include "keycld/models/model.h"

namespace keycld {

/// Spread of the holonomic constraints along states x [N, 2K] (N ≥ 2): Σ_c Var_n Φ_c(x_n), the
/// population variance over the states of each constraint value, summed over the C
/// constraints (normalized image units squared). 0 for a model without constraints. Computed
/// in float64. InputError for a bad shape.
double ConstraintSpread(const HolonomicConstraints& constraints, const torch::Tensor& x);

struct KeypointOrderChoice {
  std::vector<int64_t> order;  ///< the order of least spread: new keypoint k = old order[k]
  double current = 0;          ///< ConstraintSpread of the present order
  double best = 0;             ///< ConstraintSpread of `order`
  bool relabel = false;        ///< `order` is not the identity and best < ratio · current
};

/// The order of the keypoints [N, K, 2] (N ≥ 2 frames, K ≤ 6: all K! orders are tried) whose
/// constraint values vary least along the frames, and whether it is worth a relabelling: its
/// spread below `ratio` (in (0, 1]) times the present order's. InputError for a bad shape, K > 6
/// or a ratio outside (0, 1].
KeypointOrderChoice ChooseKeypointOrder(const HolonomicConstraints& constraints,
                                        const torch::Tensor& keypoints, double ratio);

/// "1, 0": an order as the trainer's line and the evaluation report print it.
std::string KeypointOrderString(const std::vector<int64_t>& order);

/// Relabels `model` in place (ModelImpl::KeypointRelabelling) so that its keypoint k is its old
/// keypoint order[k], and with it, when `adam` is not null, Adam's first and second moments of
/// every changed parameter, so that the next steps are the ones the old labels would have
/// taken. InputError as KeypointRelabelling.
void RelabelKeypoints(Model& model, const std::vector<int64_t>& order, torch::optim::Adam* adam);

}  // namespace keycld
