#include "keycld/control/report.h"

#include <cstdio>
#include <string>

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
  const size_t k = steps.front().keypoints.size() / 2;
  for (size_t i = 1; i <= k; ++i) out += ",x" + std::to_string(i) + ",y" + std::to_string(i);
  for (size_t i = 1; i <= k; ++i) {
    out += ",xdot" + std::to_string(i) + ",ydot" + std::to_string(i);
  }
  for (int a = 0; a < m->nu; ++a) out += ",u_" + Name(m, mjOBJ_ACTUATOR, a, "actuator");
  for (int a = 0; a < m->nu; ++a) {
    out += ",u_unclipped_" + Name(m, mjOBJ_ACTUATOR, a, "actuator");
  }
  out += ",potential,kinetic,energy\n";
  for (const ControlStep& s : steps) {
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
    Append(line, s.potential);
    Append(line, s.kinetic);
    Append(line, s.potential + s.kinetic);
    out += line + "\n";
  }
  AtomicFile file(csv);
  FILE* f = std::fopen(file.temp_path().c_str(), "wb");
  if (!f) throw IoError("cannot write '" + csv.string() + "'");
  const bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  if (std::fclose(f) != 0 || !ok) throw IoError("cannot write '" + csv.string() + "'");
  file.Commit();
}

}  // namespace keycld
