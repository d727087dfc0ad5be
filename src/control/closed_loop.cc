#include "keycld/control/closed_loop.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "keycld/util/error.h"
#include "keycld/util/image_io.h"
#include "keycld/util/tensor_values.h"

namespace keycld {

namespace {

void CheckImageSize(int renderer_size, int model_size) {
  if (renderer_size != model_size) {
    throw InputError("the renderer draws " + std::to_string(renderer_size) +
                     " px frames but the model reads " + std::to_string(model_size) + " px");
  }
}

// Renders `env` at `qpos` (velocities 0) into the target's image; estimating is the caller's.
ControlTarget RenderTarget(Environment& env, OffscreenRenderer& renderer, int model_size,
                           const std::vector<double>& qpos) {
  CheckImageSize(renderer.size(), model_size);
  const std::vector<double> zero(size_t(env.nv()), 0.0);
  env.Reset(qpos, zero);
  ControlTarget target;
  target.image.resize(size_t(renderer.size()) * renderer.size() * 3);
  renderer.Render(env, target.image);
  target.qpos = qpos;
  return target;
}

// Reads an RGB PNG of `size` pixels into the target's image.
ControlTarget ReadTargetImage(int size, const std::filesystem::path& png) {
  PngImage image = ReadPng(png);
  if (image.channels != 3) {
    throw FormatError("target image '" + png.string() + "' has " + std::to_string(image.channels) +
                      " channel(s); expected RGB (3), as " + "`keycld render` writes");
  }
  if (image.width != size || image.height != size) {
    throw InputError("target image '" + png.string() + "' is " + std::to_string(image.width) + "x" +
                     std::to_string(image.height) + " px; the model reads " + std::to_string(size) +
                     "x" + std::to_string(size) + " px images");
  }
  ControlTarget target;
  target.image = std::move(image.pixels);
  return target;
}

torch::Tensor CoordinatesTensor(const std::vector<double>& q) {
  return torch::tensor(q, torch::kFloat64).reshape({1, int64_t(q.size())});
}

}  // namespace

KeypointFrameController::KeypointFrameController(ControlModel& model,
                                                 EnergyShapingController& controller)
    : model_(model), controller_(controller) {
  mass_ = model.MassDiagonal().to(torch::kCPU, torch::kFloat64).reshape({1, -1});
}

void KeypointFrameController::Act(std::span<const uint8_t> frame, double dt, ControlStep& step) {
  const torch::Tensor x = model_.EstimateKeypoints(frame);  // [1, 2K]
  torch::Tensor xdot = torch::zeros_like(x);
  if (previous_.defined()) xdot = model_.ProjectTangent(x, (x - previous_) / dt);
  previous_ = x;
  ControlAction act = controller_.Act(x, xdot);
  step.keypoints = TensorValues(x);
  step.velocity = TensorValues(xdot);
  step.action = std::move(act.u);
  step.unclipped = std::move(act.unclipped);
  step.gravity = std::move(act.gravity);
  step.input_acceleration = std::move(act.input_acceleration);
  step.potential = model_.Potential(x).item<double>();
  step.kinetic = 0.5 * (mass_ * xdot * xdot).sum().item<double>();
}

AngleFrameController::AngleFrameController(AngleControlModel& model,
                                           AngleEnergyShapingController& controller)
    : model_(model), controller_(controller) {}

void AngleFrameController::Act(std::span<const uint8_t> frame, double dt, ControlStep& step) {
  const std::vector<double> q = model_.EstimateCoordinates(frame);
  // An angle's shortest way round from the previous estimate: |q̇| < π/Δt.
  std::vector<double> qdot(q.size(), 0.0);
  if (previous_) {
    qdot = CoordinateErrors(model_.kinds(), q, *previous_);
    for (double& v : qdot) v /= dt;
  }
  previous_ = q;
  ControlAction act = controller_.Act(q, qdot);
  step.keypoints = q;
  step.velocity = qdot;
  step.coordinates = true;
  step.action = std::move(act.u);
  step.unclipped = std::move(act.unclipped);
  step.gravity = std::move(act.gravity);
  step.input_acceleration = std::move(act.input_acceleration);
  step.potential = model_.PotentialAt(q);
  const std::vector<double> M = model_.MassAt(q);
  const size_t n = q.size();
  step.kinetic = 0;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) step.kinetic += 0.5 * qdot[i] * M[i * n + j] * qdot[j];
  }
}

ClosedLoop::ClosedLoop(Environment& env, OffscreenRenderer& renderer, FrameController& controller)
    : env_(env), renderer_(renderer), controller_(controller) {
  CheckSizes();
}

ClosedLoop::ClosedLoop(Environment& env, OffscreenRenderer& renderer, ControlModel& model,
                       EnergyShapingController& controller)
    : owned_(std::make_unique<KeypointFrameController>(model, controller)),
      env_(env),
      renderer_(renderer),
      controller_(*owned_) {
  CheckSizes();
}

void ClosedLoop::CheckSizes() {
  CheckImageSize(renderer_.size(), controller_.image_size());
  if (controller_.action_dim() != env_.nu()) {
    throw InputError("the model has " + std::to_string(controller_.action_dim()) + " action(s), " +
                     env_.system_name() + " has " + std::to_string(env_.nu()) + " actuator(s)");
  }
  frame_.resize(size_t(renderer_.size()) * renderer_.size() * 3);
}

void ClosedLoop::ResetVelocityEstimate() {
  controller_.ResetVelocityEstimate();
  if (reference_) reference_->ResetVelocityEstimate();
}

void ClosedLoop::SetReference(FrameController* reference) {
  if (reference) {
    CheckImageSize(renderer_.size(), reference->image_size());
    if (reference->action_dim() != controller_.action_dim()) {
      throw InputError("the reference controller has " + std::to_string(reference->action_dim()) +
                       " action(s), the controller " + std::to_string(controller_.action_dim()));
    }
  }
  reference_ = reference;
}

ControlStep ClosedLoop::Step() {
  ControlStep step;
  step.time = env_.time();
  step.qpos = env_.qpos();
  step.qvel = env_.qvel();
  renderer_.Render(env_, frame_);
  controller_.Act(frame_, env_.timestep(), step);
  if (reference_) {
    ControlStep reference;
    reference_->Act(frame_, env_.timestep(), reference);
    step.reference_unclipped = std::move(reference.unclipped);
    step.reference_gravity = std::move(reference.gravity);
    step.reference_input_acceleration = std::move(reference.input_acceleration);
  }
  env_.SetAction(step.action);
  env_.Step();
  return step;
}

ControlTarget TargetFromState(Environment& env, OffscreenRenderer& renderer, ControlModel& model,
                              const std::vector<double>& qpos) {
  ControlTarget target = RenderTarget(env, renderer, model.image_size(), qpos);
  target.keypoints = model.EstimateKeypoints(target.image);
  return target;
}

ControlTarget TargetFromImage(ControlModel& model, const std::filesystem::path& png) {
  ControlTarget target = ReadTargetImage(model.image_size(), png);
  target.keypoints = model.EstimateKeypoints(target.image);
  return target;
}

ControlTarget TargetFromState(Environment& env, OffscreenRenderer& renderer,
                              AngleControlModel& model, const std::vector<double>& qpos) {
  ControlTarget target = RenderTarget(env, renderer, model.image_size(), qpos);
  target.keypoints = CoordinatesTensor(model.EstimateCoordinates(target.image));
  return target;
}

ControlTarget TargetFromImage(AngleControlModel& model, const std::filesystem::path& png) {
  ControlTarget target = ReadTargetImage(model.image_size(), png);
  target.keypoints = CoordinatesTensor(model.EstimateCoordinates(target.image));
  return target;
}

std::vector<double> JointErrors(const Environment& env, const std::vector<double>& qpos,
                                const std::vector<double>& target) {
  if (int(qpos.size()) != env.nq() || int(target.size()) != env.nq()) {
    throw InputError(env.system_name() + " has " + std::to_string(env.nq()) +
                     " joint position(s), got " + std::to_string(qpos.size()) + " and " +
                     std::to_string(target.size()));
  }
  std::vector<double> e(qpos.size());
  for (int j = 0; j < env.nq(); ++j) {
    e[j] = qpos[j] - target[j];
    if (env.model()->jnt_type[j] == mjJNT_HINGE) e[j] = WrapAngle(e[j]);
  }
  return e;
}

std::vector<double> JointTolerances(const Environment& env, double angle, double position) {
  std::vector<double> t(size_t(env.nq()));
  for (int j = 0; j < env.nq(); ++j) {
    t[j] = env.model()->jnt_type[j] == mjJNT_SLIDE ? position : angle;
  }
  return t;
}

ControlVerdict JudgeControl(const Environment& env, const std::vector<ControlStep>& steps,
                            const std::vector<double>& target_qpos, double angle_tolerance,
                            double position_tolerance, double hold_seconds,
                            double speed_tolerance) {
  if (steps.empty()) throw InputError("no control steps to judge");
  if (!(angle_tolerance > 0) || !(position_tolerance > 0) || !(speed_tolerance > 0)) {
    throw InputError("tolerances must be > 0");
  }
  if (!(hold_seconds >= 0)) throw InputError("the hold time must be ≥ 0");
  ControlVerdict v;
  v.hold_seconds = hold_seconds;
  v.speed_tolerance = speed_tolerance;
  v.tolerances = JointTolerances(env, angle_tolerance, position_tolerance);
  const size_t nq = v.tolerances.size();
  v.max_hold_errors.assign(nq, 0.0);
  const double t_end = steps.back().time;
  const double t0 = steps.front().time;
  bool inside_to_end = true;
  for (size_t i = steps.size(); i-- > 0;) {
    const auto e = JointErrors(env, steps[i].qpos, target_qpos);
    if (i + 1 == steps.size()) v.final_errors = e;
    bool inside = true;
    for (size_t j = 0; j < nq; ++j) inside = inside && std::abs(e[j]) <= v.tolerances[j];
    double speed = 0;
    for (double qd : steps[i].qvel) speed = std::max(speed, std::abs(qd));
    if (!(speed <= speed_tolerance)) inside = false;  // NaN counts as outside
    // Half a step of slack so that "the last second" holds exactly 1 s / Δt frames.
    if (steps[i].time >= t_end - hold_seconds - 1e-9) {
      for (size_t j = 0; j < nq; ++j) {
        v.max_hold_errors[j] = std::max(v.max_hold_errors[j], std::abs(e[j]));
      }
      v.max_hold_speed = std::max(v.max_hold_speed, speed);
    }
    if (inside_to_end && inside) {
      v.settle_time = steps[i].time - t0;
    } else {
      inside_to_end = false;
    }
  }
  v.success = t_end - t0 >= hold_seconds - 1e-9;
  for (size_t j = 0; j < nq; ++j) v.success = v.success && v.max_hold_errors[j] <= v.tolerances[j];
  v.success = v.success && v.max_hold_speed <= speed_tolerance;
  return v;
}

std::vector<double> DefaultInitialState(EnvName env) {
  switch (env) {
    case EnvName::kPendulum:
      return {M_PI - 0.1};
    case EnvName::kCartpole:
      return {0.0, M_PI - 0.1};
    case EnvName::kAcrobot:
      return {M_PI - 0.1, 0.0};
    case EnvName::kCustom:
      break;
  }
  throw InputError("a custom system has no default initial state: give --init-state");
}

std::vector<double> ParseJointState(const Environment& env, const std::string& text,
                                    const std::string& what) {
  std::vector<double> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    while (used < item.size() && std::isspace(static_cast<unsigned char>(item[used]))) ++used;
    if (item.empty() || used != item.size() || !std::isfinite(v)) {
      throw InputError(what + ": '" + item + "' is not a finite number (expected " +
                       std::to_string(env.nq()) + " comma-separated joint positions)");
    }
    values.push_back(v);
  }
  if (!text.empty() && text.back() == ',') {
    throw InputError(what + ": trailing comma in '" + text + "'");
  }
  if (int(values.size()) != env.nq()) {
    throw InputError(what + ": " + env.system_name() + " has " + std::to_string(env.nq()) +
                     " joint position(s) (" +
                     (env.name() == EnvName::kPendulum   ? "angle, rad"
                      : env.name() == EnvName::kCartpole ? "cart m, pole angle rad"
                                                         : "shoulder, elbow angles, rad") +
                     "), got " + std::to_string(values.size()) + " in '" + text + "'");
  }
  return values;
}

}  // namespace keycld
