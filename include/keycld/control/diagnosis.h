// Why a learned controller fails where the known model's succeeds (docs/control.md,
// "Diagnosis"). Along a closed loop the learned law and the known model's law (ClosedLoop::
// SetReference) both compute an action for every frame, from the same images: the learned one
// from its estimated keypoints, the known one from the simulator's state. Actions are in the
// actuator's physical units whatever the model's own units (its V, B and M can be scaled
// together), so the two can be compared term by term: the gravity compensation (which needs the
// learned ∇V and B to agree with the true ones) and the feedback −K_p(x − x*) − K_d ẋ mapped
// through B (which needs M and B to agree, as K = k·M). A slope of 1 with R² = 1 is a right
// term; a slope of 0.5 is a model that asks half the true torque.
#pragma once

#include <vector>

#include "keycld/control/closed_loop.h"

namespace keycld {

/// One term of the action, model against reference, per actuator [A].
struct TermComparison {
  /// Least-squares s of model ≈ s·reference over the steps (through 0); NaN when the reference
  /// is 0 (root mean square ≤ 1e-9 actuator units: rounding, e.g. the cart's gravity part).
  std::vector<double> slope;
  /// 1 − Σ(model − s·reference)² / Σ(model − mean model)²: 1 when the model's term is
  /// proportional to the reference's; ≤ 0 when the fit explains nothing; NaN for a constant
  /// model term.
  std::vector<double> r2;
  /// Root mean squares of the model's term, the reference's and their difference (actuator
  /// units).
  std::vector<double> rms_model, rms_reference, rms_difference;
  /// Median of model/reference over the steps where |reference| ≥ 10 % of its root mean square:
  /// the typical ratio, which a few huge values (a weak B near a singular pose) do not move as
  /// they move the slope; NaN when no step qualifies or the reference is 0 (as for slope).
  std::vector<double> median_ratio;
};

/// The three terms: the whole unclipped action, its gravity compensation and the feedback
/// (unclipped − gravity); and the input acceleration (ControlAction::input_acceleration), the
/// model's B against the true one.
struct ReferenceComparison {
  size_t steps = 0;
  TermComparison action, gravity, feedback, input_acceleration;
};

/// Compares each recorded step's unclipped / gravity / input_acceleration with its
/// reference_unclipped / reference_gravity / reference_input_acceleration. Throws InputError
/// for no steps, a step without a reference or components of different sizes.
ReferenceComparison CompareWithReference(const std::vector<ControlStep>& steps);

/// Least-squares comparison of `model` with `reference` (same length ≥ 1; InputError
/// otherwise): the fields of one actuator of a TermComparison, in the order slope, r2,
/// rms_model, rms_reference, rms_difference, median_ratio.
std::vector<double> CompareSeries(const std::vector<double>& model,
                                  const std::vector<double>& reference);

}  // namespace keycld
