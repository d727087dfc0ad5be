// keycld benchmark (docs/method.md §8, §9): pooled statistics by hand, the CSV layout, and the
// command on a tiny data set: table rows, a VPT recomputed independently with a threshold set
// in the data file, finished cells skipped on a rerun, more epochs resumed, bad presets refused.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "keycld/data/dataset.h"
#include "keycld/data/generate.h"
#include "keycld/eval/benchmark.h"
#include "keycld/eval/evaluate.h"
#include "keycld/train/checkpoint.h"
#include "keycld/train/vpt.h"
#include "keycld/util/error.h"
#include "keycld/util/text.h"
#include "test_util.h"

namespace keycld {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using testing::ReadText;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

BenchmarkCell Cell(std::string model, int seed, std::vector<int> vpt, double train_seconds,
                   bool failed = false) {
  BenchmarkCell c;
  c.env = EnvName::kCartpole;
  c.control = ControlMode::kUnder;
  c.model = model;
  c.seed = seed;
  c.vpt = std::move(vpt);
  c.train_seconds = train_seconds;
  c.failed = failed;
  return c;
}

TEST(Benchmark, RowsPoolTheValidationRunsOfAllSeeds) {
  std::vector<BenchmarkCell> cells = {
      Cell("keycld", 0, {10, 20}, 100),
      Cell("node2", 0, {3}, 50),
      Cell("keycld", 1, {30, 40}, 300),
      Cell("node2", 1, {}, 70, /*failed=*/true),
  };
  std::vector<BenchmarkRow> rows = SummarizeCells(cells);
  ASSERT_EQ(rows.size(), 2u);
  // keycld: runs {10, 20, 30, 40}: mean 25, population std sqrt(125), median 25.
  EXPECT_EQ(rows[0].model, "keycld");
  EXPECT_EQ(rows[0].seeds, 2);
  EXPECT_EQ(rows[0].runs, 4);
  EXPECT_DOUBLE_EQ(rows[0].vpt_mean, 25.0);
  EXPECT_DOUBLE_EQ(rows[0].vpt_std, std::sqrt(125.0));
  EXPECT_DOUBLE_EQ(rows[0].vpt_median, 25.0);
  EXPECT_DOUBLE_EQ(rows[0].train_seconds, 200.0);  // mean over seeds
  // node2: one seed failed and is left out of the statistics.
  EXPECT_EQ(rows[1].seeds, 1);
  EXPECT_EQ(rows[1].failed_seeds, 1);
  EXPECT_EQ(rows[1].runs, 1);
  EXPECT_DOUBLE_EQ(rows[1].vpt_mean, 3.0);
  EXPECT_DOUBLE_EQ(rows[1].train_seconds, 50.0);
  const auto csv = Lines(ResultsCsv(rows));
  ASSERT_EQ(csv.size(), 3u);
  EXPECT_EQ(csv[0],
            "env,control,model,seeds,runs,vpt_mean,vpt_std,vpt_median,train_seconds,"
            "failed_seeds,fallback_runs");
  EXPECT_EQ(csv[1], "cartpole,under,keycld,2,4,25.0000,11.1803,25.0,200.0,0,0");
  EXPECT_EQ(csv[2], "cartpole,under,node2,1,1,3.0000,0.0000,3.0,50.0,1,0");
  // The chart is a PNG.
  testing::TempDir dir;
  WriteResultsChart(dir / "r.png", rows, "test");
  EXPECT_EQ(ReadText(dir / "r.png").substr(1, 3), "PNG");
  EXPECT_THROW(WriteResultsChart(dir / "none.png", {}, "test"), InputError);
}

void SetEpsilon(const fs::path& file, double epsilon) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t a = H5Aopen(f, "vpt_epsilon", H5P_DEFAULT);
  ASSERT_GE(a, 0);
  EXPECT_GE(H5Awrite(a, H5T_NATIVE_DOUBLE, &epsilon), 0);
  H5Aclose(a);
  H5Fclose(f);
}

TEST(Benchmark, CommandWritesTheTableSkipsFinishedCellsAndResumes) {
  testing::TempDir dir;
  fs::create_directories(dir / "configs/tiny");
  const std::string preset =
      "[data]\nenv = \"pendulum\"\ncontrol = \"none\"\nsize = 16\nruns = 6\nframes = 8\n"
      "[model]\nhidden = 8\n[train]\nepochs = 3\nthreads = 2\n"
      "[eval]\nval_runs = 1\nrtol = 1e-6\natol = 1e-6\n";
  std::ofstream(dir / "configs/tiny/pendulum-none.toml") << preset;
  const std::string args =
      "benchmark --preset tiny --envs pendulum --controls none,under --models keycld,node2 "
      "--epochs 1";
  std::string out;
  ASSERT_EQ(testing::RunCli(args, &out, dir.path()), 0) << out;
  const fs::path root = dir / "runs/benchmark-tiny";
  const fs::path node2 = root / "pendulum-none-node2-seed0";
  EXPECT_NE(out.find("skipped pendulum-under"), std::string::npos) << out;
  // Table rows: one per model, one validation run each (6 runs: 5 train, 1 validation).
  auto csv = Lines(ReadText(root / "results.csv"));
  ASSERT_EQ(csv.size(), 3u) << ReadText(root / "results.csv");
  EXPECT_EQ(csv[1].rfind("pendulum,none,keycld,1,1,", 0), 0u) << csv[1];
  EXPECT_EQ(csv[2].rfind("pendulum,none,node2,1,1,", 0), 0u) << csv[2];
  const std::string md = ReadText(root / "results.md");
  EXPECT_NE(md.find("| setting | keycld | node2 | mean frame (floor) | still frame (floor) |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| pendulum none |"), std::string::npos) << md;
  {
    // The floor columns end the row: the data set's mean-frame and still-frame VPTs.
    const Dataset d = Dataset::Open(dir / "data/pendulum-none-16px-6x8-seed0.h5");
    const std::string floor =
        " " + Fixed(MeanFrameVpt(d).mean, 1) + " | " + Fixed(StillFrameVpt(d).mean, 1) + " |\n";
    const size_t row = md.find("| pendulum none |");
    EXPECT_NE(md.substr(row, md.find('\n', row) - row + 1).find(floor), std::string::npos)
        << md;
  }
  EXPECT_NE(md.find("skipped pendulum-under"), std::string::npos) << md;
  EXPECT_EQ(ReadText(root / "results.png").substr(1, 3), "PNG");
  // --epochs overrides the preset: one epoch of 5 steps, the cell's model is node2.
  EXPECT_TRUE(fs::exists(node2 / "checkpoints/epoch-0001.pt"));
  EXPECT_FALSE(fs::exists(node2 / "checkpoints/epoch-0002.pt"));
  EXPECT_EQ(ReadCheckpointSpec(node2 / "checkpoints/last.pt").model, "node2");
  json cell = json::parse(ReadText(node2 / "result.json"));
  EXPECT_EQ(cell["steps"], 5);
  EXPECT_EQ(cell["model"], "node2");
  {
    // Each cell carries the state-grid checks keycld evaluate makes of the same checkpoint
    // (acceleration scale, the pole angle's RMS error), and results.md lists them per cell.
    const fs::path keycld = root / "pendulum-none-keycld-seed0";
    ASSERT_EQ(testing::RunCli("evaluate " + keycld.string() + " --checkpoint " +
                                  (keycld / "checkpoints/epoch-0001.pt").string() +
                                  " --no-plots --threads 2 --out " + (dir / "ev").string(),
                              &out, dir.path()),
              0)
        << out;
    const json ev = json::parse(ReadText(dir / "ev/evaluation.json"));
    const json own = json::parse(ReadText(keycld / "result.json"));
    const double scale = ev["dynamics_vs_true"]["acceleration_scale"].get<double>();
    ASSERT_TRUE(std::isfinite(scale)) << ev.dump();
    EXPECT_DOUBLE_EQ(own["acceleration_scale"].get<double>(), scale);
    ASSERT_EQ(own["keypoints_vs_state"].size(), 1u) << own.dump();
    EXPECT_EQ(own["keypoints_vs_state"][0]["coordinate"], "pole angle");
    EXPECT_EQ(own["keypoints_vs_state"][0]["unit"], "deg");
    EXPECT_DOUBLE_EQ(own["keypoints_vs_state"][0]["error_rms"].get<double>(),
                     ev["keypoints_vs_state"][0]["error_rms"].get<double>());
    EXPECT_NE(md.find("| pendulum none | keycld | 0 | " + Fixed(own["vpt_mean"].get<double>(), 2) +
                      " | " + Fixed(scale, 3) + " | pole angle " +
                      Fixed(own["keypoints_vs_state"][0]["error_rms"].get<double>(), 2) + "° |"),
              std::string::npos)
        << md;
    EXPECT_TRUE(cell.contains("acceleration_scale")) << cell.dump();  // node2 too
  }

  // A threshold between the frame errors of the trained model, written into the data file:
  // the benchmark's VPT must be the first frame above it, found here by hand.
  const fs::path data_file = dir / "data/pendulum-none-16px-6x8-seed0.h5";
  double epsilon = 0;
  std::vector<double> mse;
  {
    Dataset d = Dataset::Open(data_file);
    const int run = int(d.ValidationRuns().at(0));
    auto images =
        torch::from_blob(d.ReadImages(run).data(), {1, 8, 16, 16, 3}, torch::kUInt8).clone();
    auto actions = torch::tensor({float(d.ReadAction(run).at(0))}).reshape({1, 1});
    Model model = LoadModel(node2 / "checkpoints/epoch-0001.pt", torch::kCPU);
    VptOptions o;
    o.epsilon = 1e9;
    o.rtol = o.atol = 1e-6;
    torch::Tensor m = ValidPredictionTime(model, images, actions, o).mse[0];
    for (int t = 0; t < 8; ++t) mse.push_back(m[t].item<double>());
    std::vector<double> sorted = mse;
    std::sort(sorted.begin(), sorted.end());
    epsilon = 0.5 * (sorted[3] + sorted[4]);  // half of the frames above it
  }
  int expected = 7;
  for (int t = 0; t < 8; ++t) {
    if (mse[t] > epsilon) {
      expected = t;
      break;
    }
  }
  SetEpsilon(data_file, epsilon);
  fs::remove(node2 / "result.json");
  const auto last_time = fs::last_write_time(node2 / "checkpoints/last.pt");
  ASSERT_EQ(testing::RunCli(args, &out, dir.path()), 0) << out;
  // Nothing was trained again; keycld was read back, node2 re-evaluated.
  EXPECT_EQ(out.find(": training ("), std::string::npos) << out;
  EXPECT_EQ(out.find(": resuming training"), std::string::npos) << out;
  EXPECT_NE(out.find("pendulum-none-keycld-seed0: finished before"), std::string::npos) << out;
  EXPECT_EQ(fs::last_write_time(node2 / "checkpoints/last.pt"), last_time);
  cell = json::parse(ReadText(node2 / "result.json"));
  EXPECT_EQ(cell["vpt"], std::vector<int>{expected}) << "mse " << json(mse) << " eps " << epsilon;
  EXPECT_DOUBLE_EQ(cell["vpt_epsilon"].get<double>(), epsilon);
  csv = Lines(ReadText(root / "results.csv"));
  EXPECT_EQ(csv[2].rfind("pendulum,none,node2,1,1," + std::to_string(expected) + ".0000,", 0), 0u)
      << csv[2];
  // A third run recomputes nothing.
  ASSERT_EQ(testing::RunCli(args, &out, dir.path()), 0) << out;
  EXPECT_NE(out.find("pendulum-none-node2-seed0: finished before"), std::string::npos) << out;
  EXPECT_NE(out.find("2 of 2 cells were already finished"), std::string::npos) << out;
  {
    // Read back from result.json, the checks are still in the table.
    const std::string again = ReadText(root / "results.md");
    const json own = json::parse(ReadText(root / "pendulum-none-keycld-seed0/result.json"));
    EXPECT_NE(again.find("| pendulum none | keycld | 0 | " +
                         Fixed(own["vpt_mean"].get<double>(), 2) + " | " +
                         Fixed(own["acceleration_scale"].get<double>(), 3) + " |"),
              std::string::npos)
        << again;
  }

  // More epochs: the cells resume from their checkpoints.
  ASSERT_EQ(testing::RunCli(
                "benchmark --preset tiny --envs pendulum --controls none --models node2 --epochs 2",
                &out, dir.path()),
            0)
      << out;
  EXPECT_NE(out.find("resuming training"), std::string::npos) << out;
  cell = json::parse(ReadText(node2 / "result.json"));
  EXPECT_EQ(cell["steps"], 10);
  EXPECT_EQ(cell["epochs"], 2);

  // A cell folder trained with another configuration is refused; so are unknown presets.
  std::ofstream(dir / "configs/tiny/pendulum-none.toml")
      << "[data]\nenv = \"pendulum\"\nsize = 16\nruns = 6\nframes = 8\n[model]\nhidden = 16\n";
  EXPECT_EQ(testing::RunCli(args, &out, dir.path()), 1) << out;
  EXPECT_NE(out.find("another configuration"), std::string::npos) << out;
  EXPECT_EQ(testing::RunCli("benchmark --preset nowhere", &out, dir.path()), 1) << out;
  EXPECT_EQ(
      testing::RunCli("benchmark --preset tiny --envs pendulum --controls under", &out, dir.path()),
      1)
      << out;
  EXPECT_EQ(testing::RunCli("benchmark --preset tiny --models node3", &out, dir.path()), 2) << out;
}

}  // namespace
}  // namespace keycld

namespace keycld {
namespace {

TEST(Benchmark, ShardsCoverEveryCellOnceAndCollectWritesTheTable) {
  for (int n = 1; n <= 5; ++n) {
    for (int cell = 0; cell < 23; ++cell) {
      int owners = 0;
      for (int i = 0; i < n; ++i) owners += CellInShard(cell, i, n);
      EXPECT_EQ(owners, 1) << "cell " << cell << " of " << n << " shards";
    }
  }
  EXPECT_EQ(ParseShard("2/4"), std::make_pair(2, 4));
  for (const char* bad : {"4/4", "1", "a/2", "-1/2", "1/0", "1/2/3", "/3", "0/"}) {
    EXPECT_THROW(ParseShard(bad), InputError) << bad;
  }
  EXPECT_THROW(CellInShard(0, 3, 3), InputError);

  testing::TempDir dir;
  fs::create_directories(dir / "configs/tiny");
  std::ofstream(dir / "configs/tiny/pendulum-none.toml")
      << "[data]\nenv = \"pendulum\"\ncontrol = \"none\"\nsize = 16\nruns = 6\nframes = 8\n"
         "[model]\nhidden = 8\n[train]\nepochs = 1\nthreads = 2\n"
         "[eval]\nval_runs = 1\nrtol = 1e-6\natol = 1e-6\n";
  const std::string args =
      "benchmark --preset tiny --envs pendulum --controls none --models keycld,node2 --seeds 2";
  const std::vector<std::string> cells = {"pendulum-none-keycld-seed0",
                                          "pendulum-none-keycld-seed1", "pendulum-none-node2-seed0",
                                          "pendulum-none-node2-seed1"};
  const fs::path root = dir / "runs/benchmark-tiny";
  std::string out;
  ASSERT_EQ(testing::RunCli(args + " --shard 0/3", &out, dir.path()), 0) << out;
  EXPECT_NE(out.find("shard 0/3: 2 cell(s) done"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(root / "results.md"));  // shards write no table
  // Collected early: the finished cells and the list of the others.
  ASSERT_EQ(testing::RunCli(args + " --collect", &out, dir.path()), 0) << out;
  EXPECT_NE(out.find("2 cell(s) not finished yet: pendulum-none-keycld-seed1, "
                     "pendulum-none-node2-seed0"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find(": training ("), std::string::npos) << out;  // collect trains nothing
  std::map<std::string, int> trained;
  for (const char* shard : {"0/3", "1/3", "2/3"}) {
    ASSERT_EQ(testing::RunCli(args + " --shard " + shard, &out, dir.path()), 0) << out;
    for (const auto& c : cells) {
      trained[c] += out.find(c + ": training") != std::string::npos;
    }
  }
  // Shard 0's cells were done before: not trained again; every other cell trained once.
  EXPECT_EQ(trained["pendulum-none-keycld-seed0"], 0);
  EXPECT_EQ(trained["pendulum-none-node2-seed1"], 0);
  EXPECT_EQ(trained["pendulum-none-keycld-seed1"], 1);
  EXPECT_EQ(trained["pendulum-none-node2-seed0"], 1);
  for (const auto& c : cells) EXPECT_TRUE(fs::exists(root / c / "result.json")) << c;
  ASSERT_EQ(testing::RunCli(args + " --collect", &out, dir.path()), 0) << out;
  auto csv = Lines(ReadText(root / "results.csv"));
  ASSERT_EQ(csv.size(), 3u) << ReadText(root / "results.csv");
  EXPECT_EQ(csv[1].rfind("pendulum,none,keycld,2,2,", 0), 0u) << csv[1];  // 2 seeds, 2 runs
  EXPECT_EQ(csv[2].rfind("pendulum,none,node2,2,2,", 0), 0u) << csv[2];
  EXPECT_EQ(ReadText(root / "results.md").find("not finished"), std::string::npos);
  // Cells trained with other settings (Euler, here asked for RK4) are not this table's.
  EXPECT_EQ(testing::RunCli(args + " --integrator rk4 --shard 0/2", &out, dir.path()), 1) << out;
  EXPECT_NE(out.find("another configuration"), std::string::npos) << out;
  EXPECT_EQ(testing::RunCli(args + " --integrator rk4 --collect", &out, dir.path()), 1) << out;
  EXPECT_NE(out.find("no cell of this selection is finished"), std::string::npos) << out;
  // A model named twice is one column; an empty --shard is an error, not "no shard".
  ASSERT_EQ(testing::RunCli("benchmark --preset tiny --envs pendulum --controls none,none "
                            "--models keycld,node2,keycld --seeds 2 --collect",
                            &out, dir.path()),
            0)
      << out;
  EXPECT_EQ(Lines(ReadText(root / "results.csv")).size(), 3u);
  EXPECT_EQ(testing::RunCli(args + " --shard ''", &out, dir.path()), 1) << out;
  EXPECT_EQ(testing::RunCli(args + " --shard 3/3", &out, dir.path()), 1) << out;
  EXPECT_EQ(testing::RunCli(args + " --shard 0/2 --collect", &out, dir.path()), 2) << out;
  // Nothing finished in another folder: a clear error.
  EXPECT_EQ(testing::RunCli(args + " --collect --out elsewhere", &out, dir.path()), 1) << out;
  EXPECT_NE(out.find("no cell of this selection is finished"), std::string::npos) << out;
}

TEST(Benchmark, ValidationVptScoresDivergingRunsWithTheFallback) {
  testing::TempDir dir;
  GenerateOptions g;
  g.runs = 20;  // 2 validation runs
  g.frames = 8;
  g.size = 16;
  g.out_dir = dir.path();
  g.progress = false;
  const fs::path file = GenerateDataset(g).path;
  // ε = 1, the largest per-pixel MSE of [0, 1] images: every rendered frame is valid, only
  // divergence ends the VPT.
  SetEpsilon(file, 1.0);
  Dataset data = Dataset::Open(file);
  ModelSpec spec;
  spec.hidden = 8;
  spec.image_size = 16;
  spec.dt = data.info().dt;
  spec.model = "node2";
  torch::manual_seed(1);
  Model model = CreateModel(spec);
  // Batches of 1 and of 2 runs: every frame valid, nothing diverges.
  ValidationScore one = ValidationVpt(model, data, 1e-6, 1e-6, 1);
  ValidationScore two = ValidationVpt(model, data, 1e-6, 1e-6, 2);
  EXPECT_EQ(one.vpt, (std::vector<int>{7, 7}));
  EXPECT_EQ(two.vpt, one.vpt);
  EXPECT_EQ(one.fallback_runs, 0);
  // A network whose acceleration explodes: Dormand–Prince gives up on both runs, and the
  // fallback counts the frames before the first non-finite keypoint of a fine RK4 rollout.
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->DynamicsParameters()) p.normal_(0.0, 30.0);
  }
  ValidationScore bad = ValidationVpt(model, data, 1e-6, 1e-6, 2);
  EXPECT_EQ(bad.fallback_runs, 2);
  std::vector<int> expected;
  for (int64_t run : data.ValidationRuns()) {
    auto images =
        torch::from_blob(data.ReadImages(int(run)).data(), {1, 8, 16, 16, 3}, torch::kUInt8)
            .clone();
    IntegratorOptions io;
    io.substeps = 10;
    io.check_finite = false;
    torch::Tensor kp = PredictKeypoints(model, images.slice(1, 0, 3), torch::zeros({1, 1}), 8,
                                        IntegratorMethod::kRk4, io)
                           .keypoints[0];
    int first_bad = 7;
    for (int t = 7; t >= 0; --t)
      if (!torch::isfinite(kp[t]).all().item<bool>()) first_bad = t;
    expected.push_back(first_bad);
  }
  EXPECT_EQ(bad.vpt, expected);
  EXPECT_LT(expected[0] + expected[1], 14);  // the rollouts did diverge
}

}  // namespace
}  // namespace keycld

namespace keycld {
namespace {

// A model's own preset (<setting>-<model>.toml) replaces the setting's for that model only, and
// a model that is not built for a system is skipped with a note.
TEST(Benchmark, ABaselineTrainsWithItsOwnPresetAndIsRefusedWithoutOne) {
  testing::TempDir dir;
  fs::create_directories(dir / "configs/tiny");
  const std::string data =
      "[data]\nenv = \"pendulum\"\ncontrol = \"none\"\nsize = 16\nruns = 6\nframes = 8\n";
  std::ofstream(dir / "configs/tiny/pendulum-none.toml")
      << data << "[model]\nhidden = 8\n[train]\nepochs = 1\nthreads = 2\n"
      << "[eval]\nval_runs = 1\nrtol = 1e-6\natol = 1e-6\n";
  std::ofstream(dir / "configs/tiny/pendulum-none-lag-cavae.toml")
      << data << "[model]\nmodel = \"lag-cavae\"\n[train]\nepochs = 2\nthreads = 2\n"
      << "lr = 2e-3\nbatch_sequences = 2\naugment = false\n"
      << "[eval]\nval_runs = 1\nrtol = 1e-6\natol = 1e-6\n";
  std::ofstream(dir / "configs/tiny/cartpole-none.toml")
      << "[data]\nenv = \"cartpole\"\ncontrol = \"none\"\nsize = 16\nruns = 6\nframes = 8\n";
  std::string out;
  ASSERT_EQ(testing::RunCli("benchmark --preset tiny --envs pendulum --controls none "
                            "--models keycld,lag-cavae --epochs 1",
                            &out, dir.path()),
            0)
      << out;
  // The cartpole setting has no preset of lag-cavae's own, and KeyCLD's does not fit it: the
  // benchmark stops up front with the reason, before any data set is made or cell trained.
  EXPECT_NE(testing::RunCli("benchmark --preset tiny --envs pendulum,cartpole --controls none "
                            "--models lag-cavae --epochs 1 --out runs/nocart",
                            &out, dir.path()),
            0);
  EXPECT_NE(out.find("has no cartpole-none-lag-cavae.toml"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir / "data/cartpole-none-16px-6x8-seed0.h5"));
  EXPECT_FALSE(fs::exists(dir / "runs/nocart"));
  // A baseline without its own preset gets the setting's, which it refuses up front.
  EXPECT_NE(testing::RunCli("benchmark --preset tiny --envs pendulum --controls none "
                            "--models lag-vae --out runs/refused",
                            &out, dir.path()),
            0);
  EXPECT_NE(out.find("has no pendulum-none-lag-vae.toml"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir / "runs/refused/pendulum-none-lag-vae-seed0"));
  const fs::path root = dir / "runs/benchmark-tiny";
  const TrainConfig own = TrainConfig::FromToml(root / "pendulum-none-lag-cavae-seed0/config.toml");
  EXPECT_EQ(own.model, "lag-cavae");
  EXPECT_EQ(own.batch_sequences, 2);
  EXPECT_DOUBLE_EQ(own.lr, 2e-3);
  EXPECT_FALSE(own.augment);
  EXPECT_EQ(own.epochs, 1);  // --epochs still overrides
  const TrainConfig base = TrainConfig::FromToml(root / "pendulum-none-keycld-seed0/config.toml");
  EXPECT_EQ(base.batch_sequences, 1);
  EXPECT_TRUE(base.augment);
  EXPECT_FALSE(fs::exists(root / "cartpole-none-lag-cavae-seed0"));
  const std::string csv = ReadText(root / "results.csv");
  EXPECT_NE(csv.find("pendulum,none,lag-cavae,1,1,"), std::string::npos) << csv;
  EXPECT_EQ(csv.find("cartpole,none,lag-cavae"), std::string::npos) << csv;
}

// HGN has no action input: its cells on actuated settings are skipped with a note, and its
// unactuated cell trains with its own preset and is scored from its five-frame stacks.
TEST(Benchmark, HgnSkipsActuatedSettings) {
  testing::TempDir dir;
  fs::create_directories(dir / "configs/tiny");
  for (const char* control : {"none", "full"}) {
    std::ofstream(dir / "configs/tiny" / (std::string("pendulum-") + control + ".toml"))
        << "[data]\nenv = \"pendulum\"\ncontrol = \"" << control
        << "\"\nsize = 32\nruns = 6\nframes = 10\n[model]\nhidden = 8\n[train]\nepochs = 1\n"
        << "threads = 2\n[eval]\nval_runs = 1\nrtol = 1e-6\natol = 1e-6\n";
  }
  std::ofstream(dir / "configs/tiny/pendulum-none-hgn.toml")
      << "[data]\nenv = \"pendulum\"\ncontrol = \"none\"\nsize = 32\nruns = 6\nframes = 10\n"
      << "[model]\nmodel = \"hgn\"\nhidden = 8\n[train]\nepochs = 1\nthreads = 2\n"
      << "augment = false\n[eval]\nval_runs = 1\nrtol = 1e-6\natol = 1e-6\n";
  std::string out;
  ASSERT_EQ(testing::RunCli("benchmark --preset tiny --envs pendulum --controls none,full "
                            "--models hgn",
                            &out, dir.path()),
            0)
      << out;
  EXPECT_NE(out.find("skipped hgn on pendulum-full: it has no action input"), std::string::npos)
      << out;
  const fs::path root = dir / "runs/benchmark-tiny";
  EXPECT_FALSE(fs::exists(root / "pendulum-full-hgn-seed0"));
  const std::string csv = ReadText(root / "results.csv");
  EXPECT_NE(csv.find("pendulum,none,hgn,1,1,"), std::string::npos) << csv;
  EXPECT_EQ(csv.find("pendulum,full,hgn"), std::string::npos) << csv;
  EXPECT_NE(testing::RunCli("benchmark --preset tiny --envs pendulum --controls full "
                            "--models hgn --out runs/none",
                            &out, dir.path()),
            0);
  EXPECT_NE(out.find("nothing to run"), std::string::npos) << out;
}

}  // namespace
}  // namespace keycld
