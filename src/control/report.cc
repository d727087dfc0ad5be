#include "keycld/control/report.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "keycld/eval/plot.h"
#include "keycld/eval/video.h"
#include "keycld/util/atomic_file.h"
#include "keycld/util/error.h"

namespace keycld {

namespace {

std::string Name(const mjModel* m, mjtObj type, int id, const char* fallback) {
  const char* name = mj_id2name(m, type, id);
  return name && *name ? name : std::string(fallback) + std::to_string(id);
}

void Append(std::string& line, double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ",%.9g", v);
  line += buf;
}

}  // namespace

void WriteControlCsv(const std::filesystem::path& csv, const Environment& env,
                     const std::vector<ControlStep>& steps,
                     const std::optional<std::vector<double>>& target_qpos) {
  if (steps.empty()) throw InputError("no control steps to write to '" + csv.string() + "'");
  const mjModel* m = env.model();
  std::string out = "time";
  for (int j = 0; j < m->nq; ++j) out += ",qpos_" + Name(m, mjOBJ_JOINT, j, "joint");
  for (int j = 0; j < m->nv; ++j) out += ",qvel_" + Name(m, mjOBJ_JOINT, j, "joint");
  if (target_qpos) {
    for (int j = 0; j < m->nq; ++j) out += ",error_" + Name(m, mjOBJ_JOINT, j, "joint");
  }
  if (steps.front().coordinates) {  // the angle law: the model's q and q̇
    const size_t n = steps.front().keypoints.size();
    if (n == 1) {
      out += ",q_model,qdot_model";
    } else {
      for (size_t i = 1; i <= n; ++i) out += ",q" + std::to_string(i) + "_model";
      for (size_t i = 1; i <= n; ++i) out += ",qdot" + std::to_string(i) + "_model";
    }
  } else {
    const size_t k = steps.front().keypoints.size() / 2;
    for (size_t i = 1; i <= k; ++i) out += ",x" + std::to_string(i) + ",y" + std::to_string(i);
    for (size_t i = 1; i <= k; ++i) {
      out += ",xdot" + std::to_string(i) + ",ydot" + std::to_string(i);
    }
  }
  for (int a = 0; a < m->nu; ++a) out += ",u_" + Name(m, mjOBJ_ACTUATOR, a, "actuator");
  const bool reference = !steps.front().reference_unclipped.empty();
  for (const char* column : {",u_unclipped_", ",u_gravity_", ",input_accel_"}) {
    for (int a = 0; a < m->nu; ++a) out += column + Name(m, mjOBJ_ACTUATOR, a, "actuator");
  }
  if (reference) {
    for (const char* column :
         {",reference_u_unclipped_", ",reference_u_gravity_", ",reference_input_accel_"}) {
      for (int a = 0; a < m->nu; ++a) out += column + Name(m, mjOBJ_ACTUATOR, a, "actuator");
    }
  }
  out += ",potential,kinetic,energy\n";
  for (const ControlStep& s : steps) {
    if (s.reference_unclipped.empty() == reference) {
      throw InputError("every step or none must have a reference action ('" + csv.string() + "')");
    }
    const size_t nu = size_t(m->nu), nu_reference = reference ? nu : 0;
    using Field = std::pair<const std::vector<double>*, size_t>;
    for (const Field& f :
         {Field{&s.action, nu}, Field{&s.unclipped, nu}, Field{&s.gravity, nu},
          Field{&s.input_acceleration, nu}, Field{&s.reference_unclipped, nu_reference},
          Field{&s.reference_gravity, nu_reference},
          Field{&s.reference_input_acceleration, nu_reference}}) {
      if (f.first->size() != f.second) {
        throw InputError("a control step has " + std::to_string(f.first->size()) +
                         " value(s) for a per-actuator column, the system " + std::to_string(nu) +
                         " actuator(s) ('" + csv.string() + "')");
      }
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6f", s.time);
    std::string line = buf;
    for (double v : s.qpos) Append(line, v);
    for (double v : s.qvel) Append(line, v);
    if (target_qpos) {
      for (double v : JointErrors(env, s.qpos, *target_qpos)) Append(line, v);
    }
    for (double v : s.keypoints) Append(line, v);
    for (double v : s.velocity) Append(line, v);
    for (double v : s.action) Append(line, v);
    for (double v : s.unclipped) Append(line, v);
    for (double v : s.gravity) Append(line, v);
    for (double v : s.input_acceleration) Append(line, v);
    for (double v : s.reference_unclipped) Append(line, v);
    for (double v : s.reference_gravity) Append(line, v);
    for (double v : s.reference_input_acceleration) Append(line, v);
    Append(line, s.potential);
    Append(line, s.kinetic);
    Append(line, s.potential + s.kinetic);
    out += line + "\n";
  }
  WriteTextAtomically(csv, out);
}

int ControlVideoScale(int image_size) {
  if (image_size < 1) throw InputError("image size must be ≥ 1");
  return std::max(1, (160 + image_size - 1) / image_size);
}

void WriteControlVideo(const std::filesystem::path& gif, const std::vector<ControlFrame>& frames,
                       int image_size, const std::vector<ControlStep>& steps,
                       const std::vector<double>& target_keypoints, int delay_cs) {
  if (frames.empty()) throw InputError("no frames for the control video '" + gif.string() + "'");
  const int scale = ControlVideoScale(image_size);
  const double radius = std::max(2.0, 0.6 * scale);
  std::vector<Canvas> canvases;
  canvases.reserve(frames.size());
  for (const ControlFrame& f : frames) {
    if (f.step >= steps.size()) {
      throw InputError("control video: frame of step " + std::to_string(f.step) + " but only " +
                       std::to_string(steps.size()) + " steps");
    }
    Canvas c = Canvas::FromPixels(f.rgb, image_size, image_size).Upscaled(scale);
    // The angle law's coordinates are not image positions: nothing drawn.
    const std::vector<double> none;
    const auto& x = steps[f.step].coordinates ? none : steps[f.step].keypoints;
    const auto& target = steps[f.step].coordinates ? none : target_keypoints;
    for (size_t k = 0; 2 * k + 1 < target.size(); ++k) {
      c.DrawCross(target[2 * k], target[2 * k + 1], 1.6 * radius, 1.5,
                  {255, 255, 255});
    }
    for (size_t k = 0; 2 * k + 1 < x.size(); ++k) {
      c.FillDisc(x[2 * k], x[2 * k + 1], radius, KeypointColor(int(k)));
    }
    canvases.push_back(std::move(c));
  }
  WriteGifAnimation(gif, canvases, delay_cs);
}

void WriteErrorPlot(const std::filesystem::path& png, const Environment& env,
                    const std::vector<ControlStep>& steps, const std::vector<double>& target_qpos,
                    const std::vector<double>& tolerances, const std::string& title) {
  if (steps.empty()) throw InputError("no control steps to plot in '" + png.string() + "'");
  const mjModel* m = env.model();
  std::vector<PlotSeries> series(size_t(m->nq));
  for (int j = 0; j < m->nq; ++j) {
    series[j].label =
        Name(m, mjOBJ_JOINT, j, "joint") + (m->jnt_type[j] == mjJNT_SLIDE ? " (m)" : " (rad)");
  }
  const double t0 = steps.front().time;
  for (const ControlStep& s : steps) {
    const auto e = JointErrors(env, s.qpos, target_qpos);
    for (int j = 0; j < m->nq; ++j) {
      series[j].x.push_back(s.time - t0);
      series[j].y.push_back(e[j]);
    }
  }
  PlotOptions o;
  o.title = title;
  o.x_label = "time (s)";
  o.y_label = "true error q - q*";
  for (double t : std::set<double>(tolerances.begin(), tolerances.end())) {
    o.h_lines.push_back(t);
    o.h_lines.push_back(-t);
  }
  WriteLinePlot(png, series, o);
}

}  // namespace keycld
