// keycld evaluate and keycld run's report on a tiny trained run: the numbers agree with
// independent recomputation, the figures decode, mismatched inputs are refused.
#include <gtest/gtest.h>
#include <stb/stb_image.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "keycld/data/dataset.h"
#include "keycld/data/generate.h"
#include "keycld/eval/evaluate.h"
#include "keycld/train/checkpoint.h"
#include "keycld/train/vpt.h"
#include "test_util.h"

namespace keycld {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// One tiny trained run shared by the tests of this file: pendulum, 16x16, 6 runs of 10 frames.
class EvaluateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    std::ofstream cfg(*dir_ / "tiny.toml");
    cfg << "[data]\nenv = \"pendulum\"\nsize = 16\nruns = 6\nframes = 10\nseed = 4\n"
           "[model]\nhidden = 8\n[train]\nepochs = 1\nthreads = 2\n"
           "[eval]\nrtol = 1e-6\natol = 1e-6\n";
    cfg.close();
    run_output_ = new std::string;
    run_rc_ =
        testing::RunCli("run --config tiny.toml --predict-frames 0", run_output_, dir_->path());
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete run_output_;
  }
  static fs::path Run() { return dir_->path() / "runs/tiny"; }
  static fs::path Data() { return dir_->path() / "data/pendulum-none-16px-6x10-seed4.h5"; }

  static testing::TempDir* dir_;
  static std::string* run_output_;
  static int run_rc_;
};
testing::TempDir* EvaluateTest::dir_ = nullptr;
std::string* EvaluateTest::run_output_ = nullptr;
int EvaluateTest::run_rc_ = -1;

// The summary names only frames that exist: a 6-frame evaluation has no frame 10 (it printed 0).
TEST(EvaluateSummary, MissingFramesAreDashesNotZeros) {
  EvaluationReport r;
  r.mse_mean = {0.0, 0.25, 0.5, 0.75, 1.0, 1.25};
  const std::string s = FormatEvaluationSummary(r);
  const size_t at = s.find("MSE frame 1 / 10 / last ");
  ASSERT_NE(at, std::string::npos) << s;
  const std::string line = s.substr(at, s.find('\n', at) - at);
  EXPECT_NE(line.find(" / - / "), std::string::npos) << line;
  EXPECT_NE(line.find("1.25"), std::string::npos) << line;
  r.mse_mean.resize(12, 2.0);
  r.mse_mean[10] = 3.5;
  const std::string s12 = FormatEvaluationSummary(r);
  EXPECT_NE(s12.find("3.5"), std::string::npos) << s12;
  EXPECT_EQ(s12.find(" / - / "), std::string::npos) << s12;
}

TEST_F(EvaluateTest, RunWritesAReportLinkingEveryFigure) {
  ASSERT_EQ(run_rc_, 0) << *run_output_;
  EXPECT_NE(run_output_->find("report: runs/tiny/report/report.md"), std::string::npos)
      << *run_output_;
  std::ifstream md(Run() / "report/report.md");
  std::string text((std::istreambuf_iterator<char>(md)), {});
  for (const char* f : {"mse.png", "vpt_per_run.png", "training_loss.png", "potential.png",
                        "energy.png", "evaluation.md"}) {
    EXPECT_NE(text.find(f), std::string::npos) << f;
    EXPECT_TRUE(fs::exists(Run() / "report" / f)) << f;
  }
  // Every PNG decodes at the plot size.
  for (const char* f : {"mse.png", "vpt_per_run.png", "potential.png", "energy.png"}) {
    int w = 0, h = 0, c = 0;
    ASSERT_TRUE(stbi_info((Run() / "report" / f).c_str(), &w, &h, &c)) << f;
    EXPECT_EQ(w, 900) << f;
    EXPECT_EQ(h, 560) << f;
  }
}

TEST_F(EvaluateTest, VptMatchesAnIndependentRecomputation) {
  ASSERT_EQ(run_rc_, 0) << *run_output_;
  std::string out;
  ASSERT_EQ(testing::RunCli("evaluate runs/tiny --no-plots --threads 2", &out, dir_->path()), 0)
      << out;
  std::ifstream in(Run() / "report/evaluation.json");
  json j = json::parse(in);
  Dataset d = Dataset::Open(Data());
  const auto val = d.ValidationRuns();
  ASSERT_EQ(j["validation_runs"].size(), val.size());
  ASSERT_EQ(j["vpt"]["per_run"].size(), val.size());
  EXPECT_DOUBLE_EQ(j["epsilon"].get<double>(), d.info().vpt_epsilon);
  // Recompute: the same model and runs through ValidPredictionTime directly.
  Model model = LoadModel(Run(), torch::kCPU);
  torch::Tensor images = torch::empty({int64_t(val.size()), 10, 16, 16, 3}, torch::kUInt8);
  torch::Tensor actions = torch::zeros({int64_t(val.size()), 1});
  for (size_t i = 0; i < val.size(); ++i) {
    auto img = d.ReadImages(int(val[i]));
    std::memcpy(images[int64_t(i)].data_ptr(), img.data(), img.size());
  }
  VptOptions o;
  o.epsilon = d.info().vpt_epsilon;
  o.rtol = o.atol = 1e-6;
  VptResult r = ValidPredictionTime(model, images, actions, o);
  for (size_t i = 0; i < val.size(); ++i) EXPECT_EQ(j["vpt"]["per_run"][i].get<int>(), r.vpt[i]);
  EXPECT_NEAR(j["vpt"]["mean"].get<double>(), r.mean, 1e-12);
  // The per-frame mean MSE is the mean of the recomputed curves.
  auto mean = j["mse_per_frame"]["mean"].get<std::vector<double>>();
  ASSERT_EQ(mean.size(), 10u);
  for (int t = 0; t < 10; ++t) EXPECT_NEAR(mean[t], r.mse.select(1, t).mean().item<double>(), 1e-9);
  // Masses are the model's m_k.
  EXPECT_NEAR(j["masses"][0].get<double>(), model->MassScalars()[0].item<double>(), 1e-7);
  // The solver option changes the rollout: one RK4 step per frame.
  ASSERT_EQ(
      testing::RunCli("evaluate runs/tiny --no-plots --solver rk4 --out rk4", &out, dir_->path()),
      0)
      << out;
  std::ifstream in2(dir_->path() / "rk4/evaluation.json");
  EXPECT_EQ(json::parse(in2)["solver"], "rk4");
}

TEST_F(EvaluateTest, RefusesRunsAndDataThatDoNotFit) {
  ASSERT_EQ(run_rc_, 0) << *run_output_;
  std::string out;
  EXPECT_EQ(testing::RunCli("evaluate no/such/run", &out, dir_->path()), 1);
  EXPECT_NE(out.find("run folder not found"), std::string::npos) << out;
  // A data set of another system.
  GenerateOptions g;
  g.env = EnvName::kCartpole;
  g.runs = 2;
  g.frames = 4;
  g.size = 16;
  g.out_dir = dir_->path() / "other";
  g.progress = false;
  fs::path other = GenerateDataset(g).path;
  EXPECT_EQ(testing::RunCli("evaluate runs/tiny --data " + other.string(), &out, dir_->path()), 1);
  EXPECT_NE(out.find("does not fit the model"), std::string::npos) << out;
  // A folder without a checkpoint.
  fs::create_directories(dir_->path() / "empty");
  std::ofstream(dir_->path() / "empty/config.toml") << "[model]\nhidden = 8\n";
  EXPECT_EQ(testing::RunCli("evaluate empty", &out, dir_->path()), 1);
  EXPECT_NE(out.find("no checkpoint"), std::string::npos) << out;
  EXPECT_EQ(testing::RunCli("evaluate runs/tiny --solver leapfrog", &out, dir_->path()), 2);
}

TEST(MovingAverage, AveragesACentredWindowShrunkAtTheEnds) {
  std::vector<double> v{1, 2, 3, 4, 10};
  auto m = MovingAverage(v, 3);
  ASSERT_EQ(m.size(), 5u);
  EXPECT_DOUBLE_EQ(m[0], 1.5);
  EXPECT_DOUBLE_EQ(m[1], 2.0);
  EXPECT_DOUBLE_EQ(m[3], 17.0 / 3.0);
  EXPECT_DOUBLE_EQ(m[4], 7.0);
  EXPECT_EQ(MovingAverage(v, 1), v);
}

}  // namespace
}  // namespace keycld
