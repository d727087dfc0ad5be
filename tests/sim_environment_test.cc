// Physics of the benchmark systems against independent truths (docs/method.md §7).
#include <gtest/gtest.h>

#include <cmath>

#include "keycld/sim/environment.h"
#include "keycld/util/error.h"
#include "test_util.h"

namespace keycld {
namespace {

constexpr double kG = 9.81;

TEST(SimEnvironment, LoadsAllSystemsWithTheirDimensionsAndTimeSteps) {
  Environment p(EnvName::kPendulum), c(EnvName::kCartpole), a(EnvName::kAcrobot);
  EXPECT_EQ(p.nq(), 1);
  EXPECT_EQ(p.nu(), 1);
  EXPECT_DOUBLE_EQ(p.timestep(), 0.02);
  EXPECT_EQ(c.nq(), 2);
  EXPECT_EQ(c.nu(), 2);
  EXPECT_DOUBLE_EQ(c.timestep(), 0.01);
  EXPECT_EQ(a.nq(), 2);
  EXPECT_EQ(a.nu(), 2);
  EXPECT_DOUBLE_EQ(a.timestep(), 0.01);
  // JointCount (no MuJoCo, used to check data-set attributes) agrees with the MJCF models.
  for (const Environment* e : {&p, &c, &a}) {
    EXPECT_EQ(JointCount(e->name()), e->nq());
    EXPECT_EQ(JointCount(e->name()), e->nv());
    EXPECT_EQ(JointCount(e->name()), e->nu());
  }
  EXPECT_EQ(p.model()->opt.integrator, mjINT_EULER);
  EXPECT_EQ(c.model()->opt.integrator, mjINT_RK4);
  EXPECT_EQ(a.model()->opt.integrator, mjINT_RK4);
  // Masses of docs/method.md §7: pendulum bob 1 kg (pole massless), cart 1 kg + pole 0.1 kg,
  // acrobot 1 kg + 1 kg.
  auto total_mass = [](const Environment& e) {
    double m = 0;
    for (int b = 1; b < e.model()->nbody; ++b) m += e.model()->body_mass[b];
    return m;
  };
  EXPECT_NEAR(total_mass(p), 1.0, 1e-12);
  EXPECT_NEAR(total_mass(c), 1.1, 1e-12);
  EXPECT_NEAR(total_mass(a), 2.0, 1e-12);
}

TEST(SimEnvironment, AngleZeroPointsUpAndKeypointsMatchTheGeometry) {
  Environment p(EnvName::kPendulum);
  p.Reset(std::vector<double>{0.0}, std::vector<double>{0.0});
  auto tip = p.KeypointWorldPositions()[0];
  EXPECT_NEAR(tip[0], 0.0, 1e-12);
  EXPECT_NEAR(tip[2], 0.6 + 0.5, 1e-12);
  // Positive angle swings the bob towards +x: at θ = π/2 it is level with the pivot.
  p.Reset(std::vector<double>{M_PI / 2}, std::vector<double>{0.0});
  tip = p.KeypointWorldPositions()[0];
  EXPECT_NEAR(tip[0], 0.5, 1e-12);
  EXPECT_NEAR(tip[2], 0.6, 1e-12);
  // Image projection: camera 2.5 m away, fovy 45°, so 0.5 m spans 0.5/(2.5 tan 22.5°) of the
  // half image; the pixel-centre grid of a 64 px image rescales by 64/63.
  auto img = p.KeypointImagePositions(64)[0];
  EXPECT_NEAR(img[0], 0.5 / (2.5 * std::tan(M_PI / 8)) * 64.0 / 63.0, 1e-9);
  EXPECT_NEAR(img[1], 0.0, 1e-9);

  Environment a(EnvName::kAcrobot);
  a.Reset(std::vector<double>{M_PI / 2, -M_PI / 2}, std::vector<double>{0.0, 0.0});
  auto kp = a.KeypointWorldPositions();
  EXPECT_NEAR(kp[0][0], 1.0, 1e-12);  // elbow 1 m right of the shoulder
  EXPECT_NEAR(kp[0][2], 2.1, 1e-12);
  EXPECT_NEAR(kp[1][0], 1.0, 1e-12);  // lower arm straight up again (relative angle)
  EXPECT_NEAR(kp[1][2], 3.1, 1e-12);

  Environment c(EnvName::kCartpole);
  c.Reset(std::vector<double>{0.5, M_PI}, std::vector<double>{0.0, 0.0});
  kp = c.KeypointWorldPositions();
  EXPECT_NEAR(kp[0][0], 0.5, 1e-12);
  EXPECT_NEAR(kp[0][2], 1.0, 1e-12);
  EXPECT_NEAR(kp[1][0], 0.5, 1e-12);  // pole hanging down
  EXPECT_NEAR(kp[1][2], 0.0, 1e-12);
}

TEST(SimEnvironment, UnactuatedPendulumConservesEnergyOverARun) {
  // MuJoCo's Euler integrator is semi-implicit (symplectic Euler: v ← v + h a(q), q ← q + h v).
  // Its energy E oscillates by O(h) without drifting; what it conserves to O(h²) is the
  // modified energy Ẽ = E − (h/2) H_p H_q = E + (h/2) θ̇ m g l sin θ (backward error analysis
  // of symplectic Euler). Stated tolerances over a 50-frame run, in units of m g l = 4.9 J:
  // |E − E0| < 10 % (largest measured: 6.6 %, from θ0 = 0.5), |Ẽ − Ẽ0| < 0.5 % (largest
  // measured: 0.23 %, thirty times smaller, as the theory says), and no drift: the mean E over run
  // 10 equals that over run 1 within 1 %.
  const double m = 1.0, l = 0.5, h = 0.02, mgl = m * kG * l;
  for (double theta0 : {0.5, 1.0, 2.0, 3.0, 3.1}) {
    Environment p(EnvName::kPendulum);
    p.Reset(std::vector<double>{theta0}, std::vector<double>{0.0});
    auto modified = [&] {
      return p.TotalEnergy() + 0.5 * h * p.qvel()[0] * mgl * std::sin(p.qpos()[0]);
    };
    const double e0 = p.TotalEnergy(), m0 = modified();
    // Independent truth: at rest, all energy is the potential m g z of the bob.
    EXPECT_NEAR(e0, m * kG * (0.6 + l * std::cos(theta0)), 1e-9) << "θ0 = " << theta0;
    double dev = 0, dev_modified = 0, mean_first = 0, mean_last = 0;
    for (int run = 0; run < 10; ++run) {
      for (int t = 0; t < 50; ++t) {
        p.Step();
        double e = p.TotalEnergy();
        if (run == 0) {
          dev = std::max(dev, std::abs(e - e0));
          dev_modified = std::max(dev_modified, std::abs(modified() - m0));
          mean_first += e / 50;
        }
        if (run == 9) mean_last += e / 50;
      }
    }
    EXPECT_LT(dev, 0.10 * mgl) << "θ0 = " << theta0 << ": |E − E0| = " << dev << " J";
    EXPECT_LT(dev_modified, 0.005 * mgl) << "θ0 = " << theta0 << ": |Ẽ − Ẽ0| = " << dev_modified;
    EXPECT_NEAR(mean_last, mean_first, 0.01 * mgl) << "θ0 = " << theta0 << ": energy drifts";
  }
}

TEST(SimEnvironment, SmallAnglePeriodMatchesTheMathematicalPendulum) {
  Environment p(EnvName::kPendulum);
  const double amplitude = 0.05;  // rad, around the hanging equilibrium θ = π
  p.Reset(std::vector<double>{M_PI + amplitude}, std::vector<double>{0.0});
  // Times where θ − π crosses zero downwards, linearly interpolated between steps.
  std::vector<double> crossings;
  double prev = amplitude, prev_t = 0;
  while (crossings.size() < 4 && p.time() < 20) {
    p.Step();
    double cur = p.qpos()[0] - M_PI;
    if (prev > 0 && cur <= 0)
      crossings.push_back(prev_t + (p.time() - prev_t) * prev / (prev - cur));
    prev = cur;
    prev_t = p.time();
  }
  ASSERT_EQ(crossings.size(), 4u);
  const double period = (crossings[3] - crossings[0]) / 3.0;
  const double analytic = 2 * M_PI * std::sqrt(0.5 / kG);
  EXPECT_NEAR(period / analytic, 1.0, 0.01) << "period " << period << " s vs " << analytic;
}

TEST(SimEnvironment, ConstantTorqueFollowsTheSignConvention) {
  Environment p(EnvName::kPendulum);
  // Hanging at rest: gravity is balanced, so the torque alone decides the direction.
  p.Reset(std::vector<double>{M_PI}, std::vector<double>{0.0});
  p.SetAction(std::vector<double>{1.0});
  for (int t = 0; t < 5; ++t) p.Step();
  EXPECT_GT(p.qvel()[0], 0.0);
  EXPECT_GT(p.qpos()[0], M_PI);
  // Angle above π: sin < 0, so the bob is left of the pivot (x < 0).
  EXPECT_LT(p.KeypointWorldPositions()[0][0], 0.0);
  // Torque = gear (2) · u; at rest θ̈ = τ / I with I = m l² + sphere inertia.
  p.Reset(std::vector<double>{M_PI}, std::vector<double>{0.0});
  p.SetAction(std::vector<double>{-1.0});
  p.Step();
  const double inertia = 0.5 * 0.5 + 0.4 * 0.05 * 0.05;
  EXPECT_NEAR(p.qvel()[0] / p.timestep(), -2.0 / inertia, 1e-6);
}

TEST(SimEnvironment, CartForceMovesTheCartAlongPlusX) {
  Environment c(EnvName::kCartpole);
  c.Reset(std::vector<double>{0.0, M_PI}, std::vector<double>{0.0, 0.0});
  c.SetAction(std::vector<double>{1.0, 0.0});
  for (int t = 0; t < 10; ++t) c.Step();
  EXPECT_GT(c.qpos()[0], 0.0);
  EXPECT_NEAR(c.time(), 0.1, 1e-12);
}

TEST(SimEnvironment, RandomResetsFollowTheProtocolRanges) {
  Environment c(EnvName::kCartpole);
  for (int i = 0; i < 200; ++i) {
    Rng rng(7, 1, i);
    c.ResetRandom(rng);
    auto q = c.qpos();
    auto v = c.qvel();
    ASSERT_GE(q[0], -1.0);
    ASSERT_LT(q[0], 1.0);
    ASSERT_GE(q[1], -M_PI);
    ASSERT_LT(q[1], M_PI);
    ASSERT_LE(std::abs(v[0]), 0.1);
    ASSERT_LE(std::abs(v[1]), 0.1);
  }
  // Same (seed, stream, index) → same draw; another index → another draw.
  Rng a(3, 1, 5), b(3, 1, 5), d(3, 1, 6);
  double x = a.Uniform(0, 1);
  EXPECT_EQ(x, b.Uniform(0, 1));
  EXPECT_NE(x, d.Uniform(0, 1));
}

TEST(SimEnvironment, ActionsFollowTheControlModes) {
  int zero_runs = 0;
  const int n = 2000;
  for (int i = 0; i < n; ++i) {
    Rng rng(0, 2, i);
    auto full = SampleAction(EnvName::kAcrobot, ControlMode::kFull, 2, rng);
    ASSERT_LE(std::abs(full[0]), 2.0);
    ASSERT_LE(std::abs(full[1]), 2.0);
    if (full[0] == 0.0 && full[1] == 0.0) ++zero_runs;
    Rng rng2(0, 2, i);
    auto under = SampleAction(EnvName::kAcrobot, ControlMode::kUnder, 2, rng2);
    ASSERT_EQ(under[1], 0.0);
    ASSERT_EQ(under[0], full[0]);
    Rng rng3(0, 2, i);
    auto none = SampleAction(EnvName::kAcrobot, ControlMode::kNone, 2, rng3);
    ASSERT_EQ(none, std::vector<double>(2, 0.0));
  }
  // 20 % zero-action runs: binomial standard deviation sqrt(0.16 / 2000) ≈ 0.009.
  EXPECT_NEAR(double(zero_runs) / n, 0.2, 0.04);
}

TEST(SimEnvironment, StateGridsHaveThePlotSizes) {
  EXPECT_EQ(StateGrid(EnvName::kPendulum).size(), 16u);
  EXPECT_EQ(StateGrid(EnvName::kCartpole).size(), 256u);
  EXPECT_EQ(StateGrid(EnvName::kAcrobot).size(), 256u);
  auto g = StateGrid(EnvName::kCartpole);
  EXPECT_DOUBLE_EQ(g.front()[0], -1.0);
  EXPECT_DOUBLE_EQ(g.front()[1], -M_PI);
  EXPECT_LT(g.back()[0], 1.0);
  EXPECT_LT(g.back()[1], M_PI);
}

TEST(SimEnvironment, BadInputGivesClearErrors) {
  EXPECT_THROW(ParseEnvName("pendulm"), InputError);
  EXPECT_THROW(ParseControlMode("half"), InputError);
  EXPECT_THROW(CheckControlMode(EnvName::kPendulum, ControlMode::kUnder), InputError);
  testing::TempDir empty;
  try {
    Environment e(EnvName::kAcrobot, empty.path());
    FAIL() << "a missing MJCF must throw";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("acrobot.xml"), std::string::npos);
  }
  Environment p(EnvName::kPendulum);
  EXPECT_THROW(p.Reset(std::vector<double>{0, 0}, std::vector<double>{0}), InputError);
  EXPECT_THROW(p.SetAction(std::vector<double>{1, 2}), InputError);
  EXPECT_THROW(p.Reset(std::vector<double>{NAN}, std::vector<double>{0}), InputError);
  EXPECT_THROW(p.Reset(std::vector<double>{0}, std::vector<double>{INFINITY}), InputError);
}

}  // namespace
}  // namespace keycld
