// Lag-caVAE's control law in the model's angle q (angle_control.h): the law against a hand
// computation, the learned model's terms against its networks and finite differences, and the
// closed loop with MuJoCo driven by the true pendulum's angle model.
#include <gtest/gtest.h>

#include <cmath>

#include "keycld/control/angle_control.h"
#include "keycld/control/closed_loop.h"
#include "keycld/models/chain_vae_model.h"
#include "keycld/models/lag_vae_model.h"
#include "keycld/sim/gl_context.h"
#include "keycld/util/error.h"
#include "tiny_fixtures.h"

namespace keycld {
namespace {

// A model with closed-form terms: V = 3 cos q, M = 0.5 + 0.2 cos q, g = gain.
class FormulaAngleModel : public OneAngleControlModel {
 public:
  explicit FormulaAngleModel(std::vector<double> gain) : gain_(std::move(gain)) {}
  int action_dim() const override { return int(gain_.size()); }
  int image_size() const override { return 4; }
  double EstimateAngle(std::span<const uint8_t>) override { return 0; }
  double Potential(double q) override { return 3 * std::cos(q); }
  double PotentialDerivative(double q) override { return -3 * std::sin(q); }
  std::vector<double> InputGain(double) override { return gain_; }
  double Mass(double q) override { return 0.5 + 0.2 * std::cos(q); }

 private:
  std::vector<double> gain_;
};

TEST(AngleControl, WrapAngleTakesTheShortWayRound) {
  EXPECT_NEAR(WrapAngle(0.3), 0.3, 1e-15);
  EXPECT_NEAR(WrapAngle(3.0 - (-3.0)), 6.0 - 2 * M_PI, 1e-12);
  EXPECT_NEAR(WrapAngle(-6.0), 2 * M_PI - 6.0, 1e-12);
  EXPECT_NEAR(WrapAngle(M_PI), M_PI, 1e-15);
  EXPECT_NEAR(WrapAngle(-M_PI), M_PI, 1e-15);  // (−π, π]
  EXPECT_NEAR(WrapAngle(7 * M_PI + 0.25), -M_PI + 0.25, 1e-12);
}

TEST(AngleControl, LawMatchesTheHandComputation) {
  FormulaAngleModel model({2.0});
  ControllerOptions o;
  o.kp = 4.0;
  o.kd = 1.5;
  const double q = 3.0, qdot = -0.7, target = -3.0;
  const double e = 6.0 - 2 * M_PI;  // wrapped q − q*
  const double m = 0.5 + 0.2 * std::cos(q);
  // Gains per unit mass (default): u = (∂V/∂q − k_p M e − k_d M q̇) / g.
  AngleEnergyShapingController mass_law(model, {target}, o);
  ControlAction a = mass_law.Act({q}, {qdot});
  const double expected = (-3 * std::sin(q) - 4.0 * m * e - 1.5 * m * qdot) / 2.0;
  ASSERT_EQ(a.u.size(), 1u);
  EXPECT_NEAR(a.u[0], expected, 1e-12);
  EXPECT_EQ(a.unclipped, a.u);
  // The published scalar gains.
  o.gain_scale = GainScale::kUnit;
  AngleEnergyShapingController unit_law(model, {target}, o);
  EXPECT_NEAR(unit_law.Act({q}, {qdot}).u[0], (-3 * std::sin(q) - 4.0 * e - 1.5 * qdot) / 2.0,
              1e-12);
  // At the target, at rest, the law cancels gravity only: g u = ∂V/∂q.
  EXPECT_NEAR(unit_law.Act({target}, {0}).u[0] * 2.0, -3 * std::sin(target), 1e-12);
  // The actuator limit clips after the law; unclipped keeps the law's value.
  o.u_max = 0.5;
  AngleEnergyShapingController limited(model, {target}, o);
  ControlAction c = limited.Act({q}, {qdot});
  EXPECT_NEAR(std::abs(c.u[0]), 0.5, 1e-15);
  EXPECT_NEAR(c.unclipped[0], (-3 * std::sin(q) - 4.0 * e - 1.5 * qdot) / 2.0, 1e-12);
}

TEST(AngleControl, SeveralActuatorsGetTheMinimumNormSplit) {
  // u = gᵀ(g gᵀ)⁻¹ f: g·u = f and u parallel to g.
  FormulaAngleModel model({1.0, 2.0});
  ControllerOptions o;
  o.gain_scale = GainScale::kUnit;
  o.kp = 2.0;
  o.kd = 0.0;
  AngleEnergyShapingController law(model, {0.0}, o);
  const double q = 0.4;
  const double f = -3 * std::sin(q) - 2.0 * q;
  ControlAction a = law.Act({q}, {0.0});
  ASSERT_EQ(a.u.size(), 2u);
  EXPECT_NEAR(a.u[0] * 1.0 + a.u[1] * 2.0, f, 1e-12);
  EXPECT_NEAR(a.u[1], 2.0 * a.u[0], 1e-12);
  // A zero gain gives no action rather than an infinite one.
  FormulaAngleModel dead({0.0});
  AngleEnergyShapingController none(dead, {0.0}, o);
  EXPECT_EQ(none.Act({q}, {0.0}).u, std::vector<double>{0.0});
}

TEST(AngleControl, RefusesBadOptionsTargetsAndStates) {
  FormulaAngleModel model({1.0});
  ControllerOptions o;
  EXPECT_THROW(AngleEnergyShapingController(model, {std::nan("")}, o), InputError);
  EXPECT_THROW(AngleEnergyShapingController(model, {0.0, 0.0}, o), InputError);  // one coordinate
  o.kp = 0;
  EXPECT_THROW(AngleEnergyShapingController(model, {0.0}, o), InputError);
  o.kp = 1;
  o.kd = -1;
  EXPECT_THROW(AngleEnergyShapingController(model, {0.0}, o), InputError);
  o.kd = 1;
  AngleEnergyShapingController law(model, {0.0}, o);
  EXPECT_THROW(law.Act({INFINITY}, {0.0}), InputError);
  EXPECT_THROW(law.Act({0.0}, {std::nan("")}), InputError);
  EXPECT_THROW(law.Act({0.0, 1.0}, {0.0, 0.0}), InputError);
}

TEST(AngleControl, LearnedModelTermsMatchItsNetworks) {
  torch::manual_seed(4);
  Model model = CreateModel(testing::TinyModelSpec(EnvName::kPendulum, "lag-cavae"));
  model->to(torch::kFloat64);
  auto* lag = dynamic_cast<LagVaeModelImpl*>(model.get());
  ASSERT_NE(lag, nullptr);
  LearnedAngleControlModel control(model);
  EXPECT_EQ(control.action_dim(), 1);
  EXPECT_EQ(control.image_size(), 16);
  EXPECT_EQ(control.kinds(), std::vector<CoordinateKind>{CoordinateKind::kAngle});
  for (double q : {-2.5, -0.3, 0.0, 1.1, 3.0}) {
    const double h = 1e-5;
    const double fd = (control.PotentialAt({q + h}) - control.PotentialAt({q - h})) / (2 * h);
    EXPECT_NEAR(control.PotentialGradientAt({q}).at(0), fd, 1e-7 * std::max(1.0, std::abs(fd)))
        << q;
    auto cs = torch::tensor({std::cos(q), std::sin(q)}, torch::kFloat64).reshape({1, 2});
    torch::NoGradGuard no_grad;
    EXPECT_NEAR(control.MassAt({q}).at(0), lag->lagrangian()->Mass(cs).item<double>(), 1e-12);
    EXPECT_GE(control.MassAt({q}).at(0), 0.1);  // m² + 0.1
    EXPECT_NEAR(control.InputGainAt({q}).at(0),
                lag->lagrangian()->input_gain->forward(cs).item<double>(), 1e-12);
  }
  // The angle of a frame is the direction of the posterior mean (as Encode's normalised state).
  std::vector<uint8_t> frame(16 * 16 * 3);
  for (size_t i = 0; i < frame.size(); ++i) frame[i] = uint8_t((i * 37) % 251);
  const double q = control.EstimateCoordinates(frame).at(0);
  auto image = torch::from_blob(frame.data(), {1, 16, 16, 3}, torch::kUInt8)
                   .permute({0, 3, 1, 2})
                   .to(torch::kFloat64)
                   .div(255.0);
  torch::NoGradGuard no_grad;
  const torch::Tensor x = model->Encode(image).keypoints;  // [1, 1, 2]
  EXPECT_NEAR(q, std::atan2(x[0][0][1].item<double>(), x[0][0][0].item<double>()), 1e-12);
  EXPECT_THROW(control.EstimateCoordinates(std::vector<uint8_t>(10)), InputError);
  EXPECT_THROW(control.PotentialAt({0.0, 1.0}), InputError);  // one coordinate
  // A keypoint model is refused with a pointer to its own law.
  EXPECT_THROW(LearnedAngleControlModel(CreateModel(testing::TinyModelSpec(EnvName::kPendulum))),
               InputError);
}

// The two-coordinate models (cartpole: translation and angle; acrobot: two angles): q from the
// encoders' means, ∂V/∂q against finite differences, g and M from the Lagrangian's networks.
TEST(AngleControl, LearnedTwoCoordinateModelTermsMatchItsNetworks) {
  for (EnvName env : {EnvName::kCartpole, EnvName::kAcrobot}) {
    torch::manual_seed(5);
    Model model = CreateModel(testing::TinyModelSpec(env, "lag-vae"));
    model->to(torch::kFloat64);
    auto* chain = dynamic_cast<ChainLagVaeModelImpl*>(model.get());
    ASSERT_NE(chain, nullptr);
    LearnedAngleControlModel control(model);
    EXPECT_EQ(control.kinds(), chain->kinds());
    EXPECT_EQ(control.action_dim(), 2);
    const std::vector<double> q{0.4, -1.2};
    const double h = 1e-5;
    const std::vector<double> grad = control.PotentialGradientAt(q);
    ASSERT_EQ(grad.size(), 2u);
    for (int k = 0; k < 2; ++k) {
      std::vector<double> up = q, down = q;
      up[size_t(k)] += h;
      down[size_t(k)] -= h;
      const double fd = (control.PotentialAt(up) - control.PotentialAt(down)) / (2 * h);
      EXPECT_NEAR(grad[size_t(k)], fd, 1e-7 * std::max(1.0, std::abs(fd))) << k;
    }
    torch::NoGradGuard no_grad;
    const torch::Tensor qt = torch::tensor(q, torch::kFloat64).reshape({1, 2});
    const torch::Tensor M = chain->lagrangian()->Mass(qt).reshape({-1});
    const torch::Tensor g = chain->lagrangian()->InputGain(qt).reshape({-1});
    for (int64_t i = 0; i < 4; ++i) {
      EXPECT_NEAR(control.MassAt(q)[size_t(i)], M[i].item<double>(), 1e-12);
      EXPECT_NEAR(control.InputGainAt(q)[size_t(i)], g[i].item<double>(), 1e-12);
    }
    std::vector<uint8_t> frame(16 * 16 * 3);
    for (size_t i = 0; i < frame.size(); ++i) frame[i] = uint8_t((i * 53) % 241);
    const std::vector<double> est = control.EstimateCoordinates(frame);
    auto image = torch::from_blob(frame.data(), {1, 16, 16, 3}, torch::kUInt8)
                     .permute({0, 3, 1, 2})
                     .to(torch::kFloat64)
                     .div(255.0);
    const torch::Tensor x = model->Encode(image).keypoints;  // [1, 2, 2]
    for (int64_t i = 0; i < 2; ++i) {
      const double want = chain->kinds()[size_t(i)] == CoordinateKind::kAngle
                              ? std::atan2(x[0][i][1].item<double>(), x[0][i][0].item<double>())
                              : x[0][i][0].item<double>();
      EXPECT_NEAR(est[size_t(i)], want, 1e-12) << EnvNameString(env) << " " << i;
    }
  }
}

// The law in two coordinates against a hand computation: M, g constant, V = 3 cos q₁ + x²;
// the translation's error is not wrapped, the angle's is.
class FormulaTwoCoordinateModel : public AngleControlModel {
 public:
  std::vector<CoordinateKind> kinds() const override {
    return {CoordinateKind::kTranslation, CoordinateKind::kAngle};
  }
  int action_dim() const override { return 2; }
  int image_size() const override { return 4; }
  std::vector<double> EstimateCoordinates(std::span<const uint8_t>) override { return {0, 0}; }
  double PotentialAt(const std::vector<double>& q) override {
    return q[0] * q[0] + 3 * std::cos(q[1]);
  }
  std::vector<double> PotentialGradientAt(const std::vector<double>& q) override {
    return {2 * q[0], -3 * std::sin(q[1])};
  }
  std::vector<double> InputGainAt(const std::vector<double>&) override { return {1, 0, 1, 2}; }
  std::vector<double> MassAt(const std::vector<double>&) override { return {2, 0.5, 0.5, 1}; }
};

TEST(AngleControl, TwoCoordinateLawMatchesTheHandComputation) {
  FormulaTwoCoordinateModel model;
  ControllerOptions o;
  o.kp = 3.0;
  o.kd = 0.5;
  const std::vector<double> q{4.0, 3.0}, qdot{0.2, -0.4}, target{0.0, -3.0};
  const double e0 = 4.0, e1 = 6.0 - 2 * M_PI;  // the translation as is, the angle wrapped
  // f = ∂V/∂q − k_p M e − k_d M q̇; g = [[1, 0], [1, 2]] is invertible: u = g⁻¹ f.
  const double Me0 = 2 * e0 + 0.5 * e1, Me1 = 0.5 * e0 + e1;
  const double Mv0 = 2 * 0.2 + 0.5 * -0.4, Mv1 = 0.5 * 0.2 - 0.4;
  const double f0 = 8.0 - 3 * Me0 - 0.5 * Mv0, f1 = -3 * std::sin(3.0) - 3 * Me1 - 0.5 * Mv1;
  const double u0 = f0, u1 = (f1 - f0) / 2;
  AngleEnergyShapingController law(model, target, o);
  const ControlAction a = law.Act(q, qdot);
  ASSERT_EQ(a.u.size(), 2u);
  EXPECT_NEAR(a.u[0], u0, 1e-10);
  EXPECT_NEAR(a.u[1], u1, 1e-10);
  // The gravity part: g⁻¹ ∂V/∂q.
  EXPECT_NEAR(a.gravity[0], 8.0, 1e-10);
  EXPECT_NEAR(a.gravity[1], (-3 * std::sin(3.0) - 8.0) / 2, 1e-10);
  EXPECT_EQ(CoordinateErrors(model.kinds(), q, target), (std::vector<double>{e0, e1}));
}

// The closed loop with MuJoCo on the true pendulum's angle model: from exactly straight down
// (where the keypoint law's spring is radial and gives no torque, the wrapped angle error is π
// and this law pushes), to upright and to a tilted target; 10 s at Δt = 0.02 s.
TEST(AngleControl, TruePendulumSwingsUpFromStraightDownAndHolds) {
  auto gl = GlContext::Create(GlBackend::kAuto);
  Environment env(EnvName::kPendulum);
  const int size = 16;
  OffscreenRenderer renderer(env, *gl, size);
  TrueAngleModel model(env, size);
  for (double target_q : {0.0, 1.0}) {
    ControlTarget target = TargetFromState(env, renderer, model, {target_q});
    ASSERT_EQ(target.keypoints.numel(), 1);
    EXPECT_NEAR(target.keypoints.item<double>(), target_q, 1e-12);
    env.Reset(std::vector<double>{M_PI}, std::vector<double>{0.0});
    AngleEnergyShapingController law(model, {target.keypoints.item<double>()}, ControllerOptions{});
    AngleFrameController controller(model, law);
    ClosedLoop loop(env, renderer, controller);
    std::vector<ControlStep> steps;
    for (int i = 0; i < 500; ++i) steps.push_back(loop.Step());
    ControlVerdict v = JudgeControl(env, steps, {target_q}, 0.05, 0.05);
    EXPECT_TRUE(v.success) << "target " << target_q << ": max error over the last second "
                           << v.max_hold_errors[0];
    EXPECT_GT(v.settle_time, 0.3);
    EXPECT_LT(v.settle_time, 5.0);
    double u_max = 0;
    for (const auto& s : steps) u_max = std::max(u_max, std::abs(s.action[0]));
    std::printf(
        "angle law, true pendulum, pi -> %.1f: settled (0.05 rad) after %.2f s, max |u| %.2f\n",
        target_q, v.settle_time, u_max);
    // The records: q is the simulator's angle, q̇ its backward difference.
    EXPECT_NEAR(steps[40].keypoints[0], WrapAngle(steps[40].qpos[0]), 1e-12);
    EXPECT_NEAR(steps[40].velocity[0], WrapAngle(steps[40].qpos[0] - steps[39].qpos[0]) / 0.02,
                1e-9);
    EXPECT_NEAR(steps[40].kinetic, 0.5 * model.Mass(0) * std::pow(steps[40].velocity[0], 2), 1e-12);
  }
}

// The true model in MuJoCo's coordinates: ∂V/∂q against finite differences of V (mj_energyPos),
// the pendulum's terms against TrueAngleModel's constants, the input gain against the MJCF gears.
TEST(AngleControl, TrueCoordinateModelTermsAreMuJoCos) {
  for (EnvName name : {EnvName::kPendulum, EnvName::kCartpole, EnvName::kAcrobot}) {
    Environment env(name);
    TrueCoordinateModel model(env, 16);
    const size_t n = size_t(env.nq());
    ASSERT_EQ(model.kinds().size(), n);
    const std::vector<double> q = n == 1 ? std::vector<double>{0.7} : std::vector<double>{0.3, 1.1};
    const std::vector<double> grad = model.PotentialGradientAt(q);
    for (size_t k = 0; k < n; ++k) {
      std::vector<double> up = q, down = q;
      up[k] += 1e-6;
      down[k] -= 1e-6;
      const double fd = (model.PotentialAt(up) - model.PotentialAt(down)) / 2e-6;
      EXPECT_NEAR(grad[k], fd, 1e-6 * std::max(1.0, std::abs(fd))) << EnvNameString(name) << k;
    }
    const std::vector<double> M = model.MassAt(q);
    EXPECT_NEAR(M[0 * n + n - 1], M[(n - 1) * n + 0], 1e-12);  // symmetric
    EXPECT_GT(M[0], 0.0);
    const std::vector<double> g = model.InputGainAt(q);
    ASSERT_EQ(g.size(), n * size_t(env.nu()));
    // Motors on each joint: g is diagonal with the gears (pendulum's from TrueAngleModel).
    if (name == EnvName::kCartpole) {
      EXPECT_EQ(g, (std::vector<double>{4, 0, 0, 1}));
    } else if (name == EnvName::kAcrobot) {
      EXPECT_EQ(g, (std::vector<double>{2, 0, 0, 2}));
    }
    if (name == EnvName::kPendulum) {
      TrueAngleModel angle(env, 16);
      EXPECT_NEAR(grad[0], angle.PotentialDerivative(0.7), 1e-9);
      EXPECT_NEAR(M[0], angle.Mass(0.7), 1e-12);
      EXPECT_NEAR(g[0], angle.InputGain(0.7)[0], 1e-12);
      EXPECT_NEAR(model.PotentialAt({0.7}) - model.PotentialAt({2.0}),
                  angle.Potential(0.7) - angle.Potential(2.0), 1e-9);
    }
    EXPECT_THROW(model.PotentialAt(std::vector<double>(n + 1, 0.0)), InputError);
  }
}

// The law on the true models in closed loop with MuJoCo (the cartpole's and the acrobot's
// targets of the keypoint law's tests, control_known_model_test.cc): reached and held (0.05 rad,
// 0.05 m, joint speeds under 0.5 during the last second of 6 s), default gains, no limit.
TEST(AngleControl, TrueCartpoleAndAcrobotReachAndHoldTheirTargets) {
  auto gl = GlContext::Create(GlBackend::kAuto);
  struct Case {
    EnvName env;
    std::vector<double> init, target;
  };
  for (const Case& c : {Case{EnvName::kCartpole, {0.0, 3.1}, {-1.0, 0.0}},
                        Case{EnvName::kCartpole, {0.5, -2.0}, {1.0, 0.0}},
                        Case{EnvName::kAcrobot, {3.04, 0.0}, {0.0, 0.0}},
                        Case{EnvName::kAcrobot, {-2.5, 0.5}, {0.5, -1.0}}}) {
    Environment env(c.env);
    const int size = 16;
    OffscreenRenderer renderer(env, *gl, size);
    TrueCoordinateModel model(env, size);
    ControlTarget target = TargetFromState(env, renderer, model, c.target);
    env.Reset(c.init, std::vector<double>(c.init.size(), 0.0));
    AngleEnergyShapingController law(model, {target.keypoints[0][0].item<double>(),
                                             target.keypoints[0][1].item<double>()},
                                     ControllerOptions{});
    AngleFrameController controller(model, law);
    ClosedLoop loop(env, renderer, controller);
    std::vector<ControlStep> steps;
    const int n = int(std::lround(6.0 / env.timestep()));
    for (int i = 0; i < n; ++i) steps.push_back(loop.Step());
    const ControlVerdict v = JudgeControl(env, steps, c.target, 0.05, 0.05, 1.0, 0.5);
    double u_max = 0;
    for (const auto& s : steps) {
      for (double u : s.action) u_max = std::max(u_max, std::abs(u));
    }
    EXPECT_TRUE(v.success) << EnvNameString(c.env) << " final errors " << v.final_errors[0]
                           << ", " << v.final_errors[1] << "; largest speed in the hold "
                           << v.max_hold_speed;
    std::printf("angle law, true %s from (%.2f, %.2f) to (%.2f, %.2f): settled after %.2f s, "
                "max |u| %.2f\n",
                EnvNameString(c.env).c_str(), c.init[0], c.init[1], c.target[0], c.target[1],
                v.settle_time, u_max);
  }
}

}  // namespace
}  // namespace keycld
