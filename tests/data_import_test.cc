// keycld import / export: data sets from video files and PNG folders (docs/import.md). The truths
// are the data sets the frames came from: a PNG round trip is bit-exact, an H.264 one is close
// to it, cropping and scaling give the block means of known frames, and every bad input gets one
// clear error and leaves no file.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "keycld/data/dataset.h"
#include "keycld/data/import.h"
#include "keycld/data/video_io.h"
#include "keycld/sim/environment.h"
#include "keycld/sim/system.h"
#include "keycld/util/image_io.h"
#include "test_util.h"
#include "tiny_fixtures.h"

namespace keycld {
namespace {

namespace fs = std::filesystem;

// Per-pixel mean squared difference of two uint8 buffers, in [0, 1]² units.
double Mse(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  EXPECT_EQ(a.size(), b.size());
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = (double(a[i]) - double(b[i])) / 255.0;
    s += d * d;
  }
  return s / double(a.size());
}

// Messages must say what is wrong: the expected fragment, case-sensitive.
template <typename E, typename F>
void ExpectError(F&& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << fragment << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

class ImportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    // 6 runs of 10 frames at 16 px, seed 3; and the same with actions ("full").
    data_ = new fs::path(testing::TinyPendulumData(dir_->path()));
    full_ = new fs::path(testing::TinyPendulumData(dir_->path() / "full", 16, ControlMode::kFull));
  }
  static void TearDownTestSuite() {
    delete data_;
    delete full_;
    delete dir_;
  }
  ImportOptions Options(const fs::path& input, const std::string& out) const {
    ImportOptions o;
    o.inputs = {input};
    o.system = "pendulum";
    o.out = *dir_ / out;
    o.size = 16;
    o.frames = 10;
    o.progress = false;
    return o;
  }
  static testing::TempDir* dir_;
  static fs::path *data_, *full_;
};
testing::TempDir* ImportTest::dir_ = nullptr;
fs::path* ImportTest::data_ = nullptr;
fs::path* ImportTest::full_ = nullptr;

// PNG frames are lossless: exporting a data set and importing it again gives the same frames,
// the same split, the same ε (computed again from the frames), and no simulator state.
TEST_F(ImportTest, PngFolderRoundTripIsBitExact) {
  const Dataset src = Dataset::Open(*data_);
  ExportOptions e;
  e.data = *data_;
  e.out = *dir_ / "png_frames";
  const ExportResult er = ExportDataset(e);
  EXPECT_EQ(er.frames, 60);
  EXPECT_TRUE(fs::exists(*dir_ / "png_frames/frame_000059.png"));
  ImportOptions o = Options(*dir_ / "png_frames", "png.h5");
  o.dt = src.info().dt;
  const ImportResult r = ImportDataset(o);
  const Dataset d = Dataset::Open(r.path);
  const DatasetInfo& i = d.info();
  EXPECT_EQ(i.source, "import");
  EXPECT_FALSE(i.has_state());
  EXPECT_EQ(i.runs, 6);
  EXPECT_EQ(i.frames, 10);
  EXPECT_EQ(i.system, "pendulum");
  EXPECT_EQ(i.env, EnvName::kPendulum);
  EXPECT_EQ(r.frames_read, 60);
  EXPECT_EQ(r.frames_dropped, 0);
  for (int run = 0; run < 6; ++run) {
    EXPECT_EQ(d.ReadImages(run), src.ReadImages(run)) << "run " << run;
    const std::vector<double> t = d.ReadTime(run), want = src.ReadTime(run);
    ASSERT_EQ(t.size(), want.size());
    for (size_t k = 0; k < t.size(); ++k) EXPECT_NEAR(t[k], want[k], 1e-12) << run << "," << k;
  }
  EXPECT_DOUBLE_EQ(i.vpt_epsilon, src.info().vpt_epsilon);
  EXPECT_EQ(d.ValidationRuns(), src.ValidationRuns());
  EXPECT_EQ(d.ReadMeanImage(), src.ReadMeanImage());
  ExpectError<InputError>([&] { d.ReadQpos(0); }, "needs a simulator");
  ExpectError<InputError>([&] { d.ReadGridImages(); }, "needs a simulator");
}

// H.264 (yuv420p, crf 18) at 8× the size, scaled back by area averaging: every frame stays
// close to the original (far below ε, the error of predicting the mean image), and the frame
// interval comes back from the stream's frame rate.
TEST_F(ImportTest, Mp4RoundTripIsCloseAndKeepsTheFrameRate) {
  const Dataset src = Dataset::Open(*data_);
  ExportOptions e;
  e.data = *data_;
  e.out = *dir_ / "tiny.mp4";
  e.scale = 8;
  ExportDataset(e);
  ASSERT_TRUE(fs::exists(e.out));
  const ImportResult r = ImportDataset(Options(e.out, "mp4.h5"));
  const Dataset d = Dataset::Open(r.path);
  EXPECT_NEAR(d.info().dt, src.info().dt, 1e-9);
  EXPECT_EQ(d.info().runs, 6);
  double worst = 0;
  for (int run = 0; run < 6; ++run)
    worst = std::max(worst, Mse(d.ReadImages(run), src.ReadImages(run)));
  EXPECT_LT(worst, 0.1 * src.info().vpt_epsilon) << "ε " << src.info().vpt_epsilon;
  EXPECT_GT(worst, 0.0);  // lossy: the comparison above is not trivially exact
  EXPECT_NEAR(d.info().vpt_epsilon, src.info().vpt_epsilon, 0.1 * src.info().vpt_epsilon);
}

// Runs are cut from one long recording with skip and stride; the remainder is dropped.
TEST_F(ImportTest, RunsAreCutWithSkipAndStride) {
  ExportOptions e;
  e.data = *data_;
  e.out = *dir_ / "cut_frames";
  ExportDataset(e);
  ImportOptions o = Options(*dir_ / "cut_frames", "cut.h5");
  o.dt = 0.04;
  o.skip = 1;
  o.stride = 2;
  o.frames = 7;  // frames 1, 3, …, 59: 30 kept, 4 runs of 7, 2 left over
  const ImportResult r = ImportDataset(o);
  const Dataset d = Dataset::Open(r.path);
  EXPECT_EQ(d.info().runs, 4);
  EXPECT_EQ(r.frames_dropped, 60 - 28);
  const Dataset src = Dataset::Open(*data_);
  const size_t P = 16 * 16 * 3;
  // Run 1's first frame is kept frame 7 = source frame 15 = run 1, frame 5 of the source.
  const std::vector<uint8_t> got = d.ReadImages(1), want = src.ReadImages(1);
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + P, want.begin() + 5 * P));
  EXPECT_DOUBLE_EQ(d.ReadTime(0)[0], 0.04);
}

// The actions come from a CSV, one row per frame (as export writes them) or one per run.
TEST_F(ImportTest, ActionsFromCsvPerFrameOrPerRun) {
  const Dataset src = Dataset::Open(*full_);
  ExportOptions e;
  e.data = *full_;
  e.out = *dir_ / "full_frames";
  e.actions = *dir_ / "full_actions.csv";
  ExportDataset(e);
  ImportOptions o = Options(*dir_ / "full_frames", "full.h5");
  o.dt = src.info().dt;
  o.actions = e.actions;
  const Dataset d = Dataset::Open(ImportDataset(o).path);
  EXPECT_EQ(d.info().control, ControlMode::kFull);
  for (int run = 0; run < 6; ++run) EXPECT_EQ(d.ReadAction(run), src.ReadAction(run));

  std::ofstream per_run(*dir_ / "per_run.csv");
  per_run << "torque\n";
  for (int run = 0; run < 6; ++run) per_run << 0.25 * run << "\n";
  per_run.close();
  o.actions = *dir_ / "per_run.csv";
  o.out = *dir_ / "per_run.h5";
  const Dataset p = Dataset::Open(ImportDataset(o).path);
  EXPECT_EQ(p.ReadAction(3), std::vector<double>(10, 0.75));
}

// Frames of known colour blocks: the centred square is cut and each 3×3 block averaged.
// libswscale's area filter leaks a little into the neighbouring blocks: within 2 levels.
TEST_F(ImportTest, CropAndScaleGiveBlockMeans) {
  const fs::path folder = *dir_ / "blocks";
  fs::create_directories(folder);
  const int W = 60, H = 48;  // centred square: 48 wide from x = 6
  for (int f = 0; f < 6; ++f) {
    std::vector<uint8_t> img(size_t(W) * H * 3);
    for (int y = 0; y < H; ++y) {
      for (int x = 0; x < W; ++x) {
        const int bx = (x - 6) / 3, by = y / 3;  // 16 × 16 blocks inside the square
        uint8_t* p = img.data() + (size_t(y) * W + x) * 3;
        p[0] = uint8_t(x < 6 || x >= 54 ? 255 : bx * 15);
        p[1] = uint8_t(by * 15);
        p[2] = uint8_t(f * 40);
      }
    }
    char name[32];
    std::snprintf(name, sizeof name, "f%02d.png", f);
    WritePng(folder / name, img, W, H);
  }
  ImportOptions o = Options(folder, "blocks.h5");
  o.frames = 3;
  o.dt = 0.1;
  const Dataset d = Dataset::Open(ImportDataset(o).path);
  const std::vector<uint8_t> img = d.ReadImages(1);  // frames 3, 4, 5
  for (int y = 0; y < 16; ++y) {
    for (int x = 0; x < 16; ++x) {
      const uint8_t* p = img.data() + (size_t(y) * 16 + x) * 3;  // frame 3
      EXPECT_NEAR(p[0], x * 15, 2) << x << "," << y;
      EXPECT_NEAR(p[1], y * 15, 2) << x << "," << y;
      EXPECT_NEAR(p[2], 120, 2);
    }
  }
}

// One clear error each, and no output file.
TEST_F(ImportTest, BadInputsGetOneClearErrorAndNoFile) {
  ExportOptions e;
  e.data = *data_;
  e.out = *dir_ / "bad_frames";
  ExportDataset(e);
  auto refused = [&](const ImportOptions& o) { EXPECT_FALSE(fs::exists(o.out)) << o.out; };

  // Not a video.
  std::ofstream(*dir_ / "noise.mp4") << "this is not a video file at all";
  ImportOptions o = Options(*dir_ / "noise.mp4", "noise.h5");
  ExpectError<FormatError>([&] { ImportDataset(o); }, "noise.mp4");
  refused(o);
  // Frames of different sizes.
  const fs::path mixed = *dir_ / "mixed";
  fs::create_directories(mixed);
  fs::copy(*dir_ / "bad_frames", mixed, fs::copy_options::recursive);
  WritePng(mixed / "frame_000030.png", std::vector<uint8_t>(20 * 20 * 3, 9), 20, 20);
  o = Options(mixed, "mixed.h5");
  o.dt = 0.02;
  ExpectError<FormatError>([&] { ImportDataset(o); }, "frame_000030.png' is 20×20");
  refused(o);
  // PNG frames state no frame rate.
  o = Options(*dir_ / "bad_frames", "nodt.h5");
  ExpectError<InputError>([&] { ImportDataset(o); }, "--dt");
  refused(o);
  // Too few frames for two runs.
  o.dt = 0.02;
  o.frames = 40;
  ExpectError<InputError>([&] { ImportDataset(o); }, "at least 2 are needed");
  refused(o);
  // A crop outside the frame.
  o.frames = 10;
  o.crop = std::array<int, 3>{8, 0, 16};
  ExpectError<InputError>([&] { ImportDataset(o); }, "leaves the 16×16 frames");
  refused(o);
  o.crop.reset();
  // Actions of the wrong shape, or varying within a run.
  std::ofstream(*dir_ / "two_columns.csv") << "1,2\n3,4\n";
  o.actions = *dir_ / "two_columns.csv";
  ExpectError<FormatError>([&] { ImportDataset(o); }, "2 values, but the system has 1");
  std::ofstream(*dir_ / "short.csv") << "1\n2\n3\n";
  o.actions = *dir_ / "short.csv";
  ExpectError<InputError>([&] { ImportDataset(o); }, "3 rows of actions");
  std::ofstream varying(*dir_ / "varying.csv");
  for (int i = 0; i < 60; ++i) varying << (i == 14 ? 1.0 : 0.0) << "\n";
  varying.close();
  o.actions = *dir_ / "varying.csv";
  ExpectError<InputError>([&] { ImportDataset(o); }, "changes within run 1");
  refused(o);
  o.actions.clear();
  // A system that does not exist; an existing output.
  o.system = "double_pendulum";
  ExpectError<InputError>([&] { ImportDataset(o); }, "unknown system");
  o.system = "pendulum";
  std::ofstream(o.out) << "keep me";
  ExpectError<InputError>([&] { ImportDataset(o); }, "--force");
  EXPECT_EQ(testing::ReadText(o.out), "keep me");
  // Control "full" without actions.
  o.force = true;
  o.control = ControlMode::kFull;
  ExpectError<InputError>([&] { ImportDataset(o); }, "--actions");
  EXPECT_EQ(testing::ReadText(o.out), "keep me");
}

// What a hostile user tried (each once crashed, lost a file or was silently accepted).
TEST_F(ImportTest, HostileInputsAreRefusedAndLoseNothing) {
  ExportOptions e;
  e.data = *data_;
  e.out = *dir_ / "hostile_frames/";  // a trailing slash names the folder
  ExportDataset(e);
  ASSERT_TRUE(fs::is_directory(*dir_ / "hostile_frames"));
  ImportOptions o = Options(*dir_ / "hostile_frames", "hostile.h5");
  o.dt = 0.02;
  // A crop whose right edge overflows an int (it crashed).
  o.crop = std::array<int, 3>{2147483647, 0, 10};
  ExpectError<InputError>([&] { ImportDataset(o); }, "leaves the 16×16 frames");
  o.crop.reset();
  // The same input twice would copy training runs into the validation runs.
  o.inputs = {*dir_ / "hostile_frames", *dir_ / "hostile_frames"};
  ExpectError<InputError>([&] { ImportDataset(o); }, "given twice");
  o.inputs = {*dir_ / "hostile_frames"};
  // Actions with "none", a header that hides a typo, a trailing comma, hex.
  std::ofstream(*dir_ / "per_run_ok.csv") << "\xEF\xBB\xBFu1\n0\n1\n2\n3\n4\n5\n";
  o.actions = *dir_ / "per_run_ok.csv";
  o.control = ControlMode::kNone;
  ExpectError<InputError>([&] { ImportDataset(o); }, "are not all zero");
  std::ofstream(*dir_ / "zeros.csv") << "u1\n0\n0\n0\n0\n0\n0\n";  // what export writes for "none"
  o.actions = *dir_ / "zeros.csv";
  o.out = *dir_ / "zeros.h5";
  EXPECT_EQ(Dataset::Open(ImportDataset(o).path).info().control, ControlMode::kNone);
  o.out = *dir_ / "hostile.h5";
  o.actions = *dir_ / "per_run_ok.csv";
  o.control.reset();
  EXPECT_NO_THROW(ImportDataset(o));  // the BOM'd header is a header
  o.force = true;
  std::ofstream(*dir_ / "typo.csv") << "0.5,O.5\n";
  std::ofstream(*dir_ / "comma.csv") << "0.1,\n";
  std::ofstream(*dir_ / "hex.csv") << "0x3\n";
  for (const char* f : {"typo.csv", "comma.csv", "hex.csv"}) {
    o.actions = *dir_ / f;
    ExpectError<FormatError>([&] { ImportDataset(o); }, "is not a row of numbers");
  }
  o.actions.clear();
  // Output paths that are not regular files are never renamed over, even with --force.
  fs::create_symlink(*dir_ / "nowhere/x.h5", *dir_ / "dangling.h5");
  o.out = *dir_ / "dangling.h5";
  ExpectError<IoError>([&] { ImportDataset(o); }, "not a regular file");
  EXPECT_TRUE(fs::is_symlink(*dir_ / "dangling.h5"));
  // Frames that never change give no ε.
  const fs::path still = *dir_ / "still";
  fs::create_directories(still);
  for (int f = 0; f < 6; ++f) {
    WritePng(still / ("s" + std::to_string(f) + ".png"), std::vector<uint8_t>(16 * 16 * 3, 77), 16,
             16);
  }
  o = Options(still, "still.h5");
  o.dt = 0.02;
  o.frames = 3;
  ExpectError<InputError>([&] { ImportDataset(o); }, "never change");
  EXPECT_FALSE(fs::exists(o.out));
  // Export: the actions CSV may not overwrite the data set, nor an existing video.
  e.out = *dir_ / "hostile.mp4";
  e.actions = *data_;
  ExpectError<InputError>([&] { ExportDataset(e); }, "is the data set or the output");
  e.actions.clear();
  ExportDataset(e);
  ExpectError<InputError>([&] { ExportDataset(e); }, "--force");
  e.out = *dir_ / "hostile.gif";
  ExpectError<InputError>([&] { ExportDataset(e); }, "H.264 goes into");
}

// PNG frames are taken in natural order: f2 before f10, padded or not.
TEST(NaturalOrder, NumbersCompareAsNumbers) {
  EXPECT_TRUE(NaturalLess("f2.png", "f10.png"));
  EXPECT_FALSE(NaturalLess("f10.png", "f2.png"));
  EXPECT_TRUE(NaturalLess("f09.png", "f10.png"));
  EXPECT_TRUE(NaturalLess("a.png", "b.png"));
  EXPECT_TRUE(NaturalLess("run1_f3.png", "run2_f1.png"));
  EXPECT_FALSE(NaturalLess("f7.png", "f7.png"));
}

// Export refuses what it cannot write, before writing anything.
TEST_F(ImportTest, ExportRefusesBadOptions) {
  ExportOptions e;
  e.data = *data_;
  e.out = *dir_ / "odd.mp4";
  e.scale = 0;
  ExpectError<InputError>([&] { ExportDataset(e); }, "--scale");
  e.scale = 1;
  e.crf = 60;
  ExpectError<InputError>([&] { ExportDataset(e); }, "crf");
  e.crf = 18;
  e.runs = "0,99";
  ExpectError<InputError>([&] { ExportDataset(e); }, "'99' is not a run");
  e.runs = "all";
  e.out = *dir_ / "video.nosuchcontainer";
  ExpectError<InputError>([&] { ExportDataset(e); }, "H.264 goes into");
  EXPECT_FALSE(fs::exists(*dir_ / "odd.mp4"));
}

// A system known only from video: a description without an MJCF model, every length given.
constexpr const char* kVideoOnlyPendulum = R"(name = "filmed_pendulum"
keypoints = ["bob"]
[[constraints]]
type = "distance_to_point"
keypoint = 1
point = [0.0, 0.0]
length = 0.5
[actions]
range = [[-2.0, 2.0]]
)";

// Such a description imports, cannot be simulated, and must give every number.
TEST_F(ImportTest, ASystemWithoutAnMjcfModelImportsButDoesNotSimulate) {
  std::ofstream(*dir_ / "filmed.toml") << kVideoOnlyPendulum;
  const SystemDescription d = LoadSystem(*dir_ / "filmed.toml");
  EXPECT_TRUE(d.mjcf.empty());
  EXPECT_EQ(d.nq(), 0);
  ExpectError<InputError>([&] { Environment env(d); }, "has no MJCF model");
  // Round trip through the text a data set stores.
  const SystemDescription again = ParseSystem(SystemToToml(d), "stored", "/");
  EXPECT_TRUE(again.mjcf.empty());
  EXPECT_EQ(again.ConstraintTerms().size(), 1u);
  // Nothing can be measured without a model.
  std::string no_length = kVideoOnlyPendulum;
  no_length.replace(no_length.find("length = 0.5\n"), 13, "");
  ExpectError<InputError>([&] { ParseSystem(no_length, "x.toml", "/"); },
                          "nothing can be measured: give its length");
  std::string with_grid = std::string(kVideoOnlyPendulum) + "[state_grid]\nqpos = []\n";
  ExpectError<InputError>([&] { ParseSystem(with_grid, "x.toml", "/"); }, "needs an mjcf model");
}

// A model trains on an imported data set of a system with no simulator, and evaluate and
// predict say what needs one instead of failing.
TEST_F(ImportTest, TrainEvaluateAndPredictWorkWithoutASimulator) {
  ExportOptions e;
  e.data = *data_;
  e.out = *dir_ / "train.mp4";
  e.scale = 2;
  ExportDataset(e);
  std::ofstream(*dir_ / "filmed_for_training.toml") << kVideoOnlyPendulum;
  ImportOptions o = Options(e.out, "train.h5");
  o.system = (*dir_ / "filmed_for_training.toml").string();
  const fs::path imported = ImportDataset(o).path;
  const DatasetInfo info = Dataset::Open(imported).info();
  EXPECT_EQ(info.env, EnvName::kCustom);
  EXPECT_EQ(info.system, "filmed_pendulum");
  EXPECT_EQ(info.nq, 0);
  std::string out;
  ASSERT_EQ(testing::RunCli("train --data " + imported.string() +
                                " --hidden 8 --epochs 1 "
                                "--threads 2 --out " +
                                (*dir_ / "run").string(),
                            &out),
            0)
      << out;
  ASSERT_EQ(testing::RunCli("evaluate " + (*dir_ / "run").string() + " --no-plots", &out), 0)
      << out;
  EXPECT_NE(out.find("n/a (needs a simulator: imported data set)"), std::string::npos) << out;
  EXPECT_NE(out.find("the validation runs' first frames"), std::string::npos) << out;
  ASSERT_EQ(testing::RunCli("predict " + (*dir_ / "run").string() + " --frames 30", &out), 0)
      << out;
  EXPECT_NE(out.find("note: 10 frames, not 30"), std::string::npos) << out;
}

}  // namespace
}  // namespace keycld
