// keycld predict: the re-simulated ground truth against MuJoCo's stored frames, and the CLI on
// a tiny trained model (files, sizes, rows, errors).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gif_test_util.h"
#include "keycld/data/generate.h"
#include "keycld/eval/predict.h"
#include "keycld/util/error.h"
#include "test_util.h"

namespace keycld {
namespace {

namespace fs = std::filesystem;

double Mse(const uint8_t* a, const uint8_t* b, size_t n) {
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    double d = (double(a[i]) - double(b[i])) / 255.0;
    sum += d * d;
  }
  return sum / double(n);
}

class Resimulate : public ::testing::TestWithParam<EnvName> {};

TEST_P(Resimulate, FromAStoredFrameReproducesTheFollowingStoredFrames) {
  testing::TempDir dir;
  GenerateOptions g;
  g.env = GetParam();
  g.control = ControlMode::kFull;  // actuated: the run's action must be applied too
  g.runs = 2;
  g.frames = 8;
  g.size = 16;
  g.seed = 5;
  g.workers = 1;
  g.out_dir = dir.path();
  g.progress = false;
  Dataset data = Dataset::Open(GenerateDataset(g).path);
  const size_t frame = 16 * 16 * 3;
  const int run = 1;
  const std::vector<uint8_t> stored = data.ReadImages(run);
  // From frame 3: frames 4, 5, 6, 7.
  const std::vector<uint8_t> again = ResimulateFrames(data, run, 3, 4);
  ASSERT_EQ(again.size(), 4 * frame);
  for (int i = 0; i < 4; ++i) {
    EXPECT_LE(Mse(again.data() + i * frame, stored.data() + (4 + i) * frame, frame), 1e-6)
        << EnvNameString(GetParam()) << " frame " << 4 + i;
  }
  // One step apart, frames differ: the comparison tells states apart.
  double off = 0;
  for (int i = 0; i < 3; ++i) {
    off += Mse(again.data() + i * frame, stored.data() + (5 + i) * frame, frame);
  }
  EXPECT_GT(off, 1e-6) << EnvNameString(GetParam());
  EXPECT_TRUE(ResimulateFrames(data, 0, 7, 0).empty());
  EXPECT_THROW(ResimulateFrames(data, 2, 0, 1), InputError);
  EXPECT_THROW(ResimulateFrames(data, 0, 8, 1), InputError);
  EXPECT_THROW(ResimulateFrames(data, 0, 0, -1), InputError);
}

INSTANTIATE_TEST_SUITE_P(Envs, Resimulate,
                         ::testing::Values(EnvName::kPendulum, EnvName::kCartpole,
                                           EnvName::kAcrobot),
                         [](const auto& info) { return EnvNameString(info.param); });

std::vector<std::vector<std::string>> ReadCsv(const fs::path& path) {
  std::vector<std::vector<std::string>> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) cells.push_back(cell);
    rows.push_back(cells);
  }
  return rows;
}

// One tiny trained run (1 epoch on a 16x16, 4-run pendulum data set) shared by the CLI tests.
class PredictCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir;
    std::ofstream(*dir_ / "tiny.toml")
        << "[data]\nenv = \"pendulum\"\nsize = 16\nruns = 4\nframes = 8\n"
           "[model]\nhidden = 8\n[train]\nepochs = 1\nthreads = 2\n"
           "[eval]\nrtol = 1e-6\natol = 1e-6\n";
    std::string out;
    trained_ = testing::RunCli("run --config tiny.toml", &out, dir_->path().string()) == 0;
    if (!trained_) std::fprintf(stderr, "keycld run failed: %s\n", out.c_str());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(trained_); }
  const fs::path& dir() const { return dir_->path(); }

  static testing::TempDir* dir_;
  static bool trained_;
};
testing::TempDir* PredictCli::dir_ = nullptr;
bool PredictCli::trained_ = false;

TEST_F(PredictCli, WritesAGifWithFFramesACsvWithFRowsAndAnMsePlot) {
  std::string out;
  // F = 12 > N = 8: 4 frames re-simulated. Scale 2: panels 32 px, gaps 4 px, a 2 px space
  // and a 3 px timeline under them.
  ASSERT_EQ(testing::RunCli("predict runs/tiny --frames 12 --scale 2 --threads 2", &out, dir()), 0)
      << out;
  EXPECT_NE(out.find("12 frames (4 re-simulated)"), std::string::npos) << out;
  const fs::path report = dir() / "runs/tiny/report";
  testing::DecodedGif gif = testing::ReadGif(report / "predict-run0.gif");
  EXPECT_EQ(gif.frames.size(), 12u);
  EXPECT_EQ(gif.width, 4 * 32 + 3 * 4);
  EXPECT_EQ(gif.height, 32 + 2 + 3);
  EXPECT_EQ(gif.delays_cs.at(0), 2);  // pendulum: dt = 0.02 s
  // The ground-truth panel of frame 0 is the stored frame 0, upscaled: its top-left 2x2 block
  // is one colour.
  const auto& f0 = gif.frames.at(0);
  const size_t stride = size_t(gif.width) * 3;
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(f0[c], f0[3 + c]);
    EXPECT_EQ(f0[c], f0[stride + c]);
  }
  auto rows = ReadCsv(report / "predict-run0.csv");
  ASSERT_EQ(rows.size(), 13u);  // header + 12 frames
  EXPECT_EQ(rows[0], (std::vector<std::string>{"frame", "time_s", "pred_x0", "pred_y0", "est_x0",
                                               "est_y0", "mse", "valid"}));
  int first_invalid = -1;
  for (size_t t = 1; t < rows.size(); ++t) {
    ASSERT_EQ(rows[t].size(), 8u);
    EXPECT_EQ(std::stoi(rows[t][0]), int(t - 1));
    EXPECT_NEAR(std::stod(rows[t][1]), 0.02 * double(t), 1e-9);  // frame t at (t + 1)·dt
    for (int c = 2; c < 6; ++c) EXPECT_LE(std::abs(std::stod(rows[t][c])), 1.0 + 1e-6);
    if (first_invalid < 0 && rows[t][7] == "0") first_invalid = int(t - 1);
  }
  // The printed VPT is the first invalid frame (11 = F − 1 if none).
  const int vpt = first_invalid < 0 ? 11 : first_invalid;
  EXPECT_NE(out.find("VPT " + std::to_string(vpt) + " frames"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(report / "predict-run0-mse.png"));
  // --out elsewhere, fewer frames than stored.
  ASSERT_EQ(testing::RunCli("predict runs/tiny --frames 5 --scale 1 --out elsewhere", &out, dir()),
            0)
      << out;
  EXPECT_EQ(testing::ReadGif(dir() / "elsewhere/predict-run0.gif").frames.size(), 5u);
  EXPECT_EQ(ReadCsv(dir() / "elsewhere/predict-run0.csv").size(), 6u);
}

TEST_F(PredictCli, BadInputIsOneClearLine) {
  std::string out;
  auto expect_error = [&](const std::string& args, const std::string& what, int code = 1) {
    std::string msg;
    EXPECT_EQ(testing::RunCli(args, &msg, dir()), code) << args << ": " << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << args << ": " << msg;
    if (code == 1) {
      EXPECT_EQ(msg.rfind("keycld: error: ", 0), 0u) << msg;
      EXPECT_EQ(std::count(msg.begin(), msg.end(), '\n'), 1) << msg;
    }
  };
  fs::create_directories(dir() / "empty");
  expect_error("predict empty", "no checkpoint in 'empty'");
  expect_error("predict runs/tiny --run 1", "--run 1 is out of range");
  expect_error("predict runs/tiny --frames 2", "--frames must be in [3,");
  // The rest in process (each CLI call costs a second of start-up).
  PredictOptions o;
  o.run_dir = dir() / "missing";
  EXPECT_THROW(WritePrediction(o), InputError);
  o.run_dir = dir() / "runs/tiny";
  o.scale = 0;
  EXPECT_THROW(WritePrediction(o), InputError);
  o.scale = 4;
  o.data = dir() / "nowhere.h5";
  EXPECT_THROW(WritePrediction(o), IoError);
  ASSERT_EQ(testing::RunCli("generate --env cartpole --runs 2 --frames 4 --size 16 --out other",
                            &out, dir()),
            0)
      << out;
  expect_error("predict runs/tiny --data other/cartpole-none-16px-2x4-seed0.h5",
               "is cartpole at 16x16 px");
  EXPECT_FALSE(fs::exists(dir() / "empty/report"));
  EXPECT_FALSE(fs::exists(dir() / "runs/tiny/report/predict-run1.gif"));
}

}  // namespace
}  // namespace keycld
