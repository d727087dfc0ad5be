// A full disk on every writer: each command runs with a file-size limit (POSIX `ulimit -f` with
// SIGXFSZ ignored), so that the kernel fails the write that crosses it with EFBIG, through the
// same paths (write(2), pwrite(2) inside HDF5, stdio inside PLplot) where a full disk fails with
// ENOSPC. Every command must then print one line "keycld: error: cannot write '<final path>':
// ...", exit 1, leave nothing under that final name and no temporary file (".keycld-*") behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <fstream>
#include <regex>

#include "keycld/train/checkpoint.h"
#include "keycld/train/metrics.h"
#include "keycld/util/atomic_file.h"
#include "keycld/util/error.h"
#include "test_util.h"
#include "tiny_fixtures.h"

namespace keycld {
namespace {

namespace fs = std::filesystem;

// Runs the CLI with every file it writes limited to `bytes` (a multiple of 512).
int RunCliWithFileLimit(int64_t bytes, const std::string& args, std::string* output) {
  const std::string prefix = "trap '' XFSZ; ulimit -f " + std::to_string(bytes / 512) + "; exec ";
  const int status =
      testing::RunShell(prefix + std::string(KEYCLD_CLI_PATH) + " " + args + " 2>&1", output);
  if (status == -1) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<fs::path> TemporaryFiles(const fs::path& dir) {
  std::vector<fs::path> found;
  if (!fs::exists(dir)) return found;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().filename().string().rfind(".keycld-", 0) == 0) found.push_back(e.path());
  }
  return found;
}

// The checks of one failed command; `out_dir` is where it writes.
void ExpectCleanWriteFailure(int rc, const std::string& out, const fs::path& out_dir) {
  EXPECT_EQ(rc, 1) << out;
  std::smatch m;
  static const std::regex kLine("keycld: error: cannot write '([^']+)': ([a-z ]+)\n");
  ASSERT_TRUE(std::regex_search(out, m, kLine)) << out;
  const fs::path target = m[1].str();
  EXPECT_EQ(m[2].str(), "file too large") << out;
  EXPECT_EQ(target.string().rfind(out_dir.string(), 0), 0u) << target << " not in " << out_dir;
  EXPECT_FALSE(fs::exists(target)) << target << " was left behind";
  EXPECT_EQ(out.find("error"), out.rfind("error")) << "more than one error line:\n" << out;
  for (const char* crash :
       {"terminate called", "frame #", "Segmentation", "Aborted", "HDF5-DIAG"}) {
    EXPECT_EQ(out.find(crash), std::string::npos) << out;
  }
  EXPECT_TRUE(TemporaryFiles(out_dir).empty()) << TemporaryFiles(out_dir).front();
}

// `command --out <out_stem>-<limit>` under each file-size limit: a clean failure each time (the
// limits make the write fail in different files).
void ExpectEachLimitFailsCleanly(const std::string& command, const std::vector<int64_t>& limits,
                                 const fs::path& out_stem) {
  for (int64_t limit : limits) {
    std::string out;
    const fs::path o = out_stem.string() + "-" + std::to_string(limit);
    ExpectCleanWriteFailure(RunCliWithFileLimit(limit, command + " --out " + o.string(), &out), out,
                            o);
  }
}

// A run folder with an untrained 16x16 pendulum model and the data set it names.
fs::path MakeRun(const testing::TempDir& dir) {
  const fs::path data = testing::TinyPendulumData(dir / "data");
  torch::manual_seed(0);
  Model model = CreateModel(testing::TinyModelSpec(EnvName::kPendulum));
  const fs::path run = dir / "run";
  SaveCheckpoint(run / "checkpoints" / "last.pt", model, nullptr, {});
  std::ofstream(run / "config.toml") << "[data]\nfile = \"" << data.string() << "\"\n";
  return run;
}

TEST(FullDisk, GenerateLeavesNoDataSet) {
  testing::TempDir dir;
  std::string out;
  const int rc = RunCliWithFileLimit(
      8192,
      "generate --runs 6 --frames 10 --size 16 --seed 3 --workers 1 --out " + dir.path().string(),
      &out);
  ExpectCleanWriteFailure(rc, out, dir.path());
  EXPECT_FALSE(fs::exists(dir / "pendulum-none-16px-6x10-seed3.h5"));
}

TEST(FullDisk, TrainStopsCleanlyAndTheSameCommandThenTrains) {
  testing::TempDir dir;
  const fs::path data = testing::TinyPendulumData(dir / "data");
  const std::string args = "train --data " + data.string() +
                           " --epochs 1 --hidden 8 --threads 1 --out " + (dir / "run").string();
  std::string out;
  const int rc = RunCliWithFileLimit(64 * 1024, args, &out);
  ExpectCleanWriteFailure(rc, out, dir / "run");
  EXPECT_NE(out.find("checkpoints/last.pt"), std::string::npos) << out;
  // With space again, the same command trains (nothing half-written blocks it).
  ASSERT_EQ(testing::RunCli(args, &out), 0) << out;
  EXPECT_TRUE(fs::exists(dir / "run" / "checkpoints" / "last.pt"));
  EXPECT_EQ(ReadMetrics(dir / "run" / "metrics.jsonl").epochs.size(), 1u);
}

TEST(FullDisk, EvaluateLeavesNoTruncatedFigureOrReport) {
  testing::TempDir dir;
  const fs::path run = MakeRun(dir);
  // From 8 KiB: below it PLplot cannot write the temporary list of its drivers.
  ExpectEachLimitFailsCleanly("evaluate " + run.string() + " --threads 1", {8192, 32768, 49152},
                              dir / "report");
}

TEST(FullDisk, PredictLeavesNoTruncatedGifOrCsv) {
  testing::TempDir dir;
  const fs::path run = MakeRun(dir);
  ExpectEachLimitFailsCleanly("predict " + run.string() + " --frames 20 --threads 1", {512, 16384},
                              dir / "predict");
}

TEST(FullDisk, RenderAndControlLeaveNoTruncatedFile) {
  testing::TempDir dir;
  std::string out;
  int rc = RunCliWithFileLimit(
      1024, "render --env pendulum --size 128 --out " + (dir / "r" / "frame.png").string(), &out);
  ExpectCleanWriteFailure(rc, out, dir / "r");
  rc = RunCliWithFileLimit(8192,
                           "control --model-source known --env pendulum --target-state 0 "
                           "--seconds 0.3 --out " +
                               (dir / "c").string(),
                           &out);
  ExpectCleanWriteFailure(rc, out, dir / "c");
}

// In-process: the limit for this test process only (ctest runs each test in its own process).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    handler_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit l = saved_;
    l.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &l);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    ::signal(SIGXFSZ, handler_);
  }

 private:
  rlimit saved_{};
  sighandler_t handler_;
};

TEST(FullDisk, AFailedAtomicWriteKeepsTheOldFile) {
  testing::TempDir dir;
  const fs::path file = dir / "report.json";
  WriteTextAtomically(file, "old\n");
  {
    FileSizeLimit limit(4096);
    try {
      WriteTextAtomically(file, std::string(10000, 'x'));
      FAIL() << "no error";
    } catch (const IoError& e) {
      EXPECT_EQ(std::string(e.what()), "cannot write '" + file.string() + "': file too large");
    }
    EXPECT_NO_THROW(CopyFileAtomically(file, dir / "copy.json"));  // 4 bytes fit
  }
  std::ifstream in(file);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "old\n");
  EXPECT_TRUE(TemporaryFiles(dir.path()).empty());
}

TEST(FullDisk, MetricsKeepWholeRecordsOnly) {
  testing::TempDir dir;
  const fs::path file = dir / "metrics.jsonl";
  {
    MetricsWriter w(file, -1);
    FileSizeLimit limit(2048);
    StepRecord r;
    bool failed = false;
    for (int64_t s = 1; s <= 100 && !failed; ++s) {
      r.step = s;
      try {
        w.Append(r);
        w.Flush();
      } catch (const IoError& e) {
        EXPECT_EQ(std::string(e.what()), "cannot write '" + file.string() + "': file too large");
        failed = true;
      }
    }
    EXPECT_TRUE(failed);
  }
  const MetricsHistory h = ReadMetrics(file);
  ASSERT_FALSE(h.steps.empty());
  for (size_t i = 0; i < h.steps.size(); ++i) EXPECT_EQ(h.steps[i].step, int64_t(i) + 1);
  // A resume rewrites the file with whole records only.
  { MetricsWriter resumed(file, h.steps.back().step); }
  std::ifstream in(file);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(ReadMetrics(file).steps.size(), h.steps.size());
}

}  // namespace
}  // namespace keycld
