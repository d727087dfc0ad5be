// Differentiable integrators of batched second-order systems ẍ = a(x, ẋ) (docs/method.md §5):
// explicit Euler (the paper's training integrator, step = frame interval), velocity Verlet and
// classic RK4 (unbiased alternatives for training), and adaptive Dormand–Prince 5(4)
// (evaluation, rtol = atol ≈ 1.4e-8).
//
// States are rows x, ẋ ∈ [B, N] (N = 2K for keypoint states). All arithmetic follows the device
// and dtype of x0 (pass float64 for float64 integration); times are in seconds. Gradients flow
// through every accepted step into x0, ẋ0 and whatever the acceleration function depends on.
// The adaptive step-size control itself is not differentiated (it reads the error estimate
// detached), as is standard for adaptive ODE solvers.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "keycld/util/names.h"

namespace keycld {

/// Batched acceleration a(x, ẋ): x, ẋ [B, N] → ẍ [B, N] (units / s²).
using AccelerationFn =
    std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& xdot)>;

/// A batch of phase-space states: positions and velocities, each [B, N].
struct PhaseState {
  torch::Tensor x;
  torch::Tensor xdot;
};

enum class IntegratorMethod {
  kEuler,   ///< explicit Euler on (x, ẋ): order 1, one evaluation per step
  kRk4,     ///< classic Runge–Kutta: order 4, four evaluations per step
  kDopri5,  ///< adaptive Dormand–Prince 5(4) with FSAL, error per unit step
  kVerlet,  ///< velocity Verlet (explicit predictor for ẋ-dependent a): order 2, two evaluations
};

template <>
struct NameTable<IntegratorMethod> {
  static constexpr const char* kWhat = "integrator";
  static constexpr std::pair<IntegratorMethod, const char*> kEntries[] = {
      {IntegratorMethod::kEuler, "euler"},
      {IntegratorMethod::kRk4, "rk4"},
      {IntegratorMethod::kVerlet, "verlet"},
      {IntegratorMethod::kDopri5, "dopri5"}};
};
/// The fixed-step methods a training loss can use (euler, rk4, verlet).
inline std::vector<std::string> FixedStepIntegratorNames() { return {"euler", "rk4", "verlet"}; }

/// Parses "euler" | "rk4" | "dopri5" | "verlet"; throws InputError otherwise.
IntegratorMethod ParseIntegratorMethod(const std::string& name);
std::string IntegratorMethodString(IntegratorMethod method);
/// Whether `method` takes fixed steps (euler, rk4, verlet: usable in the training loss).
bool IsFixedStep(IntegratorMethod method);

/// One explicit Euler step of size dt (s): x' = x + dt ẋ, ẋ' = ẋ + dt a(x, ẋ).
PhaseState EulerStep(const AccelerationFn& acc, const torch::Tensor& x, const torch::Tensor& xdot,
                     double dt);
/// One classic fourth-order Runge–Kutta step of size dt (s) on the first-order system (ẋ, a).
PhaseState Rk4Step(const AccelerationFn& acc, const torch::Tensor& x, const torch::Tensor& xdot,
                   double dt);
/// One velocity Verlet step of size dt (s): x' = x + dt ẋ + dt²/2 a, ẋ' = ẋ + dt/2 (a + a'),
/// a = a(x, ẋ), a' = a(x', ẋ + dt a) (the velocity argument of a' is the explicit Euler
/// predictor, since a may depend on ẋ; for a(x) alone this is the textbook scheme). Exact for a
/// constant acceleration, order 2.
PhaseState VerletStep(const AccelerationFn& acc, const torch::Tensor& x, const torch::Tensor& xdot,
                      double dt);
/// One step of a fixed-step method (euler, rk4 or verlet); InputError for dopri5.
PhaseState FixedStep(IntegratorMethod method, const AccelerationFn& acc, const torch::Tensor& x,
                     const torch::Tensor& xdot, double dt);
/// Acceleration evaluations per step of a fixed-step method (1, 4, 2).
int EvaluationsPerStep(IntegratorMethod method);

struct IntegratorOptions {
  // --- Dormand–Prince 5(4) ---
  /// Relative and absolute tolerance (docs/method.md §5: about 1.4e-8). A step is accepted when
  /// max over the batch of RMS_i(err_i / (atol + rtol · max(|y0_i|, |y1_i|))) ≤ 1, the RMS
  /// running over the 2N entries of (x, ẋ) of one batch row: every trajectory meets the
  /// tolerance on its own, whatever the batch size.
  double rtol = 1.4e-8;
  double atol = 1.4e-8;
  /// Budget of attempted (accepted + rejected) steps over the whole rollout; NumericalError
  /// beyond it instead of running away on a stiff or exploding model.
  int64_t max_steps = 100000;
  /// First trial step (s); 0 selects it automatically (Hairer, Nørsett & Wanner, II.4).
  double first_step = 0.0;
  /// Largest step (s); 0 = unlimited.
  double max_step = 0.0;
  // --- Euler, RK4 and Verlet ---
  /// Equal steps per output interval (1 = one step of the interval length).
  int substeps = 1;
  /// Check after every output interval that all states are finite and throw NumericalError
  /// otherwise (one device sync per check). Dopri5 always checks: it rejects a step with a
  /// non-finite error estimate, and throws NumericalError when that drives the step to underflow.
  bool check_finite = true;
};

/// A batch of trajectories and what it cost.
struct Trajectory {
  torch::Tensor x;     ///< [B, T, N] positions at the requested times
  torch::Tensor xdot;  ///< [B, T, N] velocities at the requested times
  int64_t accepted_steps = 0;
  int64_t rejected_steps = 0;  ///< always 0 for Euler and RK4
  int64_t evaluations = 0;     ///< calls of the acceleration function
};

/// Integrates ẍ = acc(x, ẋ) from (x0, ẋ0) at times[0] and returns the states at every entry of
/// `times` (seconds, strictly increasing, T ≥ 1; index 0 is the initial state itself).
/// x0, ẋ0: [B, N], same shape, floating point. Returns x, ẋ [B, T, N] in x0's dtype/device.
/// Euler, RK4 and Verlet take `options.substeps` equal steps per output interval. Dopri5 steps
/// exactly onto each output time (no dense-output interpolation): a step that would pass the next
/// output time is shortened to end on it, and the unshortened step-size proposal is kept for
/// the step after.
/// Throws InputError for malformed arguments and NumericalError when states become non-finite,
/// the step size underflows or the step budget (options.max_steps) is exhausted.
Trajectory Rollout(const AccelerationFn& acc, const torch::Tensor& x0, const torch::Tensor& xdot0,
                   const std::vector<double>& times, IntegratorMethod method,
                   const IntegratorOptions& options = {});

/// As above for the uniform grid t = 0, dt, …, steps·dt (T = steps + 1 outputs; dt > 0 in
/// seconds, steps ≥ 0).
Trajectory Rollout(const AccelerationFn& acc, const torch::Tensor& x0, const torch::Tensor& xdot0,
                   double dt, int64_t steps, IntegratorMethod method,
                   const IntegratorOptions& options = {});

}  // namespace keycld
