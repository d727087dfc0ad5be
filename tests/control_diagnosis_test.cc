// The learned-vs-known diagnosis of control/diagnosis.h: the gravity and feedback parts of both
// laws against the pendulum's analytic torques, the least-squares comparison against hand
// values, and a closed loop whose model has a known error in its potential.
#include <gtest/gtest.h>

#include <cmath>

#include "keycld/control/angle_control.h"
#include "keycld/control/closed_loop.h"
#include "keycld/control/diagnosis.h"
#include "keycld/control/true_pendulum.h"
#include "keycld/sim/gl_context.h"
#include "keycld/util/error.h"

namespace keycld {
namespace {

TEST(ControlDiagnosis, CompareSeriesAgainstHandValues) {
  // model = 2·reference exactly.
  std::vector<double> c = CompareSeries({2, -4, 6}, {1, -2, 3});
  EXPECT_DOUBLE_EQ(c[0], 2.0);
  EXPECT_DOUBLE_EQ(c[1], 1.0);
  EXPECT_DOUBLE_EQ(c[2], std::sqrt(56.0 / 3));
  EXPECT_DOUBLE_EQ(c[3], std::sqrt(14.0 / 3));
  EXPECT_DOUBLE_EQ(c[4], std::sqrt(14.0 / 3));
  // model (1, 2, 3), reference (1, 1, 1): s = 6/3 = 2, residuals (−1, 0, 1), about the mean
  // (−1, 0, 1): R² = 1 − 2/2 = 0; differences (0, 1, 2).
  c = CompareSeries({1, 2, 3}, {1, 1, 1});
  EXPECT_DOUBLE_EQ(c[0], 2.0);
  EXPECT_DOUBLE_EQ(c[1], 0.0);
  EXPECT_DOUBLE_EQ(c[2], std::sqrt(14.0 / 3));
  EXPECT_DOUBLE_EQ(c[3], 1.0);
  EXPECT_DOUBLE_EQ(c[4], std::sqrt(5.0 / 3));
  // A zero reference has no slope; a constant model no R².
  c = CompareSeries({1, 2}, {0, 0});
  EXPECT_TRUE(std::isnan(c[0]));
  c = CompareSeries({1, 1}, {1, 2});
  EXPECT_TRUE(std::isnan(c[1]));
  // The median ratio skips steps where the reference is below 10 % of its RMS (0.01 here).
  c = CompareSeries({10, 1, 3, 100}, {1, 1, 1, 0.01});
  EXPECT_DOUBLE_EQ(c[5], 3.0);
  c = CompareSeries({1, 2, 3, 4}, {1, 1, 1, 1});
  EXPECT_DOUBLE_EQ(c[5], 2.5);
  EXPECT_DOUBLE_EQ(CompareSeries({2, -4, 6}, {1, -2, 3})[5], 2.0);
  EXPECT_TRUE(std::isnan(CompareSeries({1, 2}, {0, 0})[5]));
  // A reference of rounding size (the cart's gravity part, ~1e-16) is 0 too: no ratio of 1e15.
  c = CompareSeries({-3, 2}, {1e-16, -3e-16});
  EXPECT_TRUE(std::isnan(c[0]));
  EXPECT_TRUE(std::isnan(c[5]));
  EXPECT_DOUBLE_EQ(c[1], 1.0 - 13.0 / 12.5);  // residual Σm² = 13, Σ(m − m̄)² = 12.5
  EXPECT_THROW(CompareSeries({}, {}), InputError);
  EXPECT_THROW(CompareSeries({1, 2}, {1}), InputError);
}

// Both laws on the true pendulum split u into the torque that holds the pendulum against
// gravity, gear·u_g = ∂V/∂θ = −m g r_c sin θ, and the feedback
// gear·u_f = −k_p I wrap(θ − θ*) − k_d I θ̇ (gains per unit mass). The keypoint law computes it
// from ∇V, B and M in image coordinates, the angle law in θ: both must give the analytic value.
TEST(ControlDiagnosis, GravityAndFeedbackPartsOfBothLawsAreThePendulumsTorques) {
  Environment env(EnvName::kPendulum);
  TruePendulumModel keypoints(env, 16);
  TrueAngleModel angle(env, 16);
  const double target = 0.4, r = keypoints.radius();
  ControllerOptions opt;
  opt.u_max = 1.0;  // the limit clips u, never its parts
  EnergyShapingController keypoint_law(
      keypoints, torch::tensor({{r * std::sin(target), r * std::cos(target)}}, torch::kFloat64),
      opt);
  AngleEnergyShapingController angle_law(angle, {target}, opt);
  const double gear = keypoints.gear(), moment = keypoints.gravity_moment();
  const double inertia = keypoints.inertia();
  for (double theta : {-2.5, -1.0, 0.3, 1.2, 2.9}) {
    const double theta_dot = 0.7;
    const double gravity = -moment * std::sin(theta) / gear;
    const double feedback =
        (-opt.kp * inertia * WrapAngle(theta - target) - opt.kd * inertia * theta_dot) / gear;
    const ControlAction a = angle_law.Act({theta}, {theta_dot});
    EXPECT_NEAR(a.gravity[0], gravity, 1e-12) << theta;
    // θ̈ per unit action: gear / I.
    EXPECT_NEAR(a.input_acceleration[0], gear / inertia, 1e-12) << theta;
    EXPECT_NEAR(a.unclipped[0] - a.gravity[0], feedback, 1e-9) << theta;
    // Keypoint law: x on the circle, ẋ its tangent velocity. Its feedback is the spring in x
    // (the chord), so compare it with the spring in θ through the chord's tangential part:
    // −k_p I (2 sin((θ − θ*)/2) cos((θ − θ*)/2)) = −k_p I sin(θ − θ*).
    const torch::Tensor x =
        torch::tensor({{r * std::sin(theta), r * std::cos(theta)}}, torch::kFloat64);
    const torch::Tensor xdot = torch::tensor(
        {{r * std::cos(theta) * theta_dot, -r * std::sin(theta) * theta_dot}}, torch::kFloat64);
    const ControlAction k = keypoint_law.Act(x, xdot);
    EXPECT_NEAR(k.gravity[0], gravity, 1e-9) << theta;
    // The keypoint's tangential acceleration per unit action: r θ̈ = r gear / I.
    EXPECT_NEAR(k.input_acceleration[0], r * gear / inertia, 1e-9) << theta;
    const double chord_feedback =
        (-opt.kp * inertia * std::sin(theta - target) - opt.kd * inertia * theta_dot) / gear;
    EXPECT_NEAR(k.unclipped[0] - k.gravity[0], chord_feedback, 1e-9) << theta;
    EXPECT_LE(std::abs(k.u[0]), 1.0);
  }
}

// A model that is the true pendulum with its potential scaled by c and its input matrix by b:
// its gravity compensation is c/b times the true one, its input acceleration b times.
class ScaledModel : public ControlModel {
 public:
  ScaledModel(ControlModel& base, double c, double b = 1.0) : base_(base), c_(c), b_(b) {}
  int num_keypoints() const override { return base_.num_keypoints(); }
  int action_dim() const override { return base_.action_dim(); }
  int image_size() const override { return base_.image_size(); }
  torch::Tensor EstimateKeypoints(std::span<const uint8_t> rgb) override {
    return base_.EstimateKeypoints(rgb);
  }
  torch::Tensor Potential(const torch::Tensor& x) override { return c_ * base_.Potential(x); }
  torch::Tensor PotentialGradient(const torch::Tensor& x) override {
    return c_ * base_.PotentialGradient(x);
  }
  torch::Tensor InputMatrix(const torch::Tensor& x) override { return b_ * base_.InputMatrix(x); }
  torch::Tensor MassDiagonal() override { return base_.MassDiagonal(); }
  torch::Tensor ProjectTangent(const torch::Tensor& x, const torch::Tensor& v) override {
    return base_.ProjectTangent(x, v);
  }

 private:
  ControlModel& base_;
  double c_, b_;
};

// Closed loop with a model whose gravity is 0.6 of the truth, the true model as the reference:
// the comparison must find the gravity slope 0.6 with R² = 1 and an exact feedback, and the
// reference must not act (the same path as without it).
TEST(ControlDiagnosis, ClosedLoopFindsAModelsWrongGravity) {
  auto gl = GlContext::Create(GlBackend::kAuto);
  Environment env(EnvName::kPendulum);
  OffscreenRenderer renderer(env, *gl, 16);
  TruePendulumModel truth(env, 16);
  ScaledModel wrong(truth, 0.6);
  const ControlTarget target = TargetFromState(env, renderer, truth, {1.0});
  ControllerOptions opt;
  opt.u_max = 5.0;
  EnergyShapingController wrong_law(wrong, target.keypoints, opt);
  EnergyShapingController true_law(truth, target.keypoints, opt);
  KeypointFrameController model(wrong, wrong_law), reference(truth, true_law);

  auto run = [&](bool with_reference) {
    env.Reset(DefaultInitialState(EnvName::kPendulum), std::vector<double>{0.0});
    ClosedLoop loop(env, renderer, model);
    if (with_reference) loop.SetReference(&reference);
    loop.ResetVelocityEstimate();
    std::vector<ControlStep> steps;
    for (int i = 0; i < 150; ++i) steps.push_back(loop.Step());
    return steps;
  };
  const std::vector<ControlStep> plain = run(false), steps = run(true);
  ASSERT_EQ(plain.size(), steps.size());
  for (size_t t = 0; t < steps.size(); ++t) {
    ASSERT_EQ(steps[t].qpos, plain[t].qpos) << "step " << t;
    EXPECT_TRUE(plain[t].reference_unclipped.empty());
  }
  EXPECT_THROW(CompareWithReference(plain), InputError);

  const ReferenceComparison c = CompareWithReference(steps);
  EXPECT_EQ(c.steps, 150u);
  EXPECT_NEAR(c.gravity.slope[0], 0.6, 1e-9);
  EXPECT_NEAR(c.gravity.r2[0], 1.0, 1e-9);
  EXPECT_GT(c.gravity.rms_reference[0], 0.5);  // it swung: gravity's torque was large
  EXPECT_NEAR(c.feedback.slope[0], 1.0, 1e-9);
  EXPECT_LT(c.feedback.rms_difference[0], 1e-9);
  EXPECT_NEAR(c.action.rms_difference[0], 0.4 * c.gravity.rms_reference[0], 1e-9);
  EXPECT_NEAR(c.gravity.median_ratio[0], 0.6, 1e-9);
  EXPECT_NEAR(c.input_acceleration.median_ratio[0], 1.0, 1e-9);
  EXPECT_LT(c.input_acceleration.rms_difference[0], 1e-9);

  // A model whose B is half the true one: half the input acceleration, twice the gravity part.
  ScaledModel weak(truth, 1.0, 0.5);
  EnergyShapingController weak_law(weak, target.keypoints, opt);
  const torch::Tensor x = torch::tensor({{0.3, -0.2}}, torch::kFloat64);
  const torch::Tensor xdot = torch::zeros({1, 2}, torch::kFloat64);
  const ControlAction w = weak_law.Act(x, xdot), t = true_law.Act(x, xdot);
  EXPECT_NEAR(w.input_acceleration[0], 0.5 * t.input_acceleration[0], 1e-12);
  EXPECT_NEAR(w.gravity[0], 2.0 * t.gravity[0], 1e-9);
  EXPECT_GT(std::abs(t.gravity[0]), 0.1);

  // A reference must read the same frames and have the same actions.
  TruePendulumModel small(env, 8);
  EnergyShapingController small_law(small, target.keypoints, opt);
  KeypointFrameController other(small, small_law);
  ClosedLoop loop(env, renderer, model);
  EXPECT_THROW(loop.SetReference(&other), InputError);
}

}  // namespace
}  // namespace keycld
