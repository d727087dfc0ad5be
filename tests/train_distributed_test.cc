// Batches of sequences and data-parallel training on c10d Gloo (docs/distributed.md).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <thread>

#include "keycld/data/dataset.h"
#include "keycld/models/registry.h"
#include "keycld/train/checkpoint.h"
#include "keycld/train/distributed.h"
#include "keycld/train/loss.h"
#include "keycld/train/metrics.h"
#include "keycld/train/trainer.h"
#include "keycld/train/vpt.h"
#include "keycld/util/error.h"
#include "test_util.h"
#include "tiny_fixtures.h"

extern char** environ;

namespace keycld {
namespace {

namespace fs = std::filesystem;

constexpr auto Parameters = &testing::CheckpointParameters;

using testing::ReadText;

std::vector<double> Losses(const fs::path& run) {
  std::vector<double> out;
  for (const StepRecord& s : ReadMetrics(run / "metrics.jsonl").steps) out.push_back(s.loss);
  return out;
}

std::string TrainArgs(const fs::path& data, const fs::path& run, const std::string& extra) {
  return "train --data " + data.string() + " --out " + run.string() +
         " --hidden 8 --seed 5 --epochs 40 " + extra;
}

// The environment variables of the launcher conventions, set for one scope.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::map<std::string, std::string> vars) {
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                             "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}) {
      if (const char* v = std::getenv(name)) saved_[name] = v;
      ::unsetenv(name);
    }
    for (const auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
    set_ = vars;
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : set_) ::unsetenv(k.c_str());
    for (const auto& [k, v] : saved_) ::setenv(k.c_str(), v.c_str(), 1);
  }

 private:
  std::map<std::string, std::string> saved_, set_;
};

TEST(Distributed, LauncherEnvironmentConventions) {
  {
    ScopedEnv env({});
    EXPECT_FALSE(DistributedFromEnvironment());
    EXPECT_THROW(DistributedFromEnvironment("tcp://127.0.0.1:29500"), InputError);
  }
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
    EXPECT_FALSE(DistributedFromEnvironment());  // a world of one is one process
  }
  {
    ScopedEnv env({{"RANK", "1"},
                   {"WORLD_SIZE", "4"},
                   {"LOCAL_RANK", "1"},
                   {"MASTER_ADDR", "node7"},
                   {"MASTER_PORT", "29511"}});
    auto d = DistributedFromEnvironment();
    ASSERT_TRUE(d);
    EXPECT_EQ(d->rank, 1);
    EXPECT_EQ(d->world_size, 4);
    EXPECT_EQ(d->local_rank, 1);
    EXPECT_EQ(d->init, "tcp://node7:29511");
    EXPECT_EQ(DistributedFromEnvironment("file:///shared/store")->init, "file:///shared/store");
  }
  {
    ScopedEnv env({{"SLURM_PROCID", "3"},
                   {"SLURM_NTASKS", "8"},
                   {"SLURM_LOCALID", "0"},
                   {"MASTER_ADDR", "n1"},
                   {"MASTER_PORT", "1234"}});
    auto d = DistributedFromEnvironment();
    ASSERT_TRUE(d);
    EXPECT_EQ(d->rank, 3);
    EXPECT_EQ(d->world_size, 8);
    EXPECT_EQ(d->local_rank, 0);
  }
  // Malformed or inconsistent: one clear error each.
  for (const auto& vars : std::vector<std::map<std::string, std::string>>{
           {{"RANK", "0"}, {"WORLD_SIZE", "2"}},  // no MASTER_ADDR/PORT, no --dist-init
           {{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}},
           {{"RANK", "x"}, {"WORLD_SIZE", "2"}},
           {{"RANK", "0"}, {"WORLD_SIZE", "-3"}},
           {{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}},
           {{"RANK", "1"}},                       // a stray RANK without a world size
           {{"RANK", "3"}, {"WORLD_SIZE", "1"}},  // a rank outside a world of one
           {{"WORLD_SIZE", "0"}}}) {
    ScopedEnv env(vars);
    EXPECT_THROW(DistributedFromEnvironment(), InputError);
  }
  DistributedOptions bad;
  bad.world_size = 2;
  bad.init = "udp://x:1";
  EXPECT_THROW(Communicator::Connect(bad), InputError);
  bad.init = "tcp://127.0.0.1:99999";
  EXPECT_THROW(Communicator::Connect(bad), InputError);
  bad.init = "file:///tmp/x";
  bad.backend = "mpi";
  EXPECT_THROW(Communicator::Connect(bad), InputError);
  // A FileStore path that is a folder, in a folder that does not exist, or an existing file that
  // is not a store (a data set given by mistake): refused at once, the file left as it was.
  testing::TempDir dir;
  const fs::path data = testing::TinyPendulumData(dir.path());
  const std::string before = ReadText(data);
  bad.backend = "gloo";
  bad.timeout_seconds = 600;
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& path : {data.string(), dir.path().string(), dir.path().string() + "/",
                                  (dir / "missing/store").string()}) {
    bad.init = "file://" + path;
    EXPECT_THROW(Communicator::Connect(bad), InputError) << path;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(ReadText(data), before);
}

// One step on all five training runs at once: its update must be Adam's first step,
// −lr · g / (|g| + ε) with g the mean of the five runs' gradients, computed here by hand.
TEST(Distributed, ABatchStepsOnTheMeanGradientOfItsSequences) {
  testing::TempDir dir;
  const fs::path data = testing::TinyPendulumData(dir.path());
  TrainOptions t = testing::TinyTrainOptions(data, dir / "run");
  t.config.seed = 7;
  t.config.augment = false;
  t.config.batch_sequences = 5;
  t.config.max_steps = 1;
  EXPECT_EQ(Train(t).steps, 1);
  const auto trained = Parameters(dir / "run/checkpoints/last.pt");

  Dataset d = Dataset::Open(data);
  ModelSpec spec = testing::TinyModelSpec(EnvName::kPendulum);
  spec.dt = d.info().dt;
  torch::manual_seed(7);
  Model model = CreateModel(spec);
  model->train();
  // The U-Net kernels training used (auto: Winograd here), so that gradients that vanish in
  // exact arithmetic (a convolution bias before a one-channel GroupNorm group) hold the same
  // rounding noise, and Adam's ±lr step the same sign.
  model->SetTrunkKernels(ResolveTrunkKernels(t.config.kernels, t.config.device,
                                             t.config.precision));
  std::vector<torch::Tensor> params = model->parameters();
  std::vector<torch::Tensor> start;
  for (auto& p : params) start.push_back(p.detach().clone());
  torch::Tensor images, actions;
  LoadRuns(d, d.TrainRuns(), &images, &actions);
  ASSERT_EQ(images.size(0), 5);
  for (int64_t r = 0; r < 5; ++r) {
    LossTerms loss = SequenceLoss(model, ImagesToFloat(images[r], torch::kCPU), actions[r],
                                  torch::Tensor(), LossOptions{});
    (loss.total / 5.0).backward();
  }
  // Learning rate per parameter: the perception group's, or the dynamics group's (× 0.2).
  std::map<const void*, double> lr;
  for (auto& p : model->PerceptionParameters()) lr[p.data_ptr()] = t.config.lr;
  for (auto& p : model->DynamicsParameters()) {
    lr[p.data_ptr()] = t.config.lr * t.config.dynamics_lr_scale;
  }
  ASSERT_EQ(trained.size(), params.size());
  int64_t checked = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].grad().defined()) {
      // Not in the loss (the input matrix of an unactuated data set): Adam leaves it alone.
      EXPECT_TRUE(torch::equal(trained[i], start[i])) << "parameter " << i;
      continue;
    }
    const double step = lr.at(params[i].data_ptr());
    torch::Tensor g = params[i].grad().clamp(-t.config.grad_clip, t.config.grad_clip);
    torch::Tensor want = start[i] - step * g / (g.abs() + 1e-8);
    // Where |g| is far above ε the update is ±lr to float precision; where it is near ε it
    // depends on rounding of g itself, so those few elements are left out.
    torch::Tensor sure = g.abs() > 1e-5;
    checked += sure.sum().item<int64_t>();
    torch::Tensor err = (trained[i] - want).abs().masked_select(sure);
    if (err.numel() > 0) {
      EXPECT_LT(err.max().item<double>(), 1e-3 * step) << "parameter " << i;
    }
  }
  EXPECT_GT(checked, 1000);
  // A batch larger than the training runs is refused.
  t.config.batch_sequences = 6;
  t.run_dir = dir / "too-big";
  EXPECT_THROW(Train(t), InputError);
}

TEST(Distributed, TwoGlooRanksTrainLikeOneProcessWithTwoSequencesPerStep) {
  testing::TempDir dir;
  const fs::path data = testing::TinyPendulumData(dir.path());
  std::string out;
  // 7 steps: 2 per epoch (5 training runs, 2 per step), so epochs end and validate in between.
  ASSERT_EQ(testing::RunCli(
                TrainArgs(data, dir / "one", "--steps 7 --batch-sequences 2 --threads 1"), &out),
            0)
      << out;
  ASSERT_EQ(testing::RunCli(TrainArgs(data, dir / "two", "--steps 7 --nproc 2"), &out), 0) << out;
  EXPECT_NE(out.find("1 on each of 2 ranks, gloo"), std::string::npos) << out;
  EXPECT_NE(out.find("2 sequences per step"), std::string::npos) << out;
  const auto a = Parameters(dir / "one/checkpoints/last.pt");
  const auto b = Parameters(dir / "two/checkpoints/last.pt");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-7)) << "parameter " << i;
  }
  const auto la = Losses(dir / "one"), lb = Losses(dir / "two");
  ASSERT_EQ(la.size(), 7u);
  ASSERT_EQ(lb.size(), 7u);
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-5 * la[i]) << "step " << i;
  // The effective batch is recorded; only rank 0 wrote the run folder.
  EXPECT_EQ(TrainConfig::FromToml(dir / "two/config.toml").batch_sequences, 2);
  EXPECT_TRUE(fs::exists(dir / "two/checkpoints/epoch-0003.pt"));
  EXPECT_EQ(ReadMetrics(dir / "two/metrics.jsonl").epochs.size(), 3u);

  // Stopped after 3 steps (mid-epoch) and resumed to 7 on two ranks: the same run exactly.
  ASSERT_EQ(testing::RunCli(TrainArgs(data, dir / "cut", "--steps 3 --nproc 2"), &out), 0) << out;
  ASSERT_EQ(testing::RunCli(
                "train --out " + (dir / "cut").string() + " --resume --steps 7 --nproc 2", &out),
            0)
      << out;
  const auto c = Parameters(dir / "cut/checkpoints/last.pt");
  for (size_t i = 0; i < b.size(); ++i) EXPECT_TRUE(torch::equal(b[i], c[i])) << "parameter " << i;
  EXPECT_EQ(Losses(dir / "cut"), lb);

  // A batch the ranks cannot share, or another batch on resume: refused.
  EXPECT_EQ(testing::RunCli(TrainArgs(data, dir / "odd", "--steps 2 --nproc 2 --batch-sequences 3"),
                            &out),
            1)
      << out;
  EXPECT_NE(out.find("multiple of the world size"), std::string::npos) << out;
  EXPECT_EQ(testing::RunCli(
                "train --out " + (dir / "one").string() + " --resume --steps 9 --batch-sequences 4",
                &out),
            1)
      << out;
  EXPECT_NE(out.find("the batch is part of a run"), std::string::npos) << out;
}

// Starts `args` (argv[0] = the CLI) with extra environment variables, output to `log`.
pid_t Spawn(std::vector<std::string> args, const std::vector<std::string>& extra_env,
            const fs::path& log) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.push_back(*e);
  for (const auto& v : extra_env) env.push_back(v);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& v : env) envp.push_back(v.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

TEST(Distributed, AKilledRankStopsTheOtherWithAClearErrorInsteadOfHanging) {
  testing::TempDir dir;
  const fs::path data = testing::TinyPendulumData(dir.path());
  const std::string store = "file://" + (dir / "store").string();
  auto args = [&](int rank) {
    return std::vector<std::string>{KEYCLD_CLI_PATH,  "train",
                                    "--data",         data.string(),
                                    "--out",          (dir / "run").string(),
                                    "--hidden",       "8",
                                    "--epochs",       "100000",
                                    "--threads",      "1",
                                    "--dist-init",    store,
                                    "--dist-timeout", "120"};
  };
  auto env = [](int rank) {
    return std::vector<std::string>{"RANK=" + std::to_string(rank), "WORLD_SIZE=2"};
  };
  const pid_t r0 = Spawn(args(0), env(0), dir / "rank0.log");
  const pid_t r1 = Spawn(args(1), env(1), dir / "rank1.log");
  ASSERT_GT(r0, 0);
  ASSERT_GT(r1, 0);
  // Once they train (rank 0 has written a few step records), rank 1 dies.
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
    if (fs::exists(dir / "run/checkpoints/epoch-0002.pt")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(fs::exists(dir / "run/checkpoints/epoch-0002.pt")) << ReadText(dir / "rank0.log");
  ::kill(r1, SIGKILL);
  ::waitpid(r1, nullptr, 0);
  // Rank 0 stops by itself, well before the 120 s timeout, with an error naming the cause.
  const auto killed = std::chrono::steady_clock::now();
  int status = 0;
  pid_t done = 0;
  while ((done = ::waitpid(r0, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - killed < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (done == 0) {
    ::kill(r0, SIGKILL);
    ::waitpid(r0, nullptr, 0);
    FAIL() << "rank 0 still running 60 s after rank 1 was killed: " << ReadText(dir / "rank0.log");
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string log = ReadText(dir / "rank0.log");
  EXPECT_NE(log.find("rank 0 of 2"), std::string::npos) << log;
  EXPECT_NE(log.find("another rank stopped or the connection was lost"), std::string::npos) << log;
  // What was saved stays usable: the run resumes in one process.
  std::string out;
  ASSERT_EQ(testing::RunCli("train --out " + (dir / "run").string() + " --resume --epochs 3", &out),
            0)
      << out;
}

// A TCP port nobody listens on now (the kernel's choice for port 0).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return -1;
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// torchrun's conventions (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: a TCPStore on rank 0)
// give the run --nproc gives; a rank whose peers never come stops at --dist-timeout.
TEST(Distributed, TcpRendezvousFromTheEnvironmentAndATimeoutForAMissingRank) {
  testing::TempDir dir;
  const fs::path data = testing::TinyPendulumData(dir.path());
  const int port = FreePort();
  ASSERT_GT(port, 0);
  auto args = [&](const std::string& run) {
    return std::vector<std::string>{
        KEYCLD_CLI_PATH, "train", "--data",  data.string(), "--out",     run, "--hidden", "8",
        "--seed",        "5",     "--steps", "3",           "--threads", "1", "--epochs", "40"};
  };
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    pids.push_back(Spawn(args((dir / "tcp").string()),
                         {"RANK=" + std::to_string(r), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
                          "MASTER_PORT=" + std::to_string(port)},
                         dir / ("tcp" + std::to_string(r) + ".log")));
    ASSERT_GT(pids.back(), 0);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadText(dir / "tcp0.log");
  }
  std::string out;
  ASSERT_EQ(testing::RunCli(TrainArgs(data, dir / "nproc", "--steps 3 --nproc 2"), &out), 0) << out;
  const auto a = Parameters(dir / "tcp/checkpoints/last.pt");
  const auto b = Parameters(dir / "nproc/checkpoints/last.pt");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;

  // Ranks started with different settings (here --lr) refuse to train, naming the key.
  std::vector<pid_t> mixed;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> c = args((dir / "mixed").string());
    c.insert(c.end(), {"--dist-init", "file://" + (dir / "mixed.store").string(), "--lr",
                       r == 0 ? "0.001" : "0.002"});
    mixed.push_back(Spawn(c, {"RANK=" + std::to_string(r), "WORLD_SIZE=2"},
                          dir / ("mixed" + std::to_string(r) + ".log")));
    ASSERT_GT(mixed.back(), 0);
  }
  for (int r = 0; r < 2; ++r) {
    int status = 0;
    ::waitpid(mixed[size_t(r)], &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << "rank " << r;
  }
  const std::string mixed1 = ReadText(dir / "mixed1.log");
  EXPECT_NE(mixed1.find("settings differ"), std::string::npos) << mixed1;
  EXPECT_NE(mixed1.find("[train] lr: 0.002 against 0.001"), std::string::npos) << mixed1;
  EXPECT_NE(ReadText(dir / "mixed0.log").find("rank(s) 1 do not start like rank 0"),
            std::string::npos)
      << ReadText(dir / "mixed0.log");
  EXPECT_FALSE(fs::exists(dir / "mixed/checkpoints/last.pt"));

  // Rank 0 of 2 alone: a clear error after the 3 s timeout, no run folder content.
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> alone = args((dir / "alone").string());
  alone.insert(alone.end(),
               {"--dist-init", "file://" + (dir / "alone.store").string(), "--dist-timeout", "3"});
  const pid_t pid = Spawn(alone, {"RANK=0", "WORLD_SIZE=2"}, dir / "alone.log");
  ASSERT_GT(pid, 0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_GE(waited, 2.5);
  EXPECT_LT(waited, 60.0);
  const std::string log = ReadText(dir / "alone.log");
  EXPECT_NE(log.find("could not join the process group: Wait timeout after 3 s"), std::string::npos)
      << log;
  EXPECT_EQ(log.find("frame #"), std::string::npos) << log;  // no LibTorch backtrace
  EXPECT_FALSE(fs::exists(dir / "alone/checkpoints"));
}

}  // namespace
}  // namespace keycld
