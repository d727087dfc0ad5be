// Data set generation and the HDF5 format (docs/method.md §7, §8).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <fstream>

#include "keycld/data/generate.h"
#include "keycld/util/error.h"
#include "test_util.h"

namespace keycld {
namespace {

GenerateOptions Tiny(const std::filesystem::path& out, EnvName env, ControlMode mode) {
  GenerateOptions o;
  o.env = env;
  o.control = mode;
  o.runs = 6;
  o.frames = 4;
  o.size = 16;
  o.seed = 11;
  o.out_dir = out;
  o.progress = false;
  return o;
}

TEST(DataGenerate, WritesTheDocumentedLayout) {
  testing::TempDir dir;
  auto r = GenerateDataset(Tiny(dir.path(), EnvName::kCartpole, ControlMode::kUnder));
  EXPECT_FALSE(r.reused);
  Dataset d = Dataset::Open(r.path);
  const DatasetInfo& i = d.info();
  EXPECT_EQ(i.env, EnvName::kCartpole);
  EXPECT_EQ(i.control, ControlMode::kUnder);
  EXPECT_EQ(i.runs, 6);
  EXPECT_EQ(i.frames, 4);
  EXPECT_EQ(i.size, 16);
  EXPECT_EQ(i.nq, 2);
  EXPECT_EQ(i.nu, 2);
  EXPECT_DOUBLE_EQ(i.dt, 0.01);
  EXPECT_EQ(i.train_runs, 5);
  EXPECT_EQ(i.validation_runs, 1);
  EXPECT_EQ(d.TrainRuns(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(d.ValidationRuns(), (std::vector<int64_t>{5}));
  EXPECT_EQ(d.ReadImages(0).size(), 4u * 16 * 16 * 3);
  auto t = d.ReadTime(2);
  // Frame 0 is rendered after the first physics step.
  EXPECT_NEAR(t[0], 0.01, 1e-12);
  EXPECT_NEAR(t[3], 0.04, 1e-12);
  for (int run = 0; run < i.runs; ++run) {
    auto u = d.ReadAction(run);
    ASSERT_EQ(u.size(), 8u);
    for (int f = 0; f < 4; ++f) {
      EXPECT_EQ(u[2 * f + 1], 0.0) << "under-actuated: the pole torque must be zero";
      EXPECT_EQ(u[2 * f], u[0]) << "the action is constant within a run";
    }
  }
  int g = 0;
  d.ReadGridQpos(&g);
  EXPECT_EQ(g, 256);
  EXPECT_EQ(d.ReadGridImages().size(), 256u * 16 * 16 * 3);
  EXPECT_EQ(ValidationRunCount(500), 50);
}

TEST(DataGenerate, GroundTruthMatchesAnIndependentReplay) {
  testing::TempDir dir;
  auto o = Tiny(dir.path(), EnvName::kPendulum, ControlMode::kFull);
  Dataset d = Dataset::Open(GenerateDataset(o).path);
  for (int run = 0; run < o.runs; ++run) {
    // Replay the protocol by hand: the run's own random stream, constant action, one step
    // before each frame.
    Environment env(EnvName::kPendulum);
    Rng rng(o.seed, 1, run);
    env.ResetRandom(rng);
    auto u = SampleAction(o.env, o.control, 1, rng);
    env.SetAction(u);
    auto qpos = d.ReadQpos(run), qvel = d.ReadQvel(run), action = d.ReadAction(run);
    for (int t = 0; t < o.frames; ++t) {
      env.Step();
      ASSERT_EQ(qpos[t], env.qpos()[0]) << "run " << run << " frame " << t;
      ASSERT_EQ(qvel[t], env.qvel()[0]);
      ASSERT_EQ(action[t], u[0]);
    }
  }
}

TEST(DataGenerate, SameSeedSameFileForAnyWorkerCount) {
  testing::TempDir a, b, c;
  auto o = Tiny(a.path(), EnvName::kAcrobot, ControlMode::kFull);
  o.workers = 1;
  Dataset one = Dataset::Open(GenerateDataset(o).path);
  o.out_dir = b.path();
  o.workers = 2;
  Dataset two = Dataset::Open(GenerateDataset(o).path);
  o.out_dir = c.path();
  o.seed = 12;
  Dataset other = Dataset::Open(GenerateDataset(o).path);
  for (int run = 0; run < o.runs; ++run) {
    EXPECT_EQ(one.ReadImages(run), two.ReadImages(run)) << "run " << run;
    EXPECT_EQ(one.ReadQpos(run), two.ReadQpos(run));
  }
  EXPECT_EQ(one.ReadGridImages(), two.ReadGridImages());
  EXPECT_EQ(one.info().vpt_epsilon, two.info().vpt_epsilon);
  EXPECT_NE(one.ReadQpos(0), other.ReadQpos(0));
}

TEST(DataGenerate, VptThresholdEqualsItsDefinitionOnTheStoredImages) {
  testing::TempDir dir;
  Dataset d =
      Dataset::Open(GenerateDataset(Tiny(dir.path(), EnvName::kPendulum, ControlMode::kNone)).path);
  const auto& i = d.info();
  const size_t P = size_t(i.size) * i.size * 3;
  // Mean image = mean over runs of each run's time-averaged image.
  std::vector<double> mean(P, 0.0);
  for (int r = 0; r < i.runs; ++r) {
    auto img = d.ReadImages(r);
    for (int t = 0; t < i.frames; ++t)
      for (size_t p = 0; p < P; ++p) mean[p] += img[t * P + p] / 255.0 / i.frames / i.runs;
  }
  double eps = 0;
  for (int r = 0; r < i.runs; ++r) {
    auto img = d.ReadImages(r);
    double mse = 0;
    for (int t = 0; t < i.frames; ++t)
      for (size_t p = 0; p < P; ++p) {
        double e = img[t * P + p] / 255.0 - mean[p];
        mse += e * e;
      }
    eps += mse / (double(i.frames) * P) / i.runs;
  }
  EXPECT_GT(i.vpt_epsilon, 0.0);
  EXPECT_NEAR(i.vpt_epsilon, eps, 1e-12);
  auto stored_mean = d.ReadMeanImage();
  for (size_t p = 0; p < P; ++p) ASSERT_NEAR(stored_mean[p], mean[p], 1e-6);
}

TEST(DataGenerate, ReusesAMatchingFileAndRegeneratesOnForce) {
  testing::TempDir dir;
  auto o = Tiny(dir.path(), EnvName::kPendulum, ControlMode::kNone);
  auto first = GenerateDataset(o);
  auto mtime = std::filesystem::last_write_time(first.path);
  auto again = GenerateDataset(o);
  EXPECT_TRUE(again.reused);
  EXPECT_EQ(std::filesystem::last_write_time(first.path), mtime);
  o.force = true;
  auto forced = GenerateDataset(o);
  EXPECT_FALSE(forced.reused);
  // Nothing else is left in the folder (no temporaries).
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST(DataGenerate, RejectsInvalidOptions) {
  testing::TempDir dir;
  auto o = Tiny(dir.path(), EnvName::kPendulum, ControlMode::kUnder);
  EXPECT_THROW(GenerateDataset(o), InputError);
  o.control = ControlMode::kNone;
  using Edit = void (*)(GenerateOptions&);
  for (Edit bad :
       {+[](GenerateOptions& x) { x.runs = 0; }, +[](GenerateOptions& x) { x.frames = 2; },
        +[](GenerateOptions& x) { x.size = 4; }, +[](GenerateOptions& x) { x.size = -64; },
        +[](GenerateOptions& x) { x.workers = -1; }}) {
    GenerateOptions b = o;
    bad(b);
    EXPECT_THROW(GenerateDataset(b), InputError);
  }
  o.out_dir = "/proc/keycld-cannot-write-here";
  EXPECT_THROW(GenerateDataset(o), IoError);
  o.out_dir = dir.path();
  o.assets_dir = dir.path();
  EXPECT_THROW(GenerateDataset(o), IoError);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(DataGenerate, RejectsTruncatedAndForeignFiles) {
  testing::TempDir dir;
  auto o = Tiny(dir.path(), EnvName::kPendulum, ControlMode::kNone);
  auto path = GenerateDataset(o).path;
  // Truncated: keep the first half of the bytes.
  auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size / 2);
  EXPECT_THROW(Dataset::Open(path), FormatError);
  // generate refuses to silently reuse it, and --force repairs it.
  EXPECT_THROW(GenerateDataset(o), FormatError);
  o.force = true;
  EXPECT_NO_THROW(Dataset::Open(GenerateDataset(o).path));
  // Not HDF5 at all.
  auto text = dir / "notes.h5";
  std::ofstream(text) << "hello";
  EXPECT_THROW(Dataset::Open(text), FormatError);
  // HDF5, but someone else's.
  auto foreign = dir / "foreign.h5";
  hid_t f = H5Fcreate(foreign.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Fclose(f);
  try {
    Dataset::Open(foreign);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("not a keycld data set"), std::string::npos);
  }
  EXPECT_THROW(Dataset::Open(dir / "missing.h5"), IoError);
}

TEST(DataGenerate, AFailedForceKeepsTheGoodFile) {
  testing::TempDir dir;
  auto o = Tiny(dir.path(), EnvName::kPendulum, ControlMode::kNone);
  auto path = GenerateDataset(o).path;
  auto before = Dataset::Open(path).ReadImages(0);
  // A model without actuators cannot make a data set; the existing file must survive.
  std::filesystem::create_directories(dir / "assets");
  std::ifstream in(DefaultAssetsDir() / "pendulum.xml");
  std::string xml((std::istreambuf_iterator<char>(in)), {});
  xml = xml.substr(0, xml.find("<actuator>")) + "</mujoco>\n";
  std::ofstream(dir / "assets/pendulum.xml") << xml;
  std::filesystem::copy_file(DefaultAssetsDir() / "common.xml", dir / "assets/common.xml");
  o.assets_dir = dir / "assets";
  o.force = true;
  EXPECT_THROW(GenerateDataset(o), FormatError);
  EXPECT_EQ(Dataset::Open(path).ReadImages(0), before);
}

TEST(DataGenerateCli, ErrorsAreOneLineAndNonZero) {
  testing::TempDir dir;
  std::string out;
  const std::string o = " --out " + dir.path().string();
  EXPECT_EQ(testing::RunCli("generate --env pendulum --control under" + o, &out), 1);
  EXPECT_NE(out.find("'under' does not exist for the pendulum"), std::string::npos) << out;
  EXPECT_EQ(testing::RunCli("generate --env doublependulum" + o, &out), 1);
  EXPECT_NE(out.find("unknown environment"), std::string::npos) << out;
  EXPECT_EQ(testing::RunCli("generate --runs 0" + o, &out), 1);
  EXPECT_NE(out.find("--runs"), std::string::npos) << out;
  EXPECT_EQ(testing::RunCli("generate --size -3" + o, &out), 1);
  EXPECT_EQ(testing::RunCli("generate --out /proc/nope", &out), 1);
  EXPECT_NE(out.find("/proc"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_EQ(testing::RunCli("generate --runs many" + o, &out), 2);
  EXPECT_EQ(out.rfind("keycld: error:", 0), 0u) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_EQ(testing::RunCli("generate --seed -1" + o, &out), 1);
  EXPECT_EQ(testing::RunCli("", &out), 2);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  EXPECT_EQ(testing::RunCli("generate --runs 3 --frames 3 --size 16" + o, &out), 0) << out;
  EXPECT_EQ(testing::RunCli("generate --runs 3 --frames 3 --size 16" + o, &out), 0) << out;
  EXPECT_NE(out.find("reusing"), std::string::npos) << out;
}

}  // namespace
}  // namespace keycld
