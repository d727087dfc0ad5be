// Constrained Euler–Lagrange dynamics (docs/method.md §5) against independent truths: the analytic
// small-angle pendulum, an independent 1-D integration of θ̈ = −(g/l) sin θ, conservation of
// energy, Φ̈ = D ẍ + h = 0, the tangent-space projection, finite values at singular
// configurations, and autograd against finite differences.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <memory>

#include "keycld/dynamics/constraints.h"
#include "keycld/dynamics/integrators.h"
#include "keycld/dynamics/lagrangian.h"
#include "keycld/util/error.h"

namespace keycld {
namespace {

const torch::TensorOptions kF64 = torch::TensorOptions().dtype(torch::kFloat64);
constexpr double kG = 9.81;  // gravity in normalized image units / s² (hand-set)
constexpr double kL = 0.5;   // pendulum length of docs/method.md §4

// V = g · m² · y for one point mass per batch row; m is [K] = [1] or [B, 1].
std::shared_ptr<EnergyModel> GravityModel(torch::Tensor mass_scalars) {
  return std::make_shared<FunctionalEnergyModel>(
      FunctionalEnergyModel::Functions{.potential =
                                           [m = mass_scalars](const torch::Tensor& x) {
                                             return kG * m.square().reshape({-1}) * x.select(1, 1);
                                           },
                                       .mass_scalars = [m = mass_scalars]() { return m; }});
}

// Pendulum states at angle θ from the bottom (0 = hanging down), at rest.
torch::Tensor PendulumPosition(double theta) {
  return torch::tensor({{kL * std::sin(theta), -kL * std::cos(theta)}}, kF64);
}

// Independent reference: θ̈ = −(g/l) sin θ by classic RK4 on doubles with a tiny step.
std::vector<double> ReferenceAngles(double theta0, const std::vector<double>& times) {
  const double dt = 1e-4;
  double th = theta0, om = 0.0, t = 0.0;
  auto acc = [](double a) { return -(kG / kL) * std::sin(a); };
  std::vector<double> out;
  for (double target : times) {
    while (t < target - 1e-12) {
      const double h = std::min(dt, target - t);
      const double k1t = om, k1o = acc(th);
      const double k2t = om + 0.5 * h * k1o, k2o = acc(th + 0.5 * h * k1t);
      const double k3t = om + 0.5 * h * k2o, k3o = acc(th + 0.5 * h * k2t);
      const double k4t = om + h * k3o, k4o = acc(th + h * k3t);
      th += h / 6 * (k1t + 2 * k2t + 2 * k3t + k4t);
      om += h / 6 * (k1o + 2 * k2o + 2 * k3o + k4o);
      t += h;
    }
    out.push_back(th);
  }
  return out;
}

std::vector<double> Grid(double dt, int n) {
  std::vector<double> times;
  for (int i = 0; i <= n; ++i) times.push_back(dt * i);
  return times;
}

TEST(LagrangianDynamicsTest, SmallAnglePendulumFollowsAnalyticSolution) {
  LagrangianDynamics dynamics(HolonomicConstraints::ForEnvironment(EnvName::kPendulum),
                              GravityModel(torch::ones({1}, kF64)));
  const double theta0 = 0.01, omega = std::sqrt(kG / kL);
  const std::vector<double> times = Grid(0.05, 40);  // 2 s, 1.4 periods
  const Trajectory traj = Rollout(dynamics.WithAction({}), PendulumPosition(theta0),
                                  torch::zeros({1, 2}, kF64), times, IntegratorMethod::kDopri5);
  double max_err = 0.0;
  for (size_t i = 0; i < times.size(); ++i) {
    const double x_exact = kL * std::sin(theta0 * std::cos(omega * times[i]));
    max_err = std::max(max_err, std::abs(traj.x[0][i][0].item<double>() - x_exact));
  }
  // Amplitude 5e-3; the small-angle approximation itself is off by ≈ 3e-7 here (period
  // correction θ0²/16), so 1e-6 checks ω = sqrt(g/l) to about 1e-4 relative.
  EXPECT_LT(max_err, 1e-6);
  const double max_phi = HolonomicConstraints::ForEnvironment(EnvName::kPendulum)
                             .Phi(traj.x.reshape({-1, 2}))
                             .abs()
                             .max()
                             .item<double>();
  EXPECT_LT(max_phi, 1e-8);
  std::cout << "[ info ] small angle: max |x - analytic| = " << max_err
            << ", max |Phi| = " << max_phi << "\n";
}

TEST(LagrangianDynamicsTest, LargeSwingMatchesIndependentAngleIntegration) {
  // Two batch rows with different masses ([B, K] mass scalars); gravity ∝ mass, so both swing
  // alike.
  const torch::Tensor masses = torch::tensor({{1.0}, {1.7}}, kF64);
  LagrangianDynamics dynamics(HolonomicConstraints::ForEnvironment(EnvName::kPendulum),
                              GravityModel(masses));
  const double theta0 = 2.5;  // rad from the bottom: a large, strongly nonlinear swing
  const std::vector<double> times = Grid(0.05, 40);
  const torch::Tensor x0 = PendulumPosition(theta0).repeat({2, 1});
  const Trajectory traj = Rollout(dynamics.WithAction({}), x0, torch::zeros({2, 2}, kF64), times,
                                  IntegratorMethod::kDopri5);
  const std::vector<double> ref = ReferenceAngles(theta0, times);
  double max_err = 0.0;
  for (size_t i = 0; i < times.size(); ++i) {
    const torch::Tensor expected = PendulumPosition(ref[i]);
    max_err = std::max(max_err, (traj.x.select(1, i) - expected).abs().max().item<double>());
  }
  // Measured 5.8e-7 (Dormand–Prince at rtol = atol = 1.4e-8 over 2 s); a wrong model is off by
  // ~1e-2.
  EXPECT_LT(max_err, 3e-6);

  // Conservation of energy E = ½ m² |ẋ|² + g m² y and of the constraint.
  const torch::Tensor m2 = masses.square();                              // [2, 1]
  const torch::Tensor kinetic = 0.5 * m2 * traj.xdot.square().sum(2);    // [2, T]
  const torch::Tensor energy = kinetic + kG * m2 * traj.x.select(2, 1);  // [2, T]
  // Relative to the energy scale g·l·m²: measured 3.8e-7.
  const torch::Tensor drift = (energy - energy.select(1, 0).unsqueeze(1)).abs() / (m2 * kG * kL);
  EXPECT_LT(drift.max().item<double>(), 2e-6);
  const torch::Tensor phi = dynamics.constraints().Phi(traj.x.reshape({-1, 2}));
  EXPECT_LT(phi.abs().max().item<double>(), 3e-7);  // measured 6.6e-8
  std::cout << "[ info ] large swing: " << traj.accepted_steps << " accepted, "
            << traj.rejected_steps << " rejected steps; max |x - ref| = " << max_err
            << ", max |Phi| = " << phi.abs().max().item<double>()
            << ", max energy drift = " << drift.max().item<double>() << "\n";
}

TEST(LagrangianDynamicsTest, MultiplierOfHangingPendulumIsTensionOfTheRod) {
  // At the bottom with horizontal velocity w: λ = g + w²/l and ẍ = (0, w²/l), the centripetal
  // acceleration.
  const auto c = HolonomicConstraints::ForEnvironment(EnvName::kPendulum);
  const double w = 0.8;
  const torch::Tensor x = PendulumPosition(0.0);
  const torch::Tensor v = torch::tensor({{w, 0.0}}, kF64);
  const torch::Tensor f = torch::tensor({{0.0, -kG}}, kF64);
  const torch::Tensor m = torch::ones({1}, kF64);
  EXPECT_NEAR(LagrangeMultipliers(c, x, v, m, f).item<double>(), kG + w * w / kL, 1e-8);
  const torch::Tensor a = ConstrainedAcceleration(c, x, v, m, f);
  EXPECT_NEAR(a[0][0].item<double>(), 0.0, 1e-9);
  EXPECT_NEAR(a[0][1].item<double>(), w * w / kL, 1e-8);
}

class LagrangianConstraintSetTest
    : public ::testing::TestWithParam<std::tuple<EnvName, MultiplierSolver>> {};

TEST_P(LagrangianConstraintSetTest, AccelerationKeepsConstraintAccelerationZero) {
  const auto [env, solver] = GetParam();
  const auto c = HolonomicConstraints::ForEnvironment(env);
  torch::manual_seed(11);
  const int64_t b = 32;
  const torch::Tensor x = 0.6 * torch::randn({b, c.state_dim()}, kF64);
  const torch::Tensor v = torch::randn({b, c.state_dim()}, kF64);
  const torch::Tensor f = 5.0 * torch::randn({b, c.state_dim()}, kF64);
  const torch::Tensor m = 0.5 + torch::rand({c.num_keypoints()}, kF64);
  ConstraintSolveOptions options;
  options.solver = solver;
  const torch::Tensor a = ConstrainedAcceleration(c, x, v, m, f, options);
  // Φ̈ = D ẍ + h.
  const torch::Tensor phi_ddot =
      torch::matmul(c.Jacobian(x), a.unsqueeze(-1)).squeeze(-1) + c.Curvature(x, v);
  const double scale = 1.0 + c.Curvature(x, v).abs().max().item<double>() +
                       f.abs().max().item<double>() / m.square().min().item<double>();
  EXPECT_LT(phi_ddot.abs().max().item<double>(), 1e-8 * scale);

  // The constraint force Dᵀλ does no work along tangent velocities.
  const torch::Tensor vt = ProjectVelocity(c, x, v, options);
  const torch::Tensor m_diag = MassMatrixDiagonal(m);
  const torch::Tensor power = ((f - m_diag * a) * vt).sum(1);  // = (Dᵀλ)·ẋ_t
  EXPECT_LT(power.abs().max().item<double>(), 1e-7 * scale);
}

TEST_P(LagrangianConstraintSetTest, ProjectedVelocityIsTangent) {
  const auto [env, solver] = GetParam();
  const auto c = HolonomicConstraints::ForEnvironment(env);
  torch::manual_seed(12);
  const torch::Tensor x = 0.6 * torch::randn({32, c.state_dim()}, kF64);
  const torch::Tensor v = torch::randn({32, c.state_dim()}, kF64);
  ConstraintSolveOptions options;
  options.solver = solver;
  const torch::Tensor vt = ProjectVelocity(c, x, v, options);
  const torch::Tensor d = c.Jacobian(x);
  EXPECT_LT(torch::matmul(d, vt.unsqueeze(-1)).abs().max().item<double>(), 1e-9);
  // A projection: idempotent, and it only removes the normal component (|ẋ_t| ≤ |ẋ|).
  EXPECT_LT((ProjectVelocity(c, x, vt, options) - vt).abs().max().item<double>(), 1e-9);
  EXPECT_TRUE(((vt.square().sum(1) - v.square().sum(1)) <= 1e-12).all().item<bool>());
  // Orthogonal split; the Tikhonov term (ε = 1e-10) leaves an error of order ε |ẋ|².
  EXPECT_LT((((v - vt) * vt).sum(1).abs() / (1.0 + v.square().sum(1))).max().item<double>(), 1e-9);
}

TEST_P(LagrangianConstraintSetTest, FiniteNearSingularConstraintMatrix) {
  const auto [env, solver] = GetParam();
  const auto c = HolonomicConstraints::ForEnvironment(env);
  // Degenerate configurations: all points on the pivot; the two points on top of each other
  // (exactly, and 1e-9 apart); for the acrobot also the arm folded back with the tip on the pivot.
  std::vector<std::vector<double>> rows;
  if (c.num_keypoints() == 1) {
    rows = {{0.0, 0.0}, {1e-9, 0.0}, {1e-5, -1e-5}};
  } else {
    rows = {{0.0, 0.0, 0.0, 0.0}, {0.1, 0.0, 0.1, 0.0},          {0.1, 0.0, 0.1 + 1e-9, 0.0},
            {0.3, 0.0, 0.0, 0.0}, {0.0, -0.3, 0.0, -0.3 + 1e-7}, {0.2, 0.1, 0.2, 0.1 + 1e-5}};
  }
  std::vector<torch::Tensor> xs;
  for (const auto& r : rows) xs.push_back(torch::tensor(r, kF64));
  torch::Tensor x = torch::stack(xs).requires_grad_(true);
  const torch::Tensor v = torch::ones_like(x.detach());
  const torch::Tensor f = torch::ones_like(x.detach()) * -kG;
  const torch::Tensor m = torch::ones({c.num_keypoints()}, kF64).requires_grad_(true);
  ConstraintSolveOptions options;
  options.solver = solver;
  const torch::Tensor a = ConstrainedAcceleration(c, x, v, m, f, options);
  const torch::Tensor vt = ProjectVelocity(c, x, v, options);
  EXPECT_TRUE(torch::isfinite(a).all().item<bool>()) << a;
  EXPECT_TRUE(torch::isfinite(vt).all().item<bool>()) << vt;
  const auto grads = torch::autograd::grad({a.sum() + vt.sum()}, {x, m});
  EXPECT_TRUE(torch::isfinite(grads[0]).all().item<bool>()) << grads[0];
  EXPECT_TRUE(torch::isfinite(grads[1]).all().item<bool>()) << grads[1];

  // In float32 too.
  const torch::Tensor a32 =
      ConstrainedAcceleration(c, x.detach().to(torch::kFloat32), v.to(torch::kFloat32),
                              m.detach().to(torch::kFloat32), f.to(torch::kFloat32), options);
  EXPECT_TRUE(torch::isfinite(a32).all().item<bool>()) << a32;
}

INSTANTIATE_TEST_SUITE_P(
    Environments, LagrangianConstraintSetTest,
    ::testing::Combine(::testing::Values(EnvName::kPendulum, EnvName::kCartpole, EnvName::kAcrobot),
                       ::testing::Values(MultiplierSolver::kTikhonov,
                                         MultiplierSolver::kPseudoInverse)),
    [](const auto& info) {
      return EnvNameString(std::get<0>(info.param)) +
             (std::get<1>(info.param) == MultiplierSolver::kTikhonov ? "_tikhonov" : "_pinv");
    });

TEST(LagrangianDynamicsTest, GradientMatchesFiniteDifferences) {
  // Training backpropagates through ẍ into the keypoints x and the mass scalars.
  const auto c = HolonomicConstraints::ForEnvironment(EnvName::kCartpole);
  torch::manual_seed(13);
  const torch::Tensor x0 = 0.5 * torch::randn({4, 4}, kF64);
  const torch::Tensor v = torch::randn({4, 4}, kF64);
  const torch::Tensor f = torch::randn({4, 4}, kF64);
  const torch::Tensor w = torch::randn({4, 4}, kF64);  // random linear read-out
  const torch::Tensor m = torch::tensor({0.9, 1.3}, kF64);
  auto loss = [&](const torch::Tensor& x) {
    return (ConstrainedAcceleration(c, x, v, m, f) * w).sum();
  };
  torch::Tensor x = x0.clone().requires_grad_(true);
  const torch::Tensor g = torch::autograd::grad({loss(x)}, {x})[0];
  const double s = 1e-6;
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      torch::Tensor e = torch::zeros_like(x0);
      e[i][j] = s;
      const double fd = (loss(x0 + e).item<double>() - loss(x0 - e).item<double>()) / (2 * s);
      EXPECT_NEAR(g[i][j].item<double>(), fd, 1e-6 * (1.0 + std::abs(fd))) << i << "," << j;
    }
  }
}

TEST(LagrangianDynamicsTest, UnconstrainedAblationIsInverseMassTimesForce) {
  const torch::Tensor m = torch::tensor({2.0, 0.5}, kF64);
  auto energy = std::make_shared<FunctionalEnergyModel>(FunctionalEnergyModel::Functions{
      .potential = [](const torch::Tensor& x) { return 0.5 * x.square().sum(1); },
      .input_matrix =
          [](const torch::Tensor& x) {
            return torch::ones({x.size(0), x.size(1), 1}, x.options());
          },
      .mass_scalars = [m]() { return m; }});
  LagrangianDynamics nc(HolonomicConstraints::None(2), energy);
  torch::manual_seed(14);
  const torch::Tensor x = torch::randn({3, 4}, kF64), v = torch::randn({3, 4}, kF64);
  const torch::Tensor u = torch::tensor({{0.5}, {-1.0}, {2.0}}, kF64);
  const torch::Tensor expected = (-x + u) / torch::tensor({4.0, 4.0, 0.25, 0.25}, kF64);
  EXPECT_LT((nc.Acceleration(x, v, u) - expected).abs().max().item<double>(), 1e-14);
  EXPECT_TRUE(torch::equal(nc.ProjectVelocity(x, v), v));
  // A shared action [A] broadcasts over the batch.
  const torch::Tensor shared = (-x + 0.5) / torch::tensor({4.0, 4.0, 0.25, 0.25}, kF64);
  EXPECT_LT((nc.Acceleration(x, v, torch::tensor({0.5}, kF64)) - shared).abs().max().item<double>(),
            1e-14);
  EXPECT_THROW(nc.Acceleration(x, v, torch::ones({3, 2}, kF64)), InputError);
}

TEST(LagrangianDynamicsTest, AutogradPotentialGradientReachesParametersAndWorksWithoutGrad) {
  // V = ½ k |x|² with a trainable stiffness k: ∇V = k x.
  torch::Tensor k = torch::tensor(3.0, kF64).requires_grad_(true);
  FunctionalEnergyModel energy(
      {.potential = [k](const torch::Tensor& x) { return 0.5 * k * x.square().sum(1); },
       .mass_scalars = []() { return torch::ones({1}, kF64); }});
  const torch::Tensor x = torch::tensor({{0.3, -0.2}, {1.0, 2.0}}, kF64);
  const torch::Tensor grad_v = energy.PotentialGradient(x);
  EXPECT_LT((grad_v - 3.0 * x).abs().max().item<double>(), 1e-14);
  const torch::Tensor dk = torch::autograd::grad({grad_v.sum()}, {k})[0];
  EXPECT_NEAR(dk.item<double>(), x.sum().item<double>(), 1e-14);
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor g = energy.PotentialGradient(x);
    EXPECT_FALSE(g.requires_grad());
    EXPECT_LT((g - 3.0 * x).abs().max().item<double>(), 1e-14);
  }
}

TEST(LagrangianDynamicsTest, RejectsMalformedInput) {
  const auto c = HolonomicConstraints::ForEnvironment(EnvName::kCartpole);
  const torch::Tensor x = torch::zeros({2, 4}, kF64);
  EXPECT_THROW(ConstrainedAcceleration(c, x, x, torch::ones({3}, kF64), x), InputError);
  EXPECT_THROW(ConstrainedAcceleration(c, x, x, torch::ones({2}, kF64), x.narrow(0, 0, 1)),
               InputError);
  EXPECT_THROW(ProjectVelocity(c, x, torch::zeros({2, 2}, kF64)), InputError);
  EXPECT_THROW(LagrangianDynamics(c, nullptr), InputError);
  EXPECT_THROW(FunctionalEnergyModel(FunctionalEnergyModel::Functions{}), InputError);
}

}  // namespace
}  // namespace keycld
