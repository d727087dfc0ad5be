// Integrators (docs/method.md §5) against the harmonic oscillator's exact solution: convergence
// orders of Euler and RK4, Dormand–Prince accuracy at its tolerance, gradients through a
// rollout, and typed errors for budgets, divergence and malformed input.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "keycld/dynamics/dynamics.h"
#include "keycld/dynamics/integrators.h"
#include "keycld/util/error.h"

namespace keycld {
namespace {

const torch::TensorOptions kF64 = torch::TensorOptions().dtype(torch::kFloat64);
constexpr double kOmega = 2.0;  // rad/s

// ẍ = −ω² x; x(t) = x0 cos ωt + (v0/ω) sin ωt.
torch::Tensor Oscillator(const torch::Tensor& x, const torch::Tensor& /*xdot*/) {
  return -kOmega * kOmega * x;
}

torch::Tensor ExactPosition(const torch::Tensor& x0, const torch::Tensor& v0, double t) {
  return x0 * std::cos(kOmega * t) + v0 * (std::sin(kOmega * t) / kOmega);
}

struct Start {
  torch::Tensor x0, v0;
};

Start OscillatorStart() {
  return {torch::tensor({{1.0, -0.5}, {0.2, 0.0}}, kF64),
          torch::tensor({{0.0, 1.0}, {-0.3, 2.0}}, kF64)};
}

// Max error of the final position after integrating to t = 1 s with step dt.
double FinalError(IntegratorMethod method, double dt) {
  const Start s = OscillatorStart();
  const int64_t steps = std::llround(1.0 / dt);
  const Trajectory traj = Rollout(Oscillator, s.x0, s.v0, dt, steps, method);
  const torch::Tensor last = traj.x.select(1, steps);
  return (last - ExactPosition(s.x0, s.v0, steps * dt)).abs().max().item<double>();
}

TEST(IntegratorTest, EulerConvergesWithOrderOne) {
  const double e1 = FinalError(IntegratorMethod::kEuler, 1e-3);
  const double e2 = FinalError(IntegratorMethod::kEuler, 5e-4);
  const double ratio = e1 / e2;
  EXPECT_GT(ratio, 1.9);
  EXPECT_LT(ratio, 2.1);
}

TEST(IntegratorTest, Rk4ConvergesWithOrderFour) {
  const double e1 = FinalError(IntegratorMethod::kRk4, 0.05);
  const double e2 = FinalError(IntegratorMethod::kRk4, 0.025);
  const double ratio = e1 / e2;
  EXPECT_GT(ratio, 15.0);
  EXPECT_LT(ratio, 17.0);
}

TEST(IntegratorTest, Dopri5MatchesHarmonicOscillatorToTolerance) {
  const Start s = OscillatorStart();
  std::vector<double> times;
  for (int i = 0; i <= 50; ++i) times.push_back(0.1 * i);  // 5 s, 1.6 periods
  const Trajectory traj = Rollout(Oscillator, s.x0, s.v0, times, IntegratorMethod::kDopri5);
  ASSERT_EQ(traj.x.sizes(), (std::vector<int64_t>{2, 51, 2}));
  ASSERT_EQ(traj.xdot.sizes(), (std::vector<int64_t>{2, 51, 2}));
  double max_err = 0.0;
  for (size_t i = 0; i < times.size(); ++i) {
    const torch::Tensor exact = ExactPosition(s.x0, s.v0, times[i]);
    max_err = std::max(max_err, (traj.x.select(1, i) - exact).abs().max().item<double>());
  }
  // Local error per step ≤ tolerance (1.4e-8 · (1 + |y|)); the global error over ~100 steps
  // stays within a few hundred times that.
  EXPECT_LT(max_err, 1e-6);
  EXPECT_GT(traj.accepted_steps, 0);
  EXPECT_GE(traj.rejected_steps, 0);
  EXPECT_EQ(traj.evaluations, 1 + 1 + 6 * (traj.accepted_steps + traj.rejected_steps));
  // Velocities too: ẋ(t) = −x0 ω sin ωt + v0 cos ωt.
  const double t = times.back();
  const torch::Tensor v_exact = -s.x0 * kOmega * std::sin(kOmega * t) + s.v0 * std::cos(kOmega * t);
  EXPECT_LT((traj.xdot.select(1, 50) - v_exact).abs().max().item<double>(), 2e-6);
}

TEST(IntegratorTest, Dopri5TighterToleranceIsMoreAccurate) {
  const Start s = OscillatorStart();
  auto error = [&](double tol) {
    IntegratorOptions o;
    o.rtol = o.atol = tol;
    const Trajectory traj =
        Rollout(Oscillator, s.x0, s.v0, {0.0, 3.0}, IntegratorMethod::kDopri5, o);
    return (traj.x.select(1, 1) - ExactPosition(s.x0, s.v0, 3.0)).abs().max().item<double>();
  };
  const double loose = error(1e-5), tight = error(1e-10);
  EXPECT_LT(tight, loose);
  EXPECT_LT(tight, 1e-8);
}

TEST(IntegratorTest, GradientFlowsThroughRollout) {
  // ∂x(T)/∂x0 = cos ωT for the oscillator.
  const double t_end = 0.8;
  for (IntegratorMethod method : {IntegratorMethod::kRk4, IntegratorMethod::kDopri5}) {
    torch::Tensor x0 = torch::tensor({{0.7}}, kF64).requires_grad_(true);
    const torch::Tensor v0 = torch::tensor({{0.1}}, kF64);
    const Trajectory traj = Rollout(Oscillator, x0, v0, 0.01, 80, method);
    ASSERT_NEAR(80 * 0.01, t_end, 1e-12);
    const torch::Tensor g = torch::autograd::grad({traj.x.select(1, 80).sum()}, {x0})[0];
    EXPECT_NEAR(g.item<double>(), std::cos(kOmega * t_end), 1e-7) << IntegratorMethodString(method);
  }
}

TEST(IntegratorTest, FollowsDtypeOfTheInitialState) {
  const torch::Tensor x0 = torch::ones({3, 4}), v0 = torch::zeros({3, 4});
  for (IntegratorMethod method :
       {IntegratorMethod::kEuler, IntegratorMethod::kRk4, IntegratorMethod::kDopri5}) {
    const Trajectory traj = Rollout(Oscillator, x0, v0, 0.01, 5, method);
    EXPECT_EQ(traj.x.scalar_type(), torch::kFloat32);
    EXPECT_EQ(traj.x.sizes(), (std::vector<int64_t>{3, 6, 4}));
    EXPECT_TRUE(torch::equal(traj.x.select(1, 0), x0));
  }
}

TEST(IntegratorTest, SubstepsEqualSmallerSteps) {
  const Start s = OscillatorStart();
  IntegratorOptions o;
  o.substeps = 4;
  const Trajectory coarse = Rollout(Oscillator, s.x0, s.v0, 0.04, 5, IntegratorMethod::kEuler, o);
  const Trajectory fine = Rollout(Oscillator, s.x0, s.v0, 0.01, 20, IntegratorMethod::kEuler);
  EXPECT_LT((coarse.x.select(1, 5) - fine.x.select(1, 20)).abs().max().item<double>(), 1e-14);
  EXPECT_EQ(coarse.accepted_steps, 20);
}

TEST(IntegratorTest, StepBudgetThrowsNumericalError) {
  const Start s = OscillatorStart();
  IntegratorOptions o;
  o.max_steps = 5;
  EXPECT_THROW(Rollout(Oscillator, s.x0, s.v0, {0.0, 100.0}, IntegratorMethod::kDopri5, o),
               NumericalError);
  try {
    Rollout(Oscillator, s.x0, s.v0, {0.0, 100.0}, IntegratorMethod::kDopri5, o);
  } catch (const NumericalError& e) {
    EXPECT_NE(std::string(e.what()).find("max_steps = 5"), std::string::npos) << e.what();
  }
}

TEST(IntegratorTest, NonFiniteStatesThrowNumericalError) {
  // ẍ = x³ blows up in finite time (x0 = 1: t* = √2 ≈ 1.41 s).
  auto blow_up = [](const torch::Tensor& x, const torch::Tensor&) { return x.pow(3) * 1e3; };
  const torch::Tensor x0 = torch::ones({1, 1}, kF64), v0 = torch::zeros({1, 1}, kF64);
  for (IntegratorMethod method : {IntegratorMethod::kEuler, IntegratorMethod::kRk4}) {
    EXPECT_THROW(Rollout(blow_up, x0, v0, 0.1, 50, method), NumericalError);
  }
  EXPECT_THROW(Rollout(blow_up, x0, v0, {0.0, 10.0}, IntegratorMethod::kDopri5), NumericalError);
  auto nan = [](const torch::Tensor& x, const torch::Tensor&) {
    return x * std::numeric_limits<double>::quiet_NaN();
  };
  for (IntegratorMethod method :
       {IntegratorMethod::kEuler, IntegratorMethod::kRk4, IntegratorMethod::kDopri5}) {
    EXPECT_THROW(Rollout(nan, x0, v0, 0.1, 3, method), NumericalError);
  }
}

TEST(IntegratorTest, VerletConvergesWithOrderTwo) {
  const double e1 = FinalError(IntegratorMethod::kVerlet, 0.01);
  const double e2 = FinalError(IntegratorMethod::kVerlet, 0.005);
  const double ratio = e1 / e2;
  EXPECT_GT(ratio, 3.8);
  EXPECT_LT(ratio, 4.2);
}

// Constant acceleration a: j steps of Δt from (x0, v0). The truth is x0 + jΔt v0 + a (jΔt)²/2;
// explicit Euler gives a Δt² j(j−1)/2 instead (docs/method.md §5), RK4 and Verlet are exact,
// and Euler with n substeps gives a Δt² j(j − 1/n)/2.
TEST(IntegratorTest, ConstantAccelerationClosedForms) {
  const double a = 1.7, dt = 0.02;
  auto constant = [a](const torch::Tensor& x, const torch::Tensor&) {
    return torch::full_like(x, a);
  };
  const torch::Tensor x0 = torch::tensor({{0.3}}, kF64), v0 = torch::tensor({{-0.8}}, kF64);
  for (int substeps : {1, 4}) {
    IntegratorOptions o;
    o.substeps = substeps;
    for (IntegratorMethod m :
         {IntegratorMethod::kEuler, IntegratorMethod::kRk4, IntegratorMethod::kVerlet}) {
      const Trajectory traj = Rollout(constant, x0, v0, dt, 4, m, o);
      for (int j = 0; j <= 4; ++j) {
        const double factor =
            m == IntegratorMethod::kEuler ? 0.5 * j * (j - 1.0 / substeps) : 0.5 * j * j;
        const double expected = 0.3 - 0.8 * j * dt + a * dt * dt * factor;
        EXPECT_NEAR(traj.x[0][j][0].item<double>(), expected, 1e-14)
            << IntegratorMethodString(m) << " substeps " << substeps << " j " << j;
        EXPECT_NEAR(traj.xdot[0][j][0].item<double>(), -0.8 + a * j * dt, 1e-13);
      }
    }
  }
}

// Fitting the acceleration of exact constant-acceleration data with the dynamics loss of
// P = 4 steps (Σ_j ‖x_j − x̂_j‖²): Euler's least-squares optimum is Σj³(j−1) / Σj²(j−1)² =
// 254/184 times the truth (docs/method.md §5), RK4's and Verlet's the truth.
TEST(IntegratorTest, EulerLossOverestimatesTheAcceleration) {
  const double a_true = 2.0, dt = 0.05;
  const torch::Tensor x0 = torch::zeros({1, 1}, kF64), v0 = torch::full({1, 1}, 0.4, kF64);
  auto loss_gradient = [&](IntegratorMethod m, double c) {
    torch::Tensor param = torch::full({1}, c, kF64).requires_grad_(true);
    auto acc = [&](const torch::Tensor& x, const torch::Tensor&) {
      return torch::zeros_like(x) + param;
    };
    torch::Tensor state_x = x0, state_v = v0, loss = torch::zeros({}, kF64);
    for (int j = 1; j <= 4; ++j) {
      PhaseState next = FixedStep(m, acc, state_x, state_v, dt);
      state_x = next.x;
      state_v = next.xdot;
      const double truth = 0.4 * j * dt + 0.5 * a_true * (j * dt) * (j * dt);
      loss = loss + (state_x - truth).square().sum();
    }
    return torch::autograd::grad({loss}, {param})[0].item<double>();
  };
  for (auto [m, expected] :
       {std::pair{IntegratorMethod::kEuler, 254.0 / 184.0}, std::pair{IntegratorMethod::kRk4, 1.0},
        std::pair{IntegratorMethod::kVerlet, 1.0}}) {
    // The loss is quadratic in the acceleration: the optimum from two gradients.
    const double g0 = loss_gradient(m, 0.0), g1 = loss_gradient(m, 1.0);
    EXPECT_NEAR(-g0 / (g1 - g0) / a_true, expected, 1e-9) << IntegratorMethodString(m);
  }
  EXPECT_THROW(FixedStep(IntegratorMethod::kDopri5, Oscillator, x0, v0, dt), InputError);
}

TEST(IntegratorTest, RejectsMalformedInput) {
  const Start s = OscillatorStart();
  EXPECT_THROW(Rollout(Oscillator, s.x0, s.v0, {0.0, 0.0}, IntegratorMethod::kRk4), InputError);
  EXPECT_THROW(Rollout(Oscillator, s.x0, s.v0, std::vector<double>{}, IntegratorMethod::kRk4),
               InputError);
  EXPECT_THROW(Rollout(Oscillator, s.x0, s.v0.narrow(1, 0, 1), 0.1, 2, IntegratorMethod::kRk4),
               InputError);
  EXPECT_THROW(Rollout(Oscillator, s.x0, s.v0, -0.1, 2, IntegratorMethod::kRk4), InputError);
  IntegratorOptions o;
  o.rtol = 0.0;
  EXPECT_THROW(Rollout(Oscillator, s.x0, s.v0, 0.1, 2, IntegratorMethod::kDopri5, o), InputError);
  EXPECT_THROW(ParseIntegratorMethod("leapfrog"), InputError);
  EXPECT_EQ(ParseIntegratorMethod("dopri5"), IntegratorMethod::kDopri5);
  EXPECT_EQ(ParseIntegratorMethod("verlet"), IntegratorMethod::kVerlet);
  EXPECT_EQ(IntegratorMethodString(IntegratorMethod::kVerlet), "verlet");
}

TEST(IntegratorTest, DynamicsWithActionDrivesTheIntegrator) {
  // ẍ = u (constant action): x(t) = x0 + v0 t + u t²/2, exact for RK4.
  FunctionDynamics dynamics([](const torch::Tensor& x, const torch::Tensor&,
                               const torch::Tensor& u) { return torch::zeros_like(x) + u; });
  const torch::Tensor u = torch::tensor({{0.5, -1.0}}, kF64);
  const torch::Tensor x0 = torch::zeros({1, 2}, kF64), v0 = torch::ones({1, 2}, kF64);
  const Trajectory traj = Rollout(dynamics.WithAction(u), x0, v0, 0.1, 10, IntegratorMethod::kRk4);
  const torch::Tensor expected = x0 + v0 * 1.0 + u * 0.5;
  EXPECT_LT((traj.x.select(1, 10) - expected).abs().max().item<double>(), 1e-13);
}

}  // namespace
}  // namespace keycld
