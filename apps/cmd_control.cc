// keycld control: energy-shaping control of the simulated system from its camera images with a
// trained model (docs/method.md §10).
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "commands.h"
#include "keycld/control/angle_control.h"
#include "keycld/control/closed_loop.h"
#include "keycld/control/diagnosis.h"
#include "keycld/control/known_model.h"
#include "keycld/control/report.h"
#include "keycld/control/true_pendulum.h"
#include "keycld/sim/gl_context.h"
#include "keycld/train/trained_run.h"
#include "keycld/util/atomic_file.h"
#include "keycld/util/error.h"
#include "keycld/util/image_io.h"
#include "keycld/util/interrupt.h"
#include "keycld/util/progress.h"
#include "keycld/util/tensor_values.h"

namespace keycld::cli {

namespace fs = std::filesystem;

namespace {

struct ControlArgs {
  std::string run, target_image, target_state, target_truth, init_state, out;
  std::string model_source = "learned", env, law = "auto", reference = "auto";
  int size = 32;
  std::string gain_scale = "mass", device = "cpu";
  double seconds = 10.0;
  std::optional<double> kp, kd, u_max;  // unset: the system's defaults (ControlDefaults)
  double angle_tolerance = 0.1, position_tolerance = 0.1, hold = 1.0, speed_tolerance = 1.0;
  int threads = 1;
  bool raw_pinv = false, no_video = false;
};

std::string JoinErrors(const Environment& env, const std::vector<double>& e) {
  std::string s;
  char buf[96];
  for (int j = 0; j < env.nq(); ++j) {
    const char* name = mj_id2name(env.model(), mjOBJ_JOINT, j);
    const bool slide = env.model()->jnt_type[j] == mjJNT_SLIDE;
    std::snprintf(buf, sizeof buf, "%s%s %.4f %s", j ? ", " : "", name ? name : "joint", e[j],
                  slide ? "m" : "rad");
    s += buf;
  }
  return s;
}

// The gains and the action limit of the keypoint law when the command line gives none
// (docs/control.md, "Defaults per system"): k_p 25, k_d 10 and no limit, except for the acrobot,
// whose learned and known models held 9 and 10 of 10 targets with k_p 100, k_d 20, |u| ≤ 20
// (4 and 10 of 10 with the defaults; a tilted arm needs more than |u| ≤ 5).
struct ControlDefaults {
  double kp = 25.0, kd = 10.0, u_max = 0.0;
};

ControlDefaults DefaultsFor(EnvName env, bool keypoint_law) {
  if (env == EnvName::kAcrobot && keypoint_law) return {100.0, 20.0, 20.0};
  return {};
}

// The option checks CLI11 cannot express, then the controller's options (unset gains and limit
// from `defaults`).
ControllerOptions CheckControlArgs(const ControlArgs& a, const ControlDefaults& defaults) {
  if (!a.target_truth.empty() && a.target_image.empty()) {
    throw InputError("--target-truth goes with --target-image (--target-state is the truth)");
  }
  ControllerOptions copt;
  copt.kp = a.kp.value_or(defaults.kp);
  copt.kd = a.kd.value_or(defaults.kd);
  copt.gain_scale = ParseGainScale(a.gain_scale);
  copt.u_max = a.u_max.value_or(defaults.u_max);
  copt.tangent_projection = !a.raw_pinv;
  copt.Validate();
  return copt;
}

// The control law: keypoint (KeyCLD §10, controller.h) or angle (Lag-caVAE's energy shaping in
// q, angle_control.h); "auto" picks the angle law for the lag-vae and lag-cavae models, whose
// states are generalised coordinates, and the keypoint law otherwise.
enum class Law { kKeypoint, kAngle };

Law ChooseLaw(const ControlArgs& a, const std::string& model_name) {
  const bool angle_model = model_name == "lag-vae" || model_name == "lag-cavae";
  if (a.law == "auto" && !angle_model) return Law::kKeypoint;
  if (a.law == "keypoint") {
    if (angle_model) {
      throw InputError("--law keypoint needs a Lagrangian in image keypoints; '" + model_name +
                       "' learns one in its generalised coordinates q (use --law angle, its own "
                       "law)");
    }
    return Law::kKeypoint;
  }
  if (a.law == "angle" && !model_name.empty() && !angle_model) {
    throw InputError(
        "--law angle (Lag-caVAE's energy shaping in q) needs a model in generalised "
        "coordinates: a lag-vae or lag-cavae run, or --model-source known; got '" + model_name +
        "'");
  }
  if (a.raw_pinv) {
    throw InputError(
        "--raw-pinv belongs to the keypoint law (the angle law's coordinates have no "
        "constraints to project on)");
  }
  return Law::kAngle;
}

// What the closed loop produced: every step, the video's frames and the wall time.
struct ControlRecord {
  std::vector<ControlStep> steps;
  std::vector<ControlFrame> frames;
  double wall_seconds = 0;
  int delay_cs = 0;  // GIF frame delay (1/100 s)
};

// Runs the loop for `seconds` of simulated time. The video plays at real time with 25 frames a
// second at most.
ControlRecord RunLoop(ClosedLoop& loop, const Environment& env, double seconds, bool video) {
  const int steps_total = std::max(1, int(std::lround(seconds / env.timestep())));
  const int stride = std::max(1, int(std::lround(0.04 / env.timestep())));
  ControlRecord rec;
  rec.delay_cs = std::max(2, int(std::lround(100.0 * stride * env.timestep())));
  rec.steps.reserve(size_t(steps_total));
  InterruptGuard guard;
  ProgressBar bar("control", steps_total, "steps");
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps_total; ++i) {
    if (InterruptRequested()) throw Interrupted("interrupted; no output written");
    rec.steps.push_back(loop.Step());
    if (video && i % stride == 0) rec.frames.push_back({loop.frame(), size_t(i)});
    bar.Update(i + 1);
  }
  bar.Finish();
  rec.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return rec;
}

// The verdict against the true target (errors.png, the summary's "verdict") and its line.
std::string JudgeAndPlot(const ControlArgs& a, const Environment& env, EnvName name,
                         const ControlRecord& rec, const std::vector<double>& truth,
                         const fs::path& out, nlohmann::json* j) {
  const auto tolerances = JointTolerances(env, a.angle_tolerance, a.position_tolerance);
  ControlVerdict v = JudgeControl(env, rec.steps, truth, a.angle_tolerance, a.position_tolerance,
                                  a.hold, a.speed_tolerance);
  WriteErrorPlot(out / "errors.png", env, rec.steps, truth, tolerances,
                 env.system_name() + ": true joint errors under energy shaping");
  (*j)["target_qpos"] = truth;
  (*j)["verdict"] = {{"success", v.success},
                     {"final_errors", v.final_errors},
                     {"max_errors_hold", v.max_hold_errors},
                     {"tolerances", v.tolerances},
                     {"hold_seconds", v.hold_seconds},
                     {"speed_tolerance", v.speed_tolerance},
                     {"max_speed_hold", v.max_hold_speed},
                     {"settle_time", std::isnan(v.settle_time) ? nlohmann::json(nullptr)
                                                               : nlohmann::json(v.settle_time)}};
  char settle[64], tol[96];
  if (std::isnan(v.settle_time)) {
    std::snprintf(settle, sizeof settle, "not settled at the end");
  } else {
    std::snprintf(settle, sizeof settle, "settled after %.2f s", v.settle_time);
  }
  if (name == EnvName::kCartpole) {
    std::snprintf(tol, sizeof tol, "tolerance %g rad, %g m", a.angle_tolerance,
                  a.position_tolerance);
  } else {
    std::snprintf(tol, sizeof tol, "tolerance %g rad", a.angle_tolerance);
  }
  char hold[32], speed[96];
  std::snprintf(hold, sizeof hold, "%g", a.hold);
  std::snprintf(speed, sizeof speed, ", largest joint speed %.3g (tolerance %g)", v.max_hold_speed,
                v.speed_tolerance);
  return std::string(v.success ? "success" : "failure") + ": final error " +
         JoinErrors(env, v.final_errors) + "; max over the last " + hold + " s " +
         JoinErrors(env, v.max_hold_errors) + speed + "; " + settle + " (" + tol + ")";
}

// summary.json without the verdict: the setting, the controller, the states and the rate.
nlohmann::json SummaryJson(const std::string& source, const Environment& env, int image_size,
                           const ControllerOptions& copt, const ControlArgs& a,
                           const std::vector<double>& init, const std::vector<double>& target_x,
                           const ControlRecord& rec) {
  nlohmann::json j;
  j["model_source"] = source;
  j["run"] = a.run;
  j["env"] = env.system_name();
  j["image_size"] = image_size;
  j["dt"] = env.timestep();
  j["seconds"] = rec.steps.back().time + env.timestep() - rec.steps.front().time;
  j["steps"] = rec.steps.size();
  j["controller"] = {{"kp", copt.kp},
                     {"kd", copt.kd},
                     {"gain_scale", GainScaleName(copt.gain_scale)},
                     {"tangent_projection", copt.tangent_projection},
                     {"u_max", copt.u_max}};
  j["initial_qpos"] = init;
  j["target_keypoints"] = target_x;
  j["target_source"] = a.target_image.empty() ? "state" : a.target_image;
  j["final_qpos"] = env.qpos();
  j["steps_per_second"] = double(rec.steps.size()) / rec.wall_seconds;
  double max_u = 0;
  for (const auto& s : rec.steps)
    for (double u : s.action) max_u = std::max(max_u, std::abs(u));
  j["max_abs_action"] = max_u;
  return j;
}

// The controlled system and where its model comes from: a trained run (learned), or the exact
// model of --env in keypoint coordinates (known: TruePendulumModel, KnownModel).
struct ControlSetup {
  EnvName env = EnvName::kPendulum;
  SystemDescription system;  // what the closed loop simulates
  int image_size = 0;
  Model learned{nullptr};
  fs::path out;
  Law law = Law::kKeypoint;
};

ControlSetup OpenControlSetup(const ControlArgs& a) {
  ControlSetup setup;
  if (a.model_source == "known") {
    if (a.env.empty()) throw InputError("--model-source known needs --env");
    if (!a.run.empty()) throw InputError("--model-source known takes no RUN_DIR");
    if (!a.target_image.empty()) {
      throw InputError(
          "--target-image: the known models read the simulator's state, not "
          "images (their keypoints are an oracle); give the target as "
          "--target-state");
    }
    setup.env = ParseEnvName(a.env);
    setup.system = BuiltinSystem(setup.env);
    setup.image_size = a.size;
    setup.out = a.out.empty() ? fs::path("runs") / ("control-known-" + a.env) : fs::path(a.out);
    setup.law = ChooseLaw(a, "");
    return setup;
  }
  if (a.run.empty()) throw InputError("RUN_DIR is required (or --model-source known --env E)");
  if (!a.env.empty()) throw InputError("--env goes with --model-source known");
  TrainedRunOptions to;
  to.run = a.run;
  to.open_data = false;
  to.device = a.device;
  to.threads = a.threads;
  TrainedRun trained = OpenTrainedRun(to);
  const ModelSpec& spec = trained.model->spec();
  // A custom system's simulator is described in the data set it was trained on.
  setup.system = spec.env == EnvName::kCustom
                     ? DatasetSystem(Dataset::Open(trained.data_file).info())
                     : BuiltinSystem(spec.env);
  Environment env(setup.system);
  CheckFullyActuated(spec, RunControlMode(trained.run_dir), env);
  setup.env = spec.env;
  setup.image_size = spec.image_size;
  setup.learned = trained.model;
  setup.law = ChooseLaw(a, spec.model);
  setup.out = a.out.empty() ? trained.run_dir / "control" : fs::path(a.out);
  return setup;
}

// Whether the known model's controller runs beside the learned one (--reference): "auto" runs it
// when it can (a learned model of a built-in system, the true target known), "known" insists.
bool UseReference(const ControlArgs& a, const ControlSetup& setup,
                  const std::optional<std::vector<double>>& truth) {
  if (a.reference == "none") return false;
  const bool insist = a.reference == "known";
  auto refuse = [&](const std::string& why) {
    if (insist) throw InputError("--reference known: " + why);
    return false;
  };
  if (!setup.learned) return refuse("the controlled model is the known one already");
  if (setup.env == EnvName::kCustom) return refuse("a custom system has no known model");
  if (!truth) {
    return refuse(
        "the known model needs the true target state (--target-state, or --target-truth with "
        "--target-image)");
  }
  return true;
}

// The model, the law and the target, behind one FrameController for the loop.
struct ControlParts {
  std::unique_ptr<ControlModel> keypoint_model;
  std::unique_ptr<EnergyShapingController> keypoint_law;
  std::unique_ptr<AngleControlModel> angle_model;
  std::unique_ptr<AngleEnergyShapingController> angle_law;
  std::unique_ptr<FrameController> frame_controller;
  ControlTarget target;
};

ControlParts MakeControlParts(const ControlSetup& setup, const ControlArgs& a,
                              const ControllerOptions& copt, Environment& env,
                              OffscreenRenderer& renderer,
                              const std::optional<std::vector<double>>& truth) {
  ControlParts p;
  if (setup.law == Law::kAngle) {
    if (setup.learned) {
      p.angle_model = std::make_unique<LearnedAngleControlModel>(setup.learned);
    } else {
      p.angle_model = std::make_unique<TrueCoordinateModel>(env, setup.image_size);
    }
    p.target = a.target_image.empty() ? TargetFromState(env, renderer, *p.angle_model, *truth)
                                      : TargetFromImage(*p.angle_model, a.target_image);
    p.angle_law = std::make_unique<AngleEnergyShapingController>(
        *p.angle_model, TensorValues(p.target.keypoints), copt);
    p.frame_controller = std::make_unique<AngleFrameController>(*p.angle_model, *p.angle_law);
    return p;
  }
  if (setup.learned) {
    p.keypoint_model = std::make_unique<LearnedControlModel>(setup.learned);
  } else if (setup.env == EnvName::kPendulum) {
    p.keypoint_model = std::make_unique<TruePendulumModel>(env, setup.image_size);
  } else {
    p.keypoint_model = std::make_unique<KnownModel>(env, setup.image_size);
  }
  p.target = a.target_image.empty() ? TargetFromState(env, renderer, *p.keypoint_model, *truth)
                                    : TargetFromImage(*p.keypoint_model, a.target_image);
  p.keypoint_law =
      std::make_unique<EnergyShapingController>(*p.keypoint_model, p.target.keypoints, copt);
  p.frame_controller =
      std::make_unique<KeypointFrameController>(*p.keypoint_model, *p.keypoint_law);
  return p;
}

// The gravity compensation u_g that holds the target (zero velocity, where the feedback is 0) by
// the parts' model and law [A].
std::vector<double> HoldingGravity(const ControlParts& p) {
  if (p.angle_law) {
    const std::vector<double> q = TensorValues(p.target.keypoints);
    return p.angle_law->Act(q, std::vector<double>(q.size(), 0.0)).gravity;
  }
  return p.keypoint_law->Act(p.target.keypoints, torch::zeros_like(p.target.keypoints)).gravity;
}

nlohmann::json TermJson(const TermComparison& t) {
  auto values = [](const std::vector<double>& v) {
    nlohmann::json out = nlohmann::json::array();
    for (double x : v)
      out.push_back(std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr));
    return out;
  };
  return {{"slope", values(t.slope)},
          {"r2", values(t.r2)},
          {"rms_model", values(t.rms_model)},
          {"rms_reference", values(t.rms_reference)},
          {"rms_difference", values(t.rms_difference)},
          {"median_ratio", values(t.median_ratio)}};
}

// summary.json's "reference": the learned law's terms against the known model's along the path
// (diagnosis.h) and at the target, and the line the command prints.
nlohmann::json ReferenceJson(const std::vector<ControlStep>& steps, const ControlParts& model,
                             const ControlParts& known, std::string* line) {
  const ReferenceComparison c = CompareWithReference(steps);
  const std::vector<double> hold_model = HoldingGravity(model), hold_known = HoldingGravity(known);
  nlohmann::json j = {{"model", "known"},
                      {"steps", c.steps},
                      {"along_path",
                       {{"action", TermJson(c.action)},
                        {"gravity", TermJson(c.gravity)},
                        {"feedback", TermJson(c.feedback)},
                        {"input_acceleration", TermJson(c.input_acceleration)}}},
                      {"holding_gravity", {{"model", hold_model}, {"reference", hold_known}}}};
  char buf[384];
  line->clear();
  for (size_t i = 0; i < hold_model.size(); ++i) {
    std::snprintf(buf, sizeof buf,
                  "%su%zu along the path, learned/known: gravity part median %.3g (slope %.3g, R² "
                  "%.3g), input acceleration median %.3g, feedback median %.3g; holding the "
                  "target takes %.3g (known model %.3g)",
                  i ? "; " : "", i + 1, c.gravity.median_ratio[i], c.gravity.slope[i],
                  c.gravity.r2[i], c.input_acceleration.median_ratio[i], c.feedback.median_ratio[i],
                  hold_model[i], hold_known[i]);
    *line += buf;
  }
  return j;
}

int RunControl(const ControlArgs& a, const GlobalOptions& global) {
  CheckControlArgs(a, {});  // bad options fail before the model loads
  const ControlSetup setup = OpenControlSetup(a);
  const ControllerOptions copt =
      CheckControlArgs(a, DefaultsFor(setup.env, setup.law == Law::kKeypoint));
  Environment env(setup.system);
  const int size = setup.image_size;
  const std::vector<double> init = a.init_state.empty()
                                       ? DefaultInitialState(setup.env)
                                       : ParseJointState(env, a.init_state, "--init-state");
  std::optional<std::vector<double>> truth;
  if (!a.target_state.empty()) truth = ParseJointState(env, a.target_state, "--target-state");
  if (!a.target_truth.empty()) truth = ParseJointState(env, a.target_truth, "--target-truth");
  const fs::path out = setup.out;

  auto gl = GlContext::Create(ParseGlBackend(global.gl));
  OffscreenRenderer renderer(env, *gl, size);
  ControlParts parts = MakeControlParts(setup, a, copt, env, renderer, truth);
  const ControlTarget& tgt = parts.target;
  // The known model's controller beside the learned one, on the same frames, not applied: the
  // diagnosis of docs/control.md. Its target is the true target state.
  std::optional<ControlParts> reference;
  if (UseReference(a, setup, truth)) {
    ControlSetup known = setup;
    known.learned = Model{nullptr};
    ControlArgs known_args = a;
    known_args.target_image.clear();
    reference = MakeControlParts(known, known_args, copt, env, renderer, truth);
  }
  env.Reset(init, std::vector<double>(size_t(env.nv()), 0.0));
  ClosedLoop loop(env, renderer, *parts.frame_controller);
  if (reference) loop.SetReference(reference->frame_controller.get());
  const ControlRecord rec = RunLoop(loop, env, a.seconds, !a.no_video);

  fs::create_directories(out);
  WriteControlCsv(out / "control.csv", env, rec.steps, truth);
  WritePng(out / "target.png", tgt.image, size, size);
  const std::vector<double> target_x(tgt.keypoints.data_ptr<double>(),
                                     tgt.keypoints.data_ptr<double>() + tgt.keypoints.numel());
  if (!a.no_video) {
    WriteControlVideo(out / "control.gif", rec.frames, size, rec.steps, target_x, rec.delay_cs);
  }
  nlohmann::json j = SummaryJson(a.model_source, env, size, copt, a, init, target_x, rec);
  j["controller"]["law"] = setup.law == Law::kAngle ? "angle" : "keypoint";
  if (setup.law == Law::kAngle) {
    j.erase("target_keypoints");
    j["target_coordinates"] = target_x;  // the model's q* [n]
    if (target_x.size() == 1) j["target_angle"] = target_x.at(0);  // rad
    j["controller"].erase("tangent_projection");
  }
  std::string verdict_line;
  if (truth) {
    verdict_line = JudgeAndPlot(a, env, setup.env, rec, *truth, out, &j);
  } else {
    j["verdict"] = nullptr;
    verdict_line =
        "no verdict: the true target state is unknown (pass --target-truth with "
        "--target-image); final state " +
        JoinErrors(env, env.qpos());
  }
  j["verdict_line"] = verdict_line;
  std::string diagnosis_line;
  if (reference) {
    j["reference"] = ReferenceJson(rec.steps, parts, *reference, &diagnosis_line);
  } else {
    j["reference"] = nullptr;
  }
  WriteTextAtomically(out / "summary.json", j.dump(2) + "\n");
  std::printf(
      "%s: %zu steps of %.3f s in %.1f s wall (%.0f steps/s: render + estimate + control + "
      "physics)\n",
      env.system_name().c_str(), rec.steps.size(), env.timestep(), rec.wall_seconds,
      double(rec.steps.size()) / rec.wall_seconds);
  std::printf("verdict: %s\n", verdict_line.c_str());
  if (reference) std::printf("against the known model: %s\n", diagnosis_line.c_str());
  std::printf("wrote %s (control.csv, %ssummary.json, target.png%s)\n", out.c_str(),
              truth ? "errors.png, " : "", a.no_video ? "" : ", control.gif");
  return 0;
}

}  // namespace

Runner AddControlCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global) {
  auto a = std::make_shared<ControlArgs>();
  auto* cmd =
      app.add_subcommand("control",
                         "Drive the simulated system to a target image with the trained model's "
                         "energy-shaping controller (KeyCLD §10); the controller sees only images");
  cmd->add_option("RUN_DIR", a->run,
                  "Training run folder (or a checkpoint in its checkpoints/); not with "
                  "--model-source known");
  cmd->add_option("--model-source", a->model_source,
                  "learned: the trained model of RUN_DIR, from pixels | known: the exact model of "
                  "--env in keypoint coordinates, keypoints from the simulator (a reference)")
      ->check(CLI::IsMember({"learned", "known"}))
      ->capture_default_str();
  cmd->add_option("--law", a->law,
                  "auto: the model's own | keypoint: KeyCLD's energy shaping in keypoints | "
                  "angle: Lag-caVAE's energy shaping in its angle q (lag-vae, lag-cavae, or the "
                  "known pendulum)")
      ->check(CLI::IsMember({"auto", "keypoint", "angle"}))
      ->capture_default_str();
  cmd->add_option("--reference", a->reference,
                  "auto | known | none: run the known model's controller beside a learned one on "
                  "the same frames (not applied) and compare their gravity, feedback and input "
                  "acceleration terms "
                  "(summary.json \"reference\"); auto: when the system is built in and the true "
                  "target is known")
      ->check(CLI::IsMember({"auto", "known", "none"}))
      ->capture_default_str();
  cmd->add_option("--env", a->env, "With --model-source known: pendulum | cartpole | acrobot")
      ->check(CLI::IsMember(Names<EnvName>()));
  cmd->add_option("--size", a->size, "With --model-source known: image size (pixels)")
      ->check(CLI::Range(8, 1024))
      ->capture_default_str();
  auto* target = cmd->add_option_group("target", "What to reach (exactly one)");
  target->add_option("--target-image", a->target_image,
                     "PNG of the model's image size (e.g. from keycld render --size S)");
  target->add_option("--target-state", a->target_state,
                     "Joint positions q1,q2 (rad, m; 0 = upright) rendered by the simulator");
  target->require_option(1);
  cmd->add_option("--target-truth", a->target_truth,
                  "With --target-image: the true joint positions it shows, for the verdict");
  cmd->add_option("--init-state", a->init_state,
                  "Initial joint positions (default: hanging down, 0.1 rad off)");
  cmd->add_option("--seconds", a->seconds, "Simulated time (s), in (0, 3600]")
      ->check(FiniteRange(0, 3600, /*lo_open=*/true))
      ->capture_default_str();
  cmd->add_option("--kp", a->kp,
                  "Stiffness gain k_p (1/s² per unit mass with --gain-scale mass; default 25, "
                  "the acrobot's keypoint law 100)");
  cmd->add_option("--kd", a->kd,
                  "Damping gain k_d (1/s per unit mass with --gain-scale mass; default 10, the "
                  "acrobot's keypoint law 20)");
  cmd->add_option("--gain-scale", a->gain_scale,
                  "mass: K = k·M (gains independent of the model's energy unit) | unit: K = k")
      ->check(CLI::IsMember(Names<GainScale>()))
      ->capture_default_str();
  cmd->add_option("--u-max", a->u_max,
                  "Actuator limit |u_i| ≤ U (0 = none; default none, the acrobot's keypoint "
                  "law 20)");
  cmd->add_flag("--raw-pinv", a->raw_pinv,
                "u = B⁺ f as written, without projecting B and f on the constraints' tangent "
                "space");
  const auto positive = FiniteRange(0, std::numeric_limits<double>::infinity(), true);
  cmd->add_option("--angle-tolerance", a->angle_tolerance, "Verdict tolerance of angles (rad)")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--position-tolerance", a->position_tolerance,
                  "Verdict tolerance of the cart position (m)")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--speed-tolerance", a->speed_tolerance,
                  "Verdict bound on every joint speed during the hold (rad/s, m/s)")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--hold", a->hold, "The target must be held during the last S seconds")
      ->check(FiniteRange(0, 3600))
      ->capture_default_str();
  cmd->add_option("--out", a->out,
                  "Output folder (default RUN_DIR/control, or runs/control-known-ENV)");
  cmd->add_option("--threads", a->threads,
                  "LibTorch threads (0 = all cores; 1 is fastest for these small networks and "
                  "leaves a core to the renderer)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cmd->add_option("--device", a->device, "cpu | cuda | cuda:N")->capture_default_str();
  cmd->add_flag("--no-video", a->no_video, "Skip the GIF");

  return [a, global] { return RunControl(*a, *global); };
}

}  // namespace keycld::cli
