// System description files (docs/systems.md): the built-in systems through their files against
// the protocol of docs/method.md §7 written out by hand, a custom copy of a built-in giving the
// same data bit for bit, measured constraints against the camera's geometry, a new system (the
// example double pendulum), and one clear error for each kind of bad description.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "keycld/data/generate.h"
#include "keycld/dynamics/constraints.h"
#include "keycld/models/model.h"
#include "keycld/util/error.h"
#include "test_util.h"
#include "tiny_fixtures.h"

namespace keycld {
namespace {

namespace fs = std::filesystem;

const EnvName kBuiltins[] = {EnvName::kPendulum, EnvName::kCartpole, EnvName::kAcrobot};

fs::path ExampleFile() {
  return fs::path(KEYCLD_SOURCE_ASSETS_DIR).parent_path() / "examples" / "double_pendulum" /
         "double_pendulum.toml";
}

std::string Write(const fs::path& file, const std::string& text) {
  std::ofstream(file) << text;
  return file.string();
}

// A description of the built-in pendulum's MJCF under another name, with `constraints` (TOML).
std::string PendulumLike(const std::string& name, const std::string& constraints) {
  return "name = \"" + name + "\"\nmjcf = \"" +
         (fs::path(KEYCLD_SOURCE_ASSETS_DIR) / "envs" / "pendulum.xml").string() +
         "\"\nkeypoints = [\"tip\"]\n" + constraints +
         "\n[initial_state]\nqpos = [[-3.141592653589793, 3.141592653589793]]\n"
         "qvel = [[-0.1, 0.1]]\n[actions]\nrange = [[-2.0, 2.0]]\n"
         "[state_grid]\nqpos = [[-3.141592653589793, 3.141592653589793, 16]]\n";
}

// 16 px built-in pendulum data in `dir`.
GenerateOptions PendulumData(const fs::path& dir, ControlMode control, int runs, int frames,
                             uint64_t seed) {
  GenerateOptions o;
  o.control = control;
  o.runs = runs;
  o.frames = frames;
  o.size = 16;
  o.seed = seed;
  o.out_dir = dir;
  o.progress = false;
  return o;
}

const char* kPendulumCircle =
    "[[constraints]]\ntype = \"distance_to_point\"\nkeypoint = 1\nlength = 0.5\n";

// The initial state and action of docs/method.md §7 as the code drew them before systems had
// description files (an independent statement of the protocol).
void ProtocolDraw(EnvName env, ControlMode mode, Rng& rng, std::vector<double>* qpos,
                  std::vector<double>* qvel, std::vector<double>* u) {
  switch (env) {
    case EnvName::kPendulum:
      *qpos = {rng.Uniform(-M_PI, M_PI)};
      *qvel = {rng.Uniform(-0.1, 0.1)};
      break;
    case EnvName::kCartpole: {
      const double x = rng.Uniform(-1.0, 1.0), a = rng.Uniform(-M_PI, M_PI);
      const double vx = rng.Uniform(-0.1, 0.1), va = rng.Uniform(-0.1, 0.1);
      *qpos = {x, a};
      *qvel = {vx, va};
      break;
    }
    default: {
      const double a = rng.Uniform(-M_PI, M_PI), b = rng.Uniform(-M_PI, M_PI);
      const double va = rng.Uniform(-0.1, 0.1), vb = rng.Uniform(-0.1, 0.1);
      *qpos = {a, b};
      *qvel = {va, vb};
    }
  }
  const int nu = env == EnvName::kPendulum ? 1 : 2;
  u->assign(nu, 0.0);
  if (mode == ControlMode::kNone) return;
  const bool zero = rng.Uniform(0.0, 1.0) < 0.2;
  for (int i = 0; i < nu; ++i) (*u)[i] = rng.Uniform(-2.0, 2.0);
  if (zero) std::fill(u->begin(), u->end(), 0.0);
  if (mode == ControlMode::kUnder) (*u)[1] = 0.0;
}

TEST(SystemFiles, BuiltinFilesGiveTheBuiltinConstraintTerms) {
  for (EnvName env : kBuiltins) {
    const SystemDescription d = BuiltinSystem(env);
    EXPECT_EQ(d.name, EnvNameString(env));
    ASSERT_TRUE(d.builtin.has_value());
    EXPECT_EQ(d.ConstraintTerms(), HolonomicConstraints::ForEnvironment(env).terms()) << d.name;
    EXPECT_EQ(d.num_keypoints(), KeypointCount(env)) << d.name;
  }
}

TEST(SystemFiles, BuiltinFilesDrawTheProtocolsStatesAndActions) {
  for (EnvName env : kBuiltins) {
    Environment e(env);
    for (ControlMode mode : {ControlMode::kNone, ControlMode::kUnder, ControlMode::kFull}) {
      if (env == EnvName::kPendulum && mode == ControlMode::kUnder) continue;
      for (uint64_t run = 0; run < 40; ++run) {
        Rng a(5, 1, run), b(5, 1, run);
        std::vector<double> q, v, u;
        ProtocolDraw(env, mode, a, &q, &v, &u);
        e.ResetRandom(b);
        ASSERT_EQ(e.qpos(), q) << EnvNameString(env) << " run " << run;
        ASSERT_EQ(e.qvel(), v);
        ASSERT_EQ(SampleAction(e.system(), mode, b), u);
      }
    }
  }
  EXPECT_THROW(BuiltinSystem(EnvName::kPendulum).CheckControlMode(ControlMode::kUnder), InputError);
}

TEST(SystemFiles, StateGridsMatchThePlotGrids) {
  const auto p = StateGrid(EnvName::kPendulum);
  ASSERT_EQ(p.size(), 16u);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(p[i][0], -M_PI + 2.0 * M_PI * i / 16);
  const auto c = StateGrid(EnvName::kCartpole);
  ASSERT_EQ(c.size(), 256u);
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(c[16 * i + j][0], -1.0 + 2.0 * i / 16);
      EXPECT_EQ(c[16 * i + j][1], -M_PI + 2.0 * M_PI * j / 16);
    }
  }
  // Without [state_grid]: ⌊256^(1/nq)⌋ values per joint over its initial range.
  SystemDescription d = BuiltinSystem(EnvName::kAcrobot);
  d.grid.clear();
  EXPECT_EQ(StateGrid(d).size(), 256u);
}

TEST(SystemFiles, BuiltinConstraintsHoldUpToTheirFixedLengths) {
  for (EnvName env : kBuiltins) {
    Environment e(env);
    for (int size : {32, 64}) {
      const auto spread = e.CheckConstraints(e.ResolveConstraints(size), size, 1e-9);
      for (double s : spread) EXPECT_LT(s, 1e-9) << EnvNameString(env) << " at " << size;
    }
  }
}

TEST(SystemFiles, DescriptionsRoundTripThroughTheirText) {
  const SystemDescription d = LoadSystem(ExampleFile());
  Environment e(d);
  const SystemDescription r = e.ResolveConstraints(32);
  const SystemDescription back = ParseSystem(SystemToToml(r), "text", "/");
  EXPECT_EQ(back.name, r.name);
  EXPECT_EQ(back.mjcf, r.mjcf);
  EXPECT_EQ(back.keypoint_sites, r.keypoint_sites);
  EXPECT_EQ(back.ConstraintTerms(), r.ConstraintTerms());
  ASSERT_EQ(back.nq(), r.nq());
  for (int i = 0; i < r.nq(); ++i) {
    EXPECT_EQ(back.qpos_init[i].lo, r.qpos_init[i].lo);
    EXPECT_EQ(back.qpos_init[i].hi, r.qpos_init[i].hi);
    EXPECT_EQ(back.grid[i].count, r.grid[i].count);
  }
  EXPECT_EQ(back.zero_action_fraction, r.zero_action_fraction);
}

// The pinhole projection of the example's camera (fovy 45°, 2.5 m from the plane of motion):
// a length L in that plane is L / (2.5 tan 22.5°) · S / (S − 1) normalized units.
TEST(SystemFiles, MeasuredConstraintsMatchTheCameraGeometry) {
  const SystemDescription d = LoadSystem(ExampleFile());
  EXPECT_FALSE(d.builtin.has_value());
  EXPECT_FALSE(d.Resolved());
  Environment e(d);
  EXPECT_EQ(e.name(), EnvName::kCustom);
  for (int size : {32, 64}) {
    const double unit = 1.0 / (2.5 * std::tan(M_PI / 8)) * size / (size - 1.0);
    const auto terms = e.ResolveConstraints(size).ConstraintTerms();
    ASSERT_EQ(terms.size(), 2u);
    EXPECT_EQ(terms[0].kind, ConstraintTerm::Kind::kFixedDistanceToPoint);
    EXPECT_NEAR(terms[0].px, 0.05 * unit, 1e-12);  // the pivot site at (0.05, 0.65) m
    EXPECT_NEAR(terms[0].py, 0.05 * unit, 1e-12);  // the camera at 0.6 m height
    EXPECT_NEAR(terms[0].value, 0.35 * unit, 1e-9);
    EXPECT_EQ(terms[1].kind, ConstraintTerm::Kind::kFixedDistance);
    EXPECT_NEAR(terms[1].value, 0.30 * unit, 1e-9);
  }
}

TEST(SystemFiles, ACustomCopyOfTheBuiltinPendulumGivesTheSameDataBitForBit) {
  testing::TempDir dir;
  GenerateOptions o = PendulumData(dir.path(), ControlMode::kFull, 4, 5, 7);
  const Dataset a = Dataset::Open(GenerateDataset(o).path);
  o.system = ParseSystem(PendulumLike("my_pendulum", kPendulumCircle), "my", dir.path());
  const Dataset b = Dataset::Open(GenerateDataset(o).path);
  EXPECT_EQ(b.path().filename(), "my_pendulum-full-16px-4x5-seed7.h5");
  EXPECT_EQ(a.info().env, EnvName::kPendulum);
  EXPECT_EQ(b.info().env, EnvName::kCustom);
  EXPECT_EQ(b.info().system, "my_pendulum");
  EXPECT_EQ(DatasetSystem(b.info()).ConstraintTerms(),
            HolonomicConstraints::ForEnvironment(EnvName::kPendulum).terms());
  for (int run = 0; run < 4; ++run) {
    EXPECT_EQ(a.ReadImages(run), b.ReadImages(run)) << run;
    EXPECT_EQ(a.ReadQpos(run), b.ReadQpos(run));
    EXPECT_EQ(a.ReadQvel(run), b.ReadQvel(run));
    EXPECT_EQ(a.ReadAction(run), b.ReadAction(run));
  }
  EXPECT_EQ(a.ReadGridImages(), b.ReadGridImages());
  EXPECT_EQ(a.info().vpt_epsilon, b.info().vpt_epsilon);
}

// A custom system's model takes its constraints from the data set: trained on the custom copy's
// data, the losses and the parameters equal the built-in's, step for step.
TEST(SystemFiles, TrainingOnACustomCopyGivesTheBuiltinLosses) {
  testing::TempDir dir;
  GenerateOptions o = PendulumData(dir.path(), ControlMode::kNone, 6, 10, 3);
  const fs::path builtin = GenerateDataset(o).path;
  o.system = ParseSystem(PendulumLike("my_pendulum", kPendulumCircle), "my", dir.path());
  const fs::path custom = GenerateDataset(o).path;
  std::vector<std::string> losses[2];
  const fs::path runs[2] = {dir / "run-builtin", dir / "run-custom"};
  for (int i = 0; i < 2; ++i) {
    TrainOptions t = testing::TinyTrainOptions(i == 0 ? builtin : custom, runs[i]);
    t.config.max_steps = 4;
    Train(t);
    std::ifstream in(runs[i] / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      if (line.find("\"type\":\"step\"") == std::string::npos) continue;
      // The loss terms of the line (its wall time differs).
      losses[i].push_back(line.substr(0, line.find("\"seconds\"")));
    }
  }
  ASSERT_EQ(losses[0].size(), 4u);
  EXPECT_EQ(losses[0], losses[1]);
  const auto a = testing::CheckpointParameters(runs[0] / "checkpoints" / "last.pt");
  const auto b = testing::CheckpointParameters(runs[1] / "checkpoints" / "last.pt");
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) EXPECT_TRUE(torch::equal(a[k], b[k])) << k;
  const ModelSpec spec = LoadModel(runs[1] / "checkpoints" / "last.pt", torch::kCPU)->spec();
  EXPECT_EQ(spec.env, EnvName::kCustom);
  EXPECT_EQ(spec.system, "my_pendulum");
  EXPECT_EQ(spec.constraints, HolonomicConstraints::ForEnvironment(EnvName::kPendulum).terms());
}

TEST(SystemFiles, BadDescriptionsGetOneClearError) {
  testing::TempDir dir;
  auto message = [&](const std::string& text) -> std::string {
    try {
      const SystemDescription d = LoadSystem(Write(dir / "s.toml", text));
      Environment e(d);
      e.CheckConstraints(e.ResolveConstraints(32), 32, kConstraintTolerance);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  auto expect = [&](const std::string& text, const std::string& part) {
    const std::string m = message(text);
    EXPECT_NE(m.find(part), std::string::npos) << "message: " << m;
  };
  // A constraint naming a keypoint that does not exist.
  expect(PendulumLike("a", "[[constraints]]\ntype = \"distance\"\nkeypoints = [1, 2]\n"),
         "keypoint 2 does not exist (the system has 1 keypoint(s)");
  // Unknown keys and types, wrong types.
  expect(PendulumLike("a", "[[constraints]]\ntype = \"circle\"\nkeypoint = 1\n"),
         "unknown constraint type 'circle'");
  expect(PendulumLike("a", "[[constraints]]\ntype = \"on_line\"\nkeypoint = 1\nlength = 1\n"),
         "constraints[0].length: not a key of a on_line constraint");
  expect(PendulumLike("a", kPendulumCircle) + "colour = 1\n", "colour: unknown key");
  expect("name = \"a\"\n", "keypoints: missing");  // mjcf may be left out (video only)
  expect("name = [\n", "s.toml:");
  // A built-in's name.
  expect(PendulumLike("pendulum", kPendulumCircle), "is a built-in system's");
  // Constraints that do not hold: the pivot off by 0.1 in x.
  expect(PendulumLike("a",
                      "[[constraints]]\ntype = \"distance_to_point\"\nkeypoint = 1\n"
                      "point = [0.1, 0.0]\nlength = 0.5\n"),
         "does not hold on the initial states");
  // A site that moves as a pivot.
  expect(PendulumLike("a",
                      "[[constraints]]\ntype = \"distance_to_point\"\nkeypoint = 1\n"
                      "point_site = \"tip\"\n"),
         "moves with a body");
  // A missing site, an MJCF that does not exist, one that MuJoCo rejects.
  {
    std::string t = PendulumLike("a", kPendulumCircle);
    t.replace(t.find("[\"tip\"]"), 7, "[\"bob\"]");
    expect(t, "lacks the keypoint site 'bob'");
  }
  {
    std::string t = PendulumLike("a", kPendulumCircle);
    const std::string xml = (fs::path(KEYCLD_SOURCE_ASSETS_DIR) / "envs" / "pendulum.xml").string();
    std::string missing = t;
    missing.replace(missing.find(xml), xml.size(), (dir / "none.xml").string());
    expect(missing, "MJCF asset not found");
    Write(dir / "bad.xml", "<mujoco><worldbody><body></mujoco>");
    t.replace(t.find(xml), xml.size(), (dir / "bad.xml").string());
    expect(t, "MuJoCo cannot load");
  }
  // Joint ranges that do not fit the model.
  {
    std::string t = PendulumLike("a", kPendulumCircle);
    t.replace(t.find("qvel = [[-0.1, 0.1]]"), 20, "qvel = [[-0.1, 0.1], [0, 1]]");
    expect(t, "nq = 1, nv = 1, nu = 1");
  }
  EXPECT_THROW(LoadSystem(dir / "absent.toml"), IoError);
}

}  // namespace
}  // namespace keycld
