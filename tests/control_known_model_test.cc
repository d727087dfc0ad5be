// The known cartpole and acrobot in keypoint coordinates (control/known_model.h) against
// MuJoCo: constants against the joint-space mass matrix, energies against MuJoCo's energies,
// and the constrained Euler–Lagrange acceleration (docs/method.md §5) against MuJoCo's
// acceleration mapped through the kinematics, over random states and actions.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "keycld/control/closed_loop.h"
#include "keycld/control/known_model.h"
#include "keycld/sim/gl_context.h"
#include "keycld/util/error.h"

namespace keycld {
namespace {

constexpr int kSize = 32;

class KnownModelTest : public ::testing::TestWithParam<EnvName> {};

// Keypoints p(q) and, along q(t) = q + t q̇ + ½ t² q̈, their velocity and acceleration by
// central differences (step h; errors O(h²)).
struct Kinematics {
  std::array<double, 4> p, v, a;
};
Kinematics Differentiate(const KnownModel& model, const std::array<double, 2>& q,
                         const std::array<double, 2>& qd, const std::array<double, 2>& qdd) {
  const double h = 1e-4;
  auto at = [&](double t) {
    const std::array<double, 2> qt = {q[0] + t * qd[0] + 0.5 * t * t * qdd[0],
                                      q[1] + t * qd[1] + 0.5 * t * t * qdd[1]};
    return model.KeypointsOfState(qt);
  };
  const auto p0 = at(0), pp = at(h), pm = at(-h);
  Kinematics k;
  for (int i = 0; i < 4; ++i) {
    k.p[size_t(i)] = p0[size_t(i)];
    k.v[size_t(i)] = (pp[size_t(i)] - pm[size_t(i)]) / (2 * h);
    k.a[size_t(i)] = (pp[size_t(i)] - 2 * p0[size_t(i)] + pm[size_t(i)]) / (h * h);
  }
  return k;
}

torch::Tensor Row(const std::array<double, 4>& v) {
  return torch::tensor({v[0], v[1], v[2], v[3]}, torch::kFloat64).reshape({1, 4});
}

TEST_P(KnownModelTest, SecondLinkPointMassReproducesItsInertia) {
  Environment env(GetParam());
  KnownModel model(env, kSize);
  // Joint-space mass matrix at q = 0: entry (1, 1) is the second link's inertia about its hinge.
  const std::array<double, 2> zero = {0, 0};
  env.Reset(zero, zero);
  mjtNum M[4];
  mj_fullM(env.model(), M, env.data()->qM);
  const int link = env.model()->jnt_bodyid[1];
  const double m = env.model()->body_mass[link];
  const double* com = env.data()->xipos + 3 * link;
  const double* hinge = env.data()->xanchor + 3;
  const double c = std::hypot(com[0] - hinge[0], com[1] - hinge[1], com[2] - hinge[2]);
  EXPECT_NEAR(model.distance() * m * c, M[3], 1e-12);
  // The point mass at d carries m·c/d, so the pair has the link's mass and centre of mass.
  EXPECT_NEAR(model.masses()[1] * model.distance(), m * c, 1e-12);
  // A thin rod puts 3/4 of its mass at 2/3 of its length; these capsules are close to that.
  EXPECT_GT(model.distance(), 0.6);
  EXPECT_LT(model.distance(), 0.75);
  std::printf("%s: d = %.4f m, point masses %.4f, %.4f kg, scale %.4f units/m\n",
              EnvNameString(GetParam()).c_str(), model.distance(), model.masses()[0],
              model.masses()[1], model.scale());
}

// ½ ẋᵀ M ẋ equals MuJoCo's kinetic energy and V − V(0) its potential energy change.
TEST_P(KnownModelTest, EnergiesEqualMujocos) {
  Environment env(GetParam());
  KnownModel model(env, kSize);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> angle(-M_PI, M_PI), speed(-3, 3);
  const std::array<double, 2> zero = {0, 0};
  env.Reset(zero, zero);
  mj_energyPos(env.model(), env.data());
  const double V0_mujoco = env.data()->energy[0];
  const double V0 = model.Potential(Row(model.KeypointsOfState(zero))).item<double>();
  for (int trial = 0; trial < 20; ++trial) {
    const std::array<double, 2> q = {angle(rng), angle(rng)}, qd = {speed(rng), speed(rng)};
    env.Reset(q, qd);
    mj_energyPos(env.model(), env.data());
    mj_energyVel(env.model(), env.data());
    const Kinematics k = Differentiate(model, q, qd, zero);
    const auto v = Row(k.v);
    const double kinetic = 0.5 * (model.MassDiagonal() * v * v).sum().item<double>();
    EXPECT_NEAR(kinetic, env.data()->energy[1], 1e-6 * (1 + env.data()->energy[1]))
        << "trial " << trial;
    const double V = model.Potential(Row(k.p)).item<double>() - V0;
    EXPECT_NEAR(V, env.data()->energy[0] - V0_mujoco, 1e-9) << "trial " << trial;
  }
}

// p̈ = d²/dt² p(q(t)) with q̈ from mj_forward under random actions equals the known model's
// constrained acceleration at (p, ṗ, u).
TEST_P(KnownModelTest, AccelerationMatchesMujocoInImageCoordinates) {
  Environment env(GetParam());
  KnownModel model(env, kSize);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> angle(-M_PI, M_PI), speed(-3, 3), action(-2, 2);
  double worst = 0;
  for (int trial = 0; trial < 30; ++trial) {
    std::array<double, 2> q = {angle(rng), angle(rng)}, qd = {speed(rng), speed(rng)};
    if (GetParam() == EnvName::kCartpole) q[0] = 0.5 * q[0] / M_PI;  // cart within ±0.5 m
    const std::array<double, 2> u = {action(rng), action(rng)};
    env.Reset(q, qd);
    env.SetAction(u);
    mj_forward(env.model(), env.data());
    const std::array<double, 2> qdd = {env.data()->qacc[0], env.data()->qacc[1]};
    const Kinematics k = Differentiate(model, q, qd, qdd);
    const auto a =
        model.Acceleration(Row(k.p), Row(k.v), torch::tensor({u[0], u[1]}, torch::kFloat64));
    const auto want = Row(k.a);
    const double scale = 1 + want.abs().max().item<double>();
    const double err = (a - want).abs().max().item<double>() / scale;
    worst = std::max(worst, err);
    EXPECT_LT(err, 1e-5) << "trial " << trial << ": q " << q[0] << ", " << q[1] << "; got " << a
                         << ", want " << want;
  }
  std::printf("largest relative acceleration error: %.2e\n", worst);
}

TEST_P(KnownModelTest, OracleKeypointsFollowTheSimulatorAndShapesAreChecked) {
  Environment env(GetParam());
  KnownModel model(env, kSize);
  const std::array<double, 2> q = {0.3, -1.1}, zero = {0, 0};
  env.Reset(q, zero);
  std::vector<uint8_t> image(size_t(kSize) * kSize * 3);
  const auto x = model.EstimateKeypoints(image);
  const auto want = model.KeypointsOfState(q);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(x[0][i].item<double>(), want[size_t(i)], 1e-12);
  // The constraints hold at the oracle's keypoints: a velocity along them is kept.
  const auto v = model.ProjectTangent(x, Row(Differentiate(model, q, {0.4, 0.9}, zero).v));
  EXPECT_LT((v - Row(Differentiate(model, q, {0.4, 0.9}, zero).v)).abs().max().item<double>(),
            1e-6);
  std::vector<uint8_t> wrong(10);
  EXPECT_THROW(model.EstimateKeypoints(wrong), InputError);
  EXPECT_THROW(model.Potential(torch::zeros({1, 2}, torch::kFloat64)), InputError);
  EXPECT_THROW(model.InputMatrix(torch::zeros({4}, torch::kFloat64)), InputError);
}

INSTANTIATE_TEST_SUITE_P(Envs, KnownModelTest,
                         ::testing::Values(EnvName::kCartpole, EnvName::kAcrobot),
                         [](const auto& info) { return EnvNameString(info.param); });

// The controller of docs/method.md §10 with the paper's form (u = B⁺(∇V − K_p(x − x*) − K_d ẋ),
// default gains, no action limit) on the known models, in closed loop with MuJoCo: swing-ups
// from hanging and moves to non-trivial targets, each reached and held (0.05 rad, 0.05 m, joint
// speeds under 0.5 during the last second of 6 s).
struct ClosedLoopCase {
  EnvName env;
  std::vector<double> init, target;
};

class KnownModelClosedLoop : public ::testing::TestWithParam<ClosedLoopCase> {};

TEST_P(KnownModelClosedLoop, ReachesAndHoldsTheTarget) {
  const ClosedLoopCase& c = GetParam();
  auto gl = GlContext::Create(GlBackend::kAuto);
  Environment env(c.env);
  const int size = 16;
  OffscreenRenderer renderer(env, *gl, size);
  KnownModel model(env, size);
  ControlTarget target = TargetFromState(env, renderer, model, c.target);
  env.Reset(c.init, std::vector<double>(c.init.size(), 0.0));
  EnergyShapingController controller(model, target.keypoints, ControllerOptions{});
  ClosedLoop loop(env, renderer, model, controller);
  std::vector<ControlStep> steps;
  const int n = int(std::lround(6.0 / env.timestep()));
  for (int i = 0; i < n; ++i) steps.push_back(loop.Step());
  const ControlVerdict v = JudgeControl(env, steps, c.target, 0.05, 0.05, 1.0, 0.5);
  double u_max = 0;
  for (const auto& s : steps)
    for (double u : s.action) u_max = std::max(u_max, std::abs(u));
  EXPECT_TRUE(v.success) << "final errors " << v.final_errors[0] << ", " << v.final_errors[1]
                         << "; largest speed in the hold " << v.max_hold_speed;
  std::printf("%s from (%.2f, %.2f) to (%.2f, %.2f): settled after %.2f s, max |u| %.2f\n",
              EnvNameString(c.env).c_str(), c.init[0], c.init[1], c.target[0], c.target[1],
              v.settle_time, u_max);
}

INSTANTIATE_TEST_SUITE_P(
    Targets, KnownModelClosedLoop,
    ::testing::Values(
        // Cartpole (x m, θ rad): swing-up from hanging with the cart moved to ±1 m.
        ClosedLoopCase{EnvName::kCartpole, {0.0, 3.1}, {-1.0, 0.0}},
        ClosedLoopCase{EnvName::kCartpole, {0.5, -2.0}, {1.0, 0.0}},
        // Acrobot (shoulder, elbow): swing-up to upright, and to a bent configuration.
        ClosedLoopCase{EnvName::kAcrobot, {3.04, 0.0}, {0.0, 0.0}},
        ClosedLoopCase{EnvName::kAcrobot, {-2.5, 0.5}, {0.5, -1.0}}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

TEST(KnownModel, RefusesThePendulum) {
  Environment env(EnvName::kPendulum);
  EXPECT_THROW(KnownModel(env, kSize), InputError);
}

}  // namespace
}  // namespace keycld
