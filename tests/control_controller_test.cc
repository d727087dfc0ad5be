// The true pendulum in keypoint coordinates against MuJoCo, and the energy-shaping controller
// (docs/method.md §10) against the closed-loop equation it must produce.
#include <gtest/gtest.h>

#include <cmath>

#include "keycld/control/controller.h"
#include "keycld/control/true_pendulum.h"
#include "keycld/util/error.h"

namespace keycld {
namespace {

constexpr int kSize = 32;

// The tip in normalized image coordinates at angle θ, by the simulator's own projection.
std::array<double, 2> TipAt(Environment& env, double theta) {
  const double zero = 0.0;
  env.Reset({&theta, 1}, {&zero, 1});
  return env.KeypointImagePositions(kSize)[0];
}

// x, ẋ of the tip at (θ, θ̇): position from the simulator, velocity p_θ·θ̇ with p_θ by a
// central difference of the simulator's projection.
std::pair<torch::Tensor, torch::Tensor> TipState(Environment& env, double theta, double omega) {
  const double h = 1e-5;
  const auto p = TipAt(env, theta), pp = TipAt(env, theta + h), pm = TipAt(env, theta - h);
  auto x = torch::tensor({p[0], p[1]}, torch::kFloat64).reshape({1, 2});
  auto v = torch::tensor({(pp[0] - pm[0]) / (2 * h) * omega, (pp[1] - pm[1]) / (2 * h) * omega},
                         torch::kFloat64)
               .reshape({1, 2});
  return {x, v};
}

TEST(ControlTruePendulum, ConstantsMatchTheMjcf) {
  Environment env(EnvName::kPendulum);
  TruePendulumModel model(env, kSize);
  // 1 kg bob (a sphere of radius 0.05: I = m l² + 2/5 m r²) on a massless 0.5 m pole, gear 2.
  EXPECT_NEAR(model.inertia(), 0.25 + 0.4 * 0.05 * 0.05, 1e-9);
  EXPECT_NEAR(model.gravity_moment(), 9.81 * 0.5, 1e-9);
  EXPECT_DOUBLE_EQ(model.gear(), 2.0);
  // Camera 2.5 m in front, 45° field of view: s = S / ((S − 1) · 2.5 · tan 22.5°).
  EXPECT_NEAR(model.scale(), kSize / ((kSize - 1) * 2.5 * std::tan(M_PI / 8)), 1e-9);
  EXPECT_NEAR(model.radius(), 0.5 * model.scale(), 1e-12);
  EXPECT_THROW(TruePendulumModel(Environment(EnvName::kCartpole), kSize), InputError);
}

// The derivation's check: with the true V, B and M in keypoint coordinates, the constrained
// Euler–Lagrange equations (docs/method.md §5) reproduce MuJoCo's acceleration of the tip in the
// image, p̈ = p_θ θ̈ + p_θθ θ̇², with θ̈ from mj_forward and p_θ, p_θθ by finite differences of
// the simulator's projection.
TEST(ControlTruePendulum, AccelerationMatchesMujocoInImageCoordinates) {
  Environment env(EnvName::kPendulum);
  TruePendulumModel model(env, kSize);
  const double h = 1e-4;
  for (double theta : {0.3, -1.2, 2.9, M_PI / 2}) {
    for (double omega : {0.0, 1.7, -3.0}) {
      for (double u : {0.0, 1.5, -0.7}) {
        const double zero_v = omega;
        env.Reset({&theta, 1}, {&zero_v, 1});
        env.SetAction({&u, 1});
        mj_forward(env.model(), env.data());
        const double qacc = env.data()->qacc[0];
        const auto p0 = TipAt(env, theta), pp = TipAt(env, theta + h), pm = TipAt(env, theta - h);
        double want[2];
        for (int i = 0; i < 2; ++i) {
          const double d1 = (pp[i] - pm[i]) / (2 * h);
          const double d2 = (pp[i] - 2 * p0[i] + pm[i]) / (h * h);
          want[i] = d1 * qacc + d2 * omega * omega;
        }
        auto [x, v] = TipState(env, theta, omega);
        auto a = model.Acceleration(x, v, torch::tensor({u}, torch::kFloat64));
        for (int i = 0; i < 2; ++i) {
          EXPECT_NEAR(a[0][i].item<double>(), want[i], 2e-4 * (1 + std::abs(want[i])))
              << "theta " << theta << " omega " << omega << " u " << u << " component " << i;
        }
      }
    }
  }
}

// With gains per unit mass, the controller must turn the pendulum into
//   θ̈ = −k_p sin(θ − θ*) − k_d θ̇,
// i.e. gear·u = −m g r_c sin θ − I (k_p sin(θ − θ*) + k_d θ̇); with unit gains
//   gear·u = −m g r_c sin θ − R² (k_p sin(θ − θ*) + k_d θ̇) (derivation in true_pendulum.h).
TEST(ControlController, PendulumActionIsTheClosedLoopEquation) {
  Environment env(EnvName::kPendulum);
  TruePendulumModel model(env, kSize);
  for (GainScale scale : {GainScale::kMass, GainScale::kUnit}) {
    for (bool project : {true, false}) {
      for (double target : {0.0, 0.8, -2.5}) {
        auto [xs, unused] = TipState(env, target, 0.0);
        ControllerOptions o;
        o.kp = 16.0;
        o.kd = 5.0;
        o.gain_scale = scale;
        o.tangent_projection = project;
        EnergyShapingController controller(model, xs, o);
        for (double theta : {0.2, 1.9, -3.0}) {
          for (double omega : {0.0, -2.0}) {
            auto [x, v] = TipState(env, theta, omega);
            const double k =
                scale == GainScale::kMass ? model.inertia() : model.radius() * model.radius();
            const double want = (-model.gravity_moment() * std::sin(theta) -
                                 k * (o.kp * std::sin(theta - target) + o.kd * omega)) /
                                model.gear();
            ControlAction act = controller.Act(x, v);
            ASSERT_EQ(act.u.size(), 1u);
            EXPECT_NEAR(act.u[0], want, 1e-6 * (1 + std::abs(want)))
                << "scale " << GainScaleName(scale) << " project " << project << " target "
                << target << " theta " << theta << " omega " << omega;
          }
        }
      }
    }
  }
}

TEST(ControlController, ActuatorLimitClipsAndOptionsAreValidated) {
  Environment env(EnvName::kPendulum);
  TruePendulumModel model(env, kSize);
  auto [target, unused] = TipState(env, 0.0, 0.0);
  auto [x, v] = TipState(env, 1.0, 0.0);
  ControllerOptions o;
  o.u_max = 0.5;
  EnergyShapingController controller(model, target, o);
  ControlAction act = controller.Act(x, v);
  // Unclipped: gravity alone asks for −m g r_c sin(1)/gear ≈ −2.06.
  EXPECT_LT(act.unclipped[0], -2.0);
  EXPECT_DOUBLE_EQ(act.u[0], -0.5);

  for (auto bad : {ControllerOptions{.kp = 0}, ControllerOptions{.kd = -1},
                   ControllerOptions{.u_max = -1}, ControllerOptions{.kp = NAN}}) {
    EXPECT_THROW(EnergyShapingController(model, target, bad), InputError);
  }
  EXPECT_THROW(EnergyShapingController(model, torch::zeros({3}), ControllerOptions{}), InputError);
  EXPECT_THROW(controller.Act(torch::zeros({1, 4}), v), InputError);
  EXPECT_EQ(ParseGainScale("mass"), GainScale::kMass);
  EXPECT_THROW(ParseGainScale("kg"), InputError);
}

}  // namespace
}  // namespace keycld
