// Diagnostics of learned dynamics (eval/diagnostics.h) against independent truths: the
// coordinate maps read MuJoCo's joint state off the simulator's own keypoints, the acceleration
// scale of the exact pendulum model is 1 (and c for c times its dynamics), the keypoint-space
// rollout error is the distance that was put in.
#include <gtest/gtest.h>

#include <cmath>

#include "keycld/control/true_pendulum.h"
#include "keycld/data/dataset.h"
#include "keycld/eval/diagnostics.h"
#include "keycld/train/trainer.h"
#include "keycld/util/error.h"
#include "test_util.h"
#include "tiny_fixtures.h"

namespace keycld {
namespace {

torch::Tensor TrueKeypoints(const Environment& env, int size) {
  std::vector<double> flat;
  for (const auto& p : env.KeypointImagePositions(size)) flat.insert(flat.end(), {p[0], p[1]});
  return torch::tensor(flat, torch::kFloat64).unsqueeze(0);
}

TEST(Diagnostics, CoordinatesReadTheJointStateOffTheSimulatorsKeypoints) {
  for (EnvName name : {EnvName::kPendulum, EnvName::kCartpole, EnvName::kAcrobot}) {
    Environment env(name);
    const auto specs = CoordinateSpecs(env, 32);
    ASSERT_EQ(int(specs.size()), env.nq());
    for (int i = 0; i < 20; ++i) {
      Rng rng(7, 1, uint64_t(i));
      env.ResetRandom(rng);
      const std::vector<double> q = env.qpos();
      const torch::Tensor qhat = KeypointCoordinates(specs, TrueKeypoints(env, 32), env.nq());
      for (const CoordinateSpec& s : specs) {
        const double est = qhat[0][s.qpos].item<double>(), truth = q[size_t(s.qpos)];
        const double err = s.kind == CoordinateSpec::Kind::kAngle
                               ? std::remainder(est - truth, 2 * M_PI)
                               : est - truth;
        EXPECT_NEAR(err, 0.0, 1e-9) << EnvNameString(name) << " " << s.name << " state " << i;
      }
    }
  }
  Environment pendulum(EnvName::kPendulum);
  auto specs = CoordinateSpecs(pendulum, 32);
  EXPECT_THROW(KeypointCoordinates(specs, torch::zeros({1, 3}), 1), InputError);
  specs[0].keypoint = 3;
  EXPECT_THROW(KeypointCoordinates(specs, torch::zeros({1, 2}), 1), InputError);
}

TEST(Diagnostics, FitScaleThroughTheOrigin) {
  ScaleFit f = FitScale({1, 2, -3, 0.5}, {2, 4, -6, 1});
  EXPECT_DOUBLE_EQ(f.scale, 2.0);
  EXPECT_NEAR(f.r2, 1.0, 1e-15);
  EXPECT_EQ(f.samples, 4);
  // y = x + noise of known residual: scale = Σxy/Σx², R² = 1 − SS_res/SS_tot.
  f = FitScale({1, 2, 3}, {1, 2, 4});
  EXPECT_NEAR(f.scale, 17.0 / 14.0, 1e-15);
  const double s = 17.0 / 14.0, my = 7.0 / 3.0;
  const double res = std::pow(1 - s, 2) + std::pow(2 - 2 * s, 2) + std::pow(4 - 3 * s, 2);
  const double tot = std::pow(1 - my, 2) + std::pow(2 - my, 2) + std::pow(4 - my, 2);
  EXPECT_NEAR(f.r2, 1 - res / tot, 1e-14);
  EXPECT_THROW(FitScale({1}, {1, 2}), InputError);
}

// The exact pendulum of control/true_pendulum.h (derived from the MJCF and checked against
// MuJoCo in its own tests) on the simulator's keypoints: scale 1, and c for c × its dynamics.
TEST(Diagnostics, TheExactPendulumHasAccelerationScaleOne) {
  Environment env(EnvName::kPendulum);
  TruePendulumModel truth(env, 32);
  std::vector<double> qpos;
  std::vector<torch::Tensor> xs;
  for (const auto& q : StateGrid(EnvName::kPendulum)) {
    env.Reset(q, std::vector<double>{0.0});
    qpos.push_back(q[0]);
    xs.push_back(TrueKeypoints(env, 32));
  }
  const torch::Tensor grid_x = torch::cat(xs);
  for (double c : {1.0, 1.38}) {
    auto acc = [&](const torch::Tensor& x, const torch::Tensor& v, const torch::Tensor& u) {
      return c * truth.Acceleration(x, v, u);
    };
    DynamicsDiagnostics d = DiagnoseDynamics(acc, 32, 1, env, grid_x, qpos, /*actuated=*/true);
    EXPECT_NEAR(d.acceleration.scale, c, 1e-6);
    EXPECT_NEAR(d.acceleration.r2, 1.0, 1e-9);
    ASSERT_EQ(d.input.size(), 1u);
    EXPECT_NEAR(d.input[0].scale, c, 1e-6);
    ASSERT_EQ(d.coordinates.size(), 1u);
    const CoordinateDiagnostics& pole = d.coordinates[0];
    EXPECT_EQ(pole.unit, "deg");
    EXPECT_LT(pole.error_rms, 1e-7);
    EXPECT_NEAR(pole.link_length_mean, truth.radius(), 1e-9);
    EXPECT_LT(pole.link_length_std, 1e-9);
    EXPECT_EQ(pole.true_acceleration.size(), 16u);
  }
  EXPECT_THROW(DiagnoseDynamics([&](const torch::Tensor& x, const torch::Tensor& v,
                                    const torch::Tensor& u) { return truth.Acceleration(x, v, u); },
                                32, 2, env, grid_x, qpos, false),
               InputError);
}

TEST(Diagnostics, RolloutKeypointErrorIsTheDistanceFromTheEstimates) {
  testing::TempDir dir;
  Dataset data = Dataset::Open(testing::TinyPendulumData(dir.path()));
  torch::manual_seed(1);
  Model model = CreateModel(testing::TinyModelSpec(EnvName::kPendulum));
  torch::Tensor images, actions;
  LoadRuns(data, data.TrainRuns(), &images, &actions);
  VptOptions vo;
  vo.epsilon = data.info().vpt_epsilon;
  vo.rtol = vo.atol = 1e-6;
  VptResult vpt = ValidPredictionTime(model, images, actions, vo);
  // Replace the prediction by the estimates shifted by (δ, δ): the error is δ√2 at every frame,
  // and with no shift the reconstruction VPT is the VPT itself.
  torch::Tensor estimated;
  {
    torch::NoGradGuard g;
    estimated = model->Encode(ImagesToFloat(images.reshape({-1, 16, 16, 3}), torch::kCPU))
                    .keypoints.reshape({images.size(0), images.size(1), 1, 2});
  }
  for (double delta : {0.0, 0.03}) {
    VptResult shifted = VptFromMse(PredictionMse(model, estimated + delta, images), vo.epsilon);
    shifted.predicted = estimated + delta;
    RolloutDiagnostics r = DiagnoseRollouts(model, images, shifted, vo.epsilon);
    ASSERT_EQ(r.keypoint_error_mean.size(), 10u);
    for (double e : r.keypoint_error_mean) EXPECT_NEAR(e, delta * std::sqrt(2.0), 1e-6);
    if (delta == 0.0) {
      EXPECT_EQ(r.reconstruction_vpt.vpt, shifted.vpt);
      EXPECT_EQ(r.failures_dynamics, 0);  // the prediction is the reconstruction
    }
    EXPECT_EQ(r.failed_runs, r.failures_dynamics + r.failures_rendering);
  }
  VptResult empty;
  EXPECT_THROW(DiagnoseRollouts(model, images, empty, vo.epsilon), InputError);
}

}  // namespace
}  // namespace keycld
