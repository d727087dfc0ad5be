// keycld control: outputs, summary and refusals, on an untrained 16x16 model (speed only; the
// closed loop's correctness is tested with the true pendulum in control_closed_loop_test.cc).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "keycld/train/checkpoint.h"
#include "keycld/util/image_io.h"
#include "test_util.h"
#include "tiny_fixtures.h"

namespace keycld {
namespace {

namespace fs = std::filesystem;

// A run folder with an untrained model and a config.toml naming `control`.
fs::path MakeRun(const testing::TempDir& dir, const std::string& name, EnvName env,
                 const std::string& control, const std::string& kind = "keycld") {
  const ModelSpec spec = testing::TinyModelSpec(env, kind);
  torch::manual_seed(0);
  Model model = CreateModel(spec);
  const fs::path run = dir / name;
  SaveCheckpoint(run / "checkpoints" / "last.pt", model, nullptr, {});
  std::ofstream(run / "config.toml")
      << "[data]\nenv = \"" << EnvNameString(env) << "\"\ncontrol = \"" << control << "\"\n";
  return run;
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(ControlCli, WritesCsvVideoPlotAndSummary) {
  testing::TempDir dir;
  const fs::path run = MakeRun(dir, "cartpole", EnvName::kCartpole, "full");
  std::string out;
  ASSERT_EQ(testing::RunCli("control " + run.string() +
                                " --target-state 0.2,0 --seconds 0.3 --u-max 1.5 --threads 1",
                            &out),
            0)
      << out;
  EXPECT_NE(out.find("verdict: failure"), std::string::npos) << out;  // untrained: no success
  const fs::path o = run / "control";
  for (const char* f : {"control.csv", "control.gif", "errors.png", "summary.json", "target.png"}) {
    EXPECT_TRUE(fs::exists(o / f)) << f;
  }
  // 0.3 s at Δt = 0.01 s: 30 rows after the header.
  std::ifstream csv(o / "control.csv");
  std::string line;
  int rows = -1;
  while (std::getline(csv, line)) {
    if (rows++ == -1) {
      EXPECT_NE(line.find(",reference_input_accel_hinge,potential"), std::string::npos) << line;
    }
  }
  EXPECT_EQ(rows, 30);
  auto j = nlohmann::json::parse(Slurp(o / "summary.json"));
  EXPECT_EQ(j["env"], "cartpole");
  EXPECT_EQ(j["steps"], 30);
  EXPECT_EQ(j["target_qpos"], (std::vector<double>{0.2, 0.0}));
  EXPECT_EQ(j["initial_qpos"][1], M_PI - 0.1);
  EXPECT_FALSE(j["verdict"]["success"].get<bool>());
  EXPECT_LE(j["max_abs_action"].get<double>(), 1.5);
  EXPECT_EQ(j["controller"]["gain_scale"], "mass");
  // The known model's controller ran beside the learned one (--reference auto: built-in system,
  // true target known): its terms per actuator (slide, hinge) in the summary and the CSV.
  ASSERT_TRUE(j["reference"].is_object()) << j.dump();
  EXPECT_EQ(j["reference"]["model"], "known");
  EXPECT_EQ(j["reference"]["steps"], 30);
  for (const char* term : {"action", "gravity", "feedback", "input_acceleration"}) {
    EXPECT_EQ(j["reference"]["along_path"][term]["median_ratio"].size(), 2u) << term;
  }
  EXPECT_EQ(j["reference"]["holding_gravity"]["reference"].size(), 2u);
  EXPECT_NE(out.find("against the known model: u1 along the path"), std::string::npos) << out;
  PngImage target = ReadPng(o / "target.png");
  EXPECT_EQ(target.width, 16);
  PngImage plot = ReadPng(o / "errors.png");
  EXPECT_GT(plot.width, 100);
  // The GIF's header: GIF89a, width = 16 · ControlVideoScale(16) = 160.
  const std::string gif = Slurp(o / "control.gif");
  ASSERT_GT(gif.size(), 10u);
  EXPECT_EQ(gif.substr(0, 6), "GIF89a");
  EXPECT_EQ(uint8_t(gif[6]) | (uint8_t(gif[7]) << 8), 160);

  // The target from the saved image, with and without the truth.
  ASSERT_EQ(
      testing::RunCli("control " + run.string() + " --target-image " + (o / "target.png").string() +
                          " --seconds 0.05 --no-video " + "--out " + (dir / "img").string(),
                      &out),
      0)
      << out;
  EXPECT_NE(out.find("no verdict"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir / "img" / "control.gif"));
  EXPECT_FALSE(fs::exists(dir / "img" / "errors.png"));
  auto k = nlohmann::json::parse(Slurp(dir / "img" / "summary.json"));
  EXPECT_EQ(k["target_keypoints"], j["target_keypoints"]);  // same image, same estimate
  EXPECT_TRUE(k["verdict"].is_null());
  EXPECT_TRUE(k["reference"].is_null());  // no true target: no known model's controller
  // --reference known insists: refused without the true target, before anything is written.
  EXPECT_EQ(
      testing::RunCli("control " + run.string() + " --target-image " + (o / "target.png").string() +
                          " --reference known --out " + (dir / "ref").string(),
                      &out),
      1);
  EXPECT_NE(out.find("keycld: error: --reference known: the known model needs the true target"),
            std::string::npos)
      << out;
  EXPECT_FALSE(fs::exists(dir / "ref"));
}

// Gains and the action limit: unset, the system's defaults (the acrobot's keypoint law k_p 100,
// k_d 20, |u| ≤ 20; every other system 25, 10, none); given, the command line's.
TEST(ControlCli, GainsDefaultPerSystemAndTheCommandLineOverrides) {
  testing::TempDir dir;
  auto controller = [&](const std::string& args) {
    const fs::path out = dir / ("c" + std::to_string(std::hash<std::string>()(args)));
    std::string log;
    EXPECT_EQ(testing::RunCli("control --model-source known --size 16 --seconds 0.02 --no-video "
                              "--threads 1 --out " + out.string() + " " + args,
                              &log),
              0)
        << log;
    return nlohmann::json::parse(Slurp(out / "summary.json"))["controller"];
  };
  auto acrobot = controller("--env acrobot --target-state 0,0");
  EXPECT_EQ(acrobot["kp"], 100.0);
  EXPECT_EQ(acrobot["kd"], 20.0);
  EXPECT_EQ(acrobot["u_max"], 20.0);
  auto given = controller("--env acrobot --target-state 0,0 --kp 30 --u-max 0");
  EXPECT_EQ(given["kp"], 30.0);
  EXPECT_EQ(given["kd"], 20.0);
  EXPECT_EQ(given["u_max"], 0.0);
  auto cartpole = controller("--env cartpole --target-state 0,0");
  EXPECT_EQ(cartpole["kp"], 25.0);
  EXPECT_EQ(cartpole["kd"], 10.0);
  EXPECT_EQ(cartpole["u_max"], 0.0);
}

TEST(ControlCli, RefusesWhatItCannotControl) {
  testing::TempDir dir;
  const fs::path none = MakeRun(dir, "none", EnvName::kPendulum, "none");
  const fs::path full = MakeRun(dir, "full", EnvName::kPendulum, "full");
  std::string out;
  EXPECT_EQ(testing::RunCli("control " + none.string() + " --target-state 0", &out), 1);
  EXPECT_NE(out.find("keycld: error: the model was trained on control mode 'none'"),
            std::string::npos)
      << out;
  EXPECT_FALSE(fs::exists(none / "control"));
  // Usage errors (exit 2): no target, two targets.
  EXPECT_EQ(testing::RunCli("control " + full.string(), &out), 2) << out;
  EXPECT_EQ(
      testing::RunCli("control " + full.string() + " --target-state 0 --target-image x.png", &out),
      2)
      << out;
  // Bad values (exit 1, one line).
  // (ParseJointState and ControllerOptions::Validate are tested in-process; one of each here.)
  for (const std::string bad :
       {"--target-state 0,1", "--target-state 0 --kp 0", "--target-image missing.png"}) {
    EXPECT_EQ(testing::RunCli("control " + full.string() + " " + bad, &out), 1) << bad << out;
    EXPECT_EQ(out.rfind("keycld: error: ", 0), 0u) << bad << ": " << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << bad << ": " << out;
  }
  EXPECT_FALSE(fs::exists(full / "control"));
}

// lag-vae and lag-cavae get Lag-caVAE's law in their angle q (--law auto); the laws are refused
// where they do not apply; the known pendulum runs the angle law to success.
TEST(ControlCli, LagModelsUseTheirAngleLaw) {
  testing::TempDir dir;
  const fs::path lag = MakeRun(dir, "lag", EnvName::kPendulum, "full", "lag-cavae");
  const fs::path keycld = MakeRun(dir, "keycld", EnvName::kPendulum, "full");
  std::string out;
  ASSERT_EQ(testing::RunCli("control " + lag.string() + " --target-state 0.5 --seconds 0.2", &out),
            0)
      << out;
  EXPECT_NE(out.find("verdict: "), std::string::npos) << out;
  const fs::path o = lag / "control";
  auto j = nlohmann::json::parse(Slurp(o / "summary.json"));
  EXPECT_EQ(j["controller"]["law"], "angle");
  EXPECT_FALSE(j["controller"].contains("tangent_projection"));
  EXPECT_TRUE(j["target_angle"].is_number());
  EXPECT_LE(std::abs(j["target_angle"].get<double>()), M_PI);
  EXPECT_EQ(j["steps"], 10);
  std::ifstream csv(o / "control.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_NE(header.find(",q_model,qdot_model,u_"), std::string::npos) << header;
  EXPECT_TRUE(fs::exists(o / "control.gif"));

  for (const std::string& bad : {lag.string() + " --law keypoint", keycld.string() + " --law angle",
                                 lag.string() + " --raw-pinv",
                                 std::string("--model-source known --env cartpole --law angle"),
                                 std::string("--model-source known --env pendulum --reference "
                                             "known")}) {
    EXPECT_EQ(testing::RunCli("control " + bad + " --target-state 0 --seconds 0.1 --out " +
                                  (dir / "refused").string(),
                              &out),
              1)
        << bad << out;
    EXPECT_EQ(out.rfind("keycld: error: --", 0), 0u) << bad << ": " << out;
  }
  // The known models' keypoints are an oracle of the simulator's state: an image target would be
  // ignored, so it is refused.
  EXPECT_EQ(
      testing::RunCli("control --model-source known --env pendulum --target-image " +
                          (o / "target.png").string() + " --out " + (dir / "refused").string(),
                      &out),
      1)
      << out;
  EXPECT_NE(out.find("keycld: error: --target-image: the known models read the simulator's"),
            std::string::npos)
      << out;
  EXPECT_FALSE(fs::exists(dir / "refused"));

  ASSERT_EQ(testing::RunCli("control --model-source known --env pendulum --law angle "
                            "--target-state 0 --no-video --out " +
                                (dir / "known").string(),
                            &out),
            0)
      << out;
  EXPECT_NE(out.find("verdict: success"), std::string::npos) << out;
  j = nlohmann::json::parse(Slurp(dir / "known" / "summary.json"));
  EXPECT_EQ(j["controller"]["law"], "angle");
  EXPECT_NEAR(j["target_angle"].get<double>(), 0.0, 1e-12);
}

// A two-coordinate lag model (the cartpole's: translation and angle) runs its law from pixels;
// the CSV and the summary carry both coordinates.
TEST(ControlCli, TwoCoordinateLagModelsUseTheirLaw) {
  testing::TempDir dir;
  const fs::path lag = MakeRun(dir, "lag", EnvName::kCartpole, "full", "lag-vae");
  std::string out;
  ASSERT_EQ(testing::RunCli("control " + lag.string() +
                                " --target-state 0.2,0 --seconds 0.1 --reference known",
                            &out),
            0)
      << out;
  EXPECT_NE(out.find("against the known model: "), std::string::npos) << out;
  EXPECT_NE(out.find("verdict: "), std::string::npos) << out;
  auto j = nlohmann::json::parse(Slurp(lag / "control" / "summary.json"));
  EXPECT_EQ(j["controller"]["law"], "angle");
  ASSERT_EQ(j["target_coordinates"].size(), 2u);
  EXPECT_FALSE(j.contains("target_angle"));
  EXPECT_FALSE(j["reference"].is_null());  // MuJoCo's joint-space model beside the learned one
  std::ifstream csv(lag / "control" / "control.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_NE(header.find(",q1_model,q2_model,qdot1_model,qdot2_model,u_"), std::string::npos)
      << header;
}

}  // namespace
}  // namespace keycld
