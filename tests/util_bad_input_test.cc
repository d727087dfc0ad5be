// Bad values where they enter (options, TOML, HDF5 attributes), signals and stale temporaries:
// one clear line each, nothing left half-written. The values come from an adversarial sweep of
// every command (docs/robustness.md lists the cases and the tests that cover them).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "keycld/data/dataset.h"
#include "keycld/train/config.h"
#include "keycld/util/atomic_file.h"
#include "keycld/util/error.h"
#include "keycld/util/interrupt.h"
#include "test_util.h"
#include "tiny_fixtures.h"

namespace keycld {
namespace {

namespace fs = std::filesystem;

// Runs the CLI and checks: exit code `rc`, `expected` in the one error line, no stack dump.
void ExpectRefused(const std::string& args, int rc, const std::string& expected) {
  std::string out;
  EXPECT_EQ(testing::RunCli(args, &out), rc) << args << "\n" << out;
  EXPECT_NE(out.find(expected), std::string::npos) << args << "\n" << out;
  EXPECT_EQ(out.find("frame #"), std::string::npos) << out;
  EXPECT_LT(out.size(), 400u) << "not one short line:\n" << out;
}

TEST(BadInput, OptionsOutOfRangeAreRefusedUpFront) {
  testing::TempDir dir;
  const std::string out = " --out " + (dir / "x").string();
  // Size bounds: these asked for 640 GB of disk or 720 GB of memory before.
  ExpectRefused("generate --runs 2000000000 --frames 10 --size 16" + out, 1,
                "must stay within 10,000,000 frames");
  ExpectRefused("generate --runs 10 --frames 2000000000 --size 16" + out, 1, "frames ≤ 100,000");
  ExpectRefused("train --data nothing.h5 --hidden 100000" + out, 1, "in [8, 256], got 100000");
  ExpectRefused("train --data nothing.h5 --lr 1e300" + out, 1, "learning rates must be in (0, 1]");
  // Finite numbers with plain bounds (CLI11's own checks let NaN through and printed DBL_MAX).
  ExpectRefused("control --model-source known --env pendulum --target-state 0 --seconds nan" + out,
                2, "must be a finite number > 0 and ≤ 3600, got nan");
  ExpectRefused("control --model-source known --env pendulum --target-state 0 --hold -1" + out, 2,
                "must be a finite number ≥ 0 and ≤ 3600, got -1");
  ExpectRefused(
      "control --model-source known --env pendulum --target-state 0 --angle-tolerance inf" + out, 2,
      "must be a finite number > 0, got inf");
  ExpectRefused("benchmark --seeds 0" + out, 2, "must be a finite number ≥ 1 and ≤ 1000, got 0");
  ExpectRefused("run --predict-frames 2" + out, 2,
                "must be 0 (no prediction) or in [3, 100000], got 2");
  EXPECT_FALSE(fs::exists(dir / "x"));
}

TEST(BadInput, ConfigValuesOutOfRangeNameTheirBounds) {
  auto refused = [](const std::string& toml, const std::string& expected) {
    TrainConfig c;
    c.env = "pendulum";
    try {
      c.MergeToml(toml, "test.toml");
      c.Validate();
      ADD_FAILURE() << toml << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  refused("[model]\nsigma = inf\n", "sigma must be finite and > 0");
  refused("[train]\ngrad_clip = inf\n", "grad_clip must be finite and > 0");
  refused("[train]\nlr = 1e300\n", "learning rates must be in (0, 1]");
  refused("[model]\nhidden = 100000\n", "in [8, 256], got 100000");
  refused("[data]\nsize = 7\n", "[data] size must be in [8, 1024]");
  refused("[eval]\nrtol = inf\n", "rtol and atol must be in (0, 1]");
  refused("[eval]\natol = inf\n", "rtol and atol must be in (0, 1]");
  refused("[eval]\nval_runs = 1000000000\n", "val_runs must be in [0, 1000000]");
}

TEST(BadInput, EvaluateBoundsTheEnergyRollout) {
  testing::TempDir dir;
  ExpectRefused("evaluate " + dir.path().string() + " --energy-frames 2000000000", 1,
                "--energy-frames must be in [3, 100000], got 2000000000");
  ExpectRefused("evaluate " + dir.path().string() + " --refine-start -3", 1,
                "start refinement: steps must be in [0, 100000], got -3");
  ExpectRefused("evaluate " + dir.path().string() + " --refine-start 10 --refine-lr nan", 1,
                "start refinement: the learning rate must be a positive number");
  ExpectRefused("predict " + dir.path().string() + " --refine-start 10 --refine-lr -1", 1,
                "start refinement: the learning rate must be a positive number");
}

// Copies the tiny data set and overwrites one attribute.
template <typename T>
fs::path WithAttribute(const fs::path& original, const fs::path& copy, const char* name, T value) {
  fs::copy_file(original, copy);
  hid_t f = H5Fopen(copy.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  EXPECT_GE(f, 0);
  H5Adelete(f, name);
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t type = -1;
  const void* data = &value;
  const char* text = nullptr;
  if constexpr (std::is_same_v<T, double>) {
    type = H5Tcopy(H5T_IEEE_F64LE);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    type = H5Tcopy(H5T_STD_I64LE);
  } else {
    type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    text = value;
    data = &text;
  }
  hid_t a = H5Acreate2(f, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  EXPECT_GE(H5Awrite(a, type, data), 0);
  H5Aclose(a);
  H5Tclose(type);
  H5Sclose(space);
  H5Fclose(f);
  return copy;
}

void ExpectFormatError(const fs::path& file, const std::string& expected) {
  try {
    Dataset::Open(file);
    ADD_FAILURE() << file << " opened";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(BadInput, DataSetAttributesAreCheckedWhereTheyAreRead) {
  testing::TempDir dir;
  const fs::path data = testing::TinyPendulumData(dir / "data");
  ASSERT_NO_THROW(Dataset::Open(data));
  const double nan = std::nan("");
  ExpectFormatError(WithAttribute(data, dir / "a.h5", "vpt_epsilon", nan), "'vpt_epsilon'");
  ExpectFormatError(WithAttribute(data, dir / "b.h5", "vpt_epsilon", -1.0), "'vpt_epsilon'");
  ExpectFormatError(WithAttribute(data, dir / "c.h5", "dt", 1e300), "'dt'");
  ExpectFormatError(WithAttribute(data, dir / "d.h5", "dt", HUGE_VAL), "'dt'");
  // 2³² + 6 runs read as 6 when cast to int.
  ExpectFormatError(WithAttribute(data, dir / "e.h5", "runs", int64_t(4294967302)),
                    "'runs' = 4294967302");
  ExpectFormatError(WithAttribute(data, dir / "f.h5", "seed", int64_t(-1)), "'seed'");
  // A pendulum's arrays under a cartpole's name.
  ExpectFormatError(WithAttribute(data, dir / "g.h5", "env", "cartpole"),
                    "attribute 'env' = 'cartpole' but attribute 'system' = 'pendulum'");
}

TEST(BadInput, TimeoutsDoubleSignalStopsGenerationCleanly) {
  testing::TempDir dir;
  // `timeout` sends SIGTERM to the process and then to its group: two signals at once are one
  // request (before: the second forced an exit that left the temporary file).
  const std::string cmd = std::string(KEYCLD_CLI_PATH) +
                          " generate --runs 400 --frames 20 --size 16 --workers 1 --out " +
                          dir.path().string() +
                          " 2>&1 & P=$!; sleep 3; kill -TERM $P; kill -TERM $P; wait $P; "
                          "echo rc=$?";
  std::string out;
  ASSERT_NE(testing::RunShell(cmd, &out), -1);
  EXPECT_NE(out.find("generation interrupted; nothing was written"), std::string::npos) << out;
  EXPECT_NE(out.find("rc=130"), std::string::npos) << out;
  for (const auto& e : fs::directory_iterator(dir.path())) ADD_FAILURE() << e.path();
}

// Run only as the child of the next test (a fresh process: fork() inside a test process that
// already has LibTorch's threads can deadlock the child).
TEST(BadInput, DISABLED_SecondCtrlCChild) {
  const char* dir = std::getenv("KEYCLD_TEST_DIR");
  if (dir == nullptr) GTEST_SKIP();
  AtomicFile out(fs::path(dir) / "data.h5");  // an unfinished write: its temporary exists
  InterruptGuard guard;
  ::raise(SIGINT);  // the first Ctrl-C only sets the flag
  if (!InterruptRequested()) ::_exit(3);
  ::usleep(1200000);  // a second one, later than the repeat window, ends the process
  ::raise(SIGINT);
  ::_exit(4);  // not reached
}

TEST(BadInput, ASecondCtrlCStopsAtOnceAndRemovesUnfinishedOutputs) {
  testing::TempDir dir;
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const std::string cmd = "KEYCLD_TEST_DIR='" + dir.path().string() + "' '" + self +
                          "' --gtest_filter=BadInput.DISABLED_SecondCtrlCChild "
                          "--gtest_also_run_disabled_tests > /dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT);
  for (const auto& e : fs::directory_iterator(dir.path())) ADD_FAILURE() << e.path() << " left";
}

TEST(BadInput, TemporariesOfKilledWritersAreRemovedByTheNextWrite) {
  testing::TempDir dir;
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);  // a process that no longer exists
  const fs::path stale = dir / (".keycld-" + std::to_string(child) + "-123.tmp");
  const fs::path alive = dir / (".keycld-" + std::to_string(::getpid()) + "-7.tmp");
  const fs::path other = dir / ".keycld-notes.tmp";
  for (const fs::path& p : {stale, alive, other}) std::ofstream(p) << "x";
  WriteTextAtomically(dir / "report.json", "{}\n");
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(alive));  // its writer (this process) may still be writing
  EXPECT_TRUE(fs::exists(other));  // not a name keycld makes
  EXPECT_TRUE(fs::exists(dir / "report.json"));
}

}  // namespace
}  // namespace keycld
