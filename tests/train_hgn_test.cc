// The HGN baseline (docs/baselines.md) in the harness: a leapfrog training resumes exactly,
// actuated data are refused, and VPT, evaluate and predict run from its stacks of five frames.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>

#include "keycld/data/dataset.h"
#include "keycld/eval/evaluate.h"
#include "keycld/eval/predict.h"
#include "keycld/models/hgn_model.h"
#include "keycld/train/checkpoint.h"
#include "keycld/train/config.h"
#include "keycld/train/trainer.h"
#include "keycld/train/vpt.h"
#include "keycld/util/error.h"
#include "test_util.h"
#include "tiny_fixtures.h"

namespace keycld {
namespace {

// The tiny training that lowers the loss and resumes exactly: Baselines.ATinyTraining… (every
// baseline); here the same resume with the leapfrog.
TEST(HgnTraining, ALeapfrogTrainingResumesExactly) {
  testing::TempDir dir;
  const auto data = testing::TinyPendulumData(dir.path(), 32);
  auto resumable = testing::BaselineTrainOptions(data, dir / "leapfrog", "hgn");
  resumable.config.integrator = "verlet";
  auto [a, b] = testing::StraightAndResumed(resumable, 2, 6);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << i;
}

TEST(HgnTraining, ActuatedDataAndAugmentationAreRefused) {
  TrainConfig c;
  c.model = "hgn";
  EXPECT_THROW(c.Validate(), InputError);  // augment is on by default
  c.augment = false;
  EXPECT_NO_THROW(c.Validate());
  c.integrator = "verlet";
  EXPECT_NO_THROW(c.Validate());
  c.control = "full";
  try {
    c.Validate();
    ADD_FAILURE() << "control = full accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no action input"), std::string::npos) << e.what();
  }
  // A data file of an actuated system, named by path.
  testing::TempDir dir;
  const auto data = testing::TinyPendulumData(dir.path(), 32, ControlMode::kFull);
  auto opt = testing::BaselineTrainOptions(data, dir / "run", "hgn");
  try {
    Train(opt);
    ADD_FAILURE() << "trained on actuated data";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unactuated"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "run/checkpoints/last.pt"));
}

TEST(HgnTraining, VptEvaluateAndPredictStartFromFiveFrames) {
  testing::TempDir dir;
  const auto data = testing::TinyPendulumData(dir.path(), 32);
  auto opt = testing::BaselineTrainOptions(data, dir / "run", "hgn");
  opt.config.epochs = 1;
  Train(opt);
  Model model = LoadModel(dir / "run/checkpoints/last.pt", torch::kCPU);
  EXPECT_EQ(PredictionInputFrames(model), 5);
  Dataset d = Dataset::Open(data);
  const int64_t N = d.info().frames;
  torch::Tensor u8 =
      torch::from_blob(d.ReadImages(0).data(), {1, N, 32, 32, 3}, torch::kUInt8).clone();
  // The prediction's frame 0 is the state the encoder reads off the first five frames.
  IntegratorOptions io;
  io.rtol = io.atol = 1e-8;
  KeypointPrediction p = PredictKeypoints(model, u8.slice(1, 0, 5), torch::zeros({1, 1}), N,
                                          IntegratorMethod::kDopri5, io);
  ASSERT_EQ(p.keypoints.sizes(), (std::vector<int64_t>{1, N, 128, 2}));
  {
    torch::NoGradGuard g;
    Encoding e = model->Encode(ImagesToFloat(u8[0], torch::kCPU));
    EXPECT_TRUE(torch::allclose(p.keypoints[0][0], e.keypoints[0], 1e-5, 1e-5));
  }
  EXPECT_THROW(PredictKeypoints(model, u8.slice(1, 0, 3), torch::zeros({1, 1}), N,
                                IntegratorMethod::kDopri5, io),
               InputError);
  EvaluateOptions eo;
  eo.run_dir = dir / "run";
  eo.energy_frames = 20;
  eo.threads = 2;
  EvaluationReport r = Evaluate(eo);
  EXPECT_FALSE(r.image_keypoints);
  ASSERT_EQ(r.vpt.vpt.size(), 1u);
  EXPECT_EQ(r.vpt.predicted.sizes(), (std::vector<int64_t>{1, N, 128, 2}));
  PredictOptions po;
  po.run_dir = dir / "run";
  po.frames = 12;
  po.threads = 2;
  po.progress = false;
  PredictionOutput out = WritePrediction(po);
  EXPECT_TRUE(std::filesystem::exists(out.gif));
  EXPECT_EQ(out.frames, 12);
  po.frames = 4;  // fewer frames than its prediction reads
  EXPECT_THROW(WritePrediction(po), InputError);
}

}  // namespace
}  // namespace keycld
