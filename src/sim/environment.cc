#include "keycld/sim/environment.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "keycld/util/error.h"

namespace keycld {

namespace fs = std::filesystem;

std::string MujocoVersion() {
  int v = mj_version();
  return std::to_string(v / 100) + "." + std::to_string((v / 10) % 10) + "." +
         std::to_string(v % 10);
}

fs::path DefaultAssetsDir() {
  if (const char* env = std::getenv("KEYCLD_ASSETS"); env && *env) return fs::path(env);
  return fs::path(KEYCLD_SOURCE_ASSETS_DIR) / "envs";
}

namespace {
// MuJoCo's default error handler prints several lines and waits for Enter. Ours prints one
// line and exits; a generation worker first forwards the message to its parent.
void (*g_error_forward)(const char*) = nullptr;
void MujocoError(const char* msg) {
  if (g_error_forward) g_error_forward(msg);
  std::fprintf(stderr, "keycld: error: MuJoCo: %s\n", msg);
  std::fflush(stderr);
  std::_Exit(1);
}
void MujocoWarning(const char* msg) { std::fprintf(stderr, "keycld: warning: MuJoCo: %s\n", msg); }
}  // namespace

void InstallMujocoHandlers(void (*forward)(const char*)) {
  g_error_forward = forward;
  mju_user_error = MujocoError;
  mju_user_warning = MujocoWarning;
}

Rng::Rng(uint64_t seed, uint64_t stream, uint64_t index) {
  std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), uint32_t(stream), uint32_t(index),
                    uint32_t(index >> 32)};
  engine_.seed(seq);
}

double Rng::Uniform(double lo, double hi) {
  double u = double(engine_() >> 11) * 0x1.0p-53;
  return lo + (hi - lo) * u;
}

namespace {

// mj_loadXML uses a global virtual file system while compiling; serialize it.
std::mutex& LoadMutex() {
  static std::mutex m;
  return m;
}

// Φ_c of one term at keypoints p [K] (plain norms: the check is far above their ε).
double Residual(const ConstraintTerm& t, const std::vector<std::array<double, 2>>& p) {
  switch (t.kind) {
    case ConstraintTerm::Kind::kFixedCoordinate:
      return p[t.a / 2][t.a % 2] - t.value;
    case ConstraintTerm::Kind::kFixedDistanceToPoint:
      return std::hypot(p[t.a][0] - t.px, p[t.a][1] - t.py) - t.value;
    case ConstraintTerm::Kind::kFixedDistance:
      return std::hypot(p[t.a][0] - p[t.b][0], p[t.a][1] - p[t.b][1]) - t.value;
    case ConstraintTerm::Kind::kOnLine:
      return t.px * p[t.a][0] + t.py * p[t.a][1] - t.value;
  }
  return 0.0;
}

// The stream of initial states that measuring and checking constraints draw from (a constant
// far from the data sets' seeds and streams).
constexpr uint64_t kConstraintCheckSeed = 0x6b6579636c64ull;
constexpr int kConstraintCheckStates = 64;

}  // namespace

Environment::Environment(EnvName name, const fs::path& assets_dir)
    : name_(name), system_(BuiltinSystem(name, assets_dir)) {
  Load();
}

Environment::Environment(const SystemDescription& system)
    : name_(system.builtin.value_or(EnvName::kCustom)), system_(system) {
  Load();
}

void Environment::Load() {
  static std::once_flag handlers;
  std::call_once(handlers, [] {
    if (mju_user_error == nullptr) InstallMujocoHandlers();
  });
  const fs::path& file = system_.mjcf;
  if (file.empty()) {
    throw InputError("system '" + system_.name +
                     "' has no MJCF model (mjcf): simulating, rendering and measuring need one; "
                     "a recording of it can be imported (keycld import, docs/import.md)");
  }
  if (fs::exists(file) && !fs::is_regular_file(file)) {
    throw IoError("MJCF asset '" + file.string() + "' is not a regular file");
  }
  if (!fs::exists(file)) {
    throw IoError(
        "MJCF asset not found: '" + file.string() + "'" +
        (system_.builtin
             ? " (set KEYCLD_ASSETS to the folder holding " + file.filename().string() + ")"
             : std::string(" (named by the system description '") + system_.name + "')"));
  }
  char error[1000] = "";
  {
    std::lock_guard<std::mutex> lock(LoadMutex());
    model_ = mj_loadXML(file.c_str(), nullptr, error, sizeof error);
  }
  if (!model_) {
    std::string msg = error;
    for (char& c : msg)
      if (c == '\n') c = ' ';
    while (!msg.empty() && msg.back() == ' ') msg.pop_back();
    throw FormatError("MuJoCo cannot load '" + file.string() + "': " + msg);
  }
  auto fail = [&](auto error) {
    mj_deleteModel(model_);
    model_ = nullptr;
    throw error;
  };
  if (model_->nu < 1 || !(model_->opt.timestep > 0)) {
    fail(FormatError("'" + file.string() + "' must have at least one actuator and a positive " +
                     "time step"));
  }
  if (model_->nq != system_.nq() || model_->nv != system_.nv() || model_->nu != system_.nu()) {
    fail(InputError(
        "system '" + system_.name + "': its description gives " + std::to_string(system_.nq()) +
        " joint position range(s), " + std::to_string(system_.nv()) + " velocity range(s) and " +
        std::to_string(system_.nu()) + " action range(s), but '" + file.string() +
        "' has nq = " + std::to_string(model_->nq) + ", nv = " + std::to_string(model_->nv) +
        ", nu = " + std::to_string(model_->nu)));
  }
  for (const std::string& site : system_.keypoint_sites) {
    int id = mj_name2id(model_, mjOBJ_SITE, site.c_str());
    if (id < 0) {
      fail(FormatError("'" + file.string() + "' lacks the keypoint site '" + site + "'"));
    }
    keypoint_sites_.push_back(id);
  }
  camera_ = mj_name2id(model_, mjOBJ_CAMERA, system_.camera.c_str());
  if (camera_ < 0) {
    fail(FormatError("'" + file.string() + "' lacks the camera '" + system_.camera + "'"));
  }
  if (model_->cam_mode[camera_] != mjCAMLIGHT_FIXED || model_->cam_bodyid[camera_] != 0) {
    fail(FormatError("'" + file.string() + "': the camera '" + system_.camera +
                     "' must be fixed in the world (keypoint coordinates are image coordinates)"));
  }
  data_ = mj_makeData(model_);
  mj_forward(model_, data_);
  for (ConstraintSpec& c : system_.constraints) {
    if (c.point_site.empty()) continue;
    int id = mj_name2id(model_, mjOBJ_SITE, c.point_site.c_str());
    if (id < 0) {
      fail(FormatError("'" + file.string() + "' lacks the site '" + c.point_site +
                       "' that a constraint of '" + system_.name + "' names as its point"));
    }
    if (model_->site_bodyid[id] != 0) {
      fail(InputError("system '" + system_.name + "': the point site '" + c.point_site +
                      "' moves with a body; a constraint's point must be fixed in the world"));
    }
    const double* w = data_->site_xpos + 3 * id;
    // Kept in world coordinates: ResolveConstraints projects it at the data set's image size.
    c.point_world = {w[0], w[1], w[2]};
  }
}

Environment::Environment(const Environment& other)
    : name_(other.name_),
      system_(other.system_),
      keypoint_sites_(other.keypoint_sites_),
      camera_(other.camera_) {
  model_ = mj_copyModel(nullptr, other.model_);
  data_ = mj_copyData(nullptr, model_, other.data_);
}

Environment::~Environment() {
  if (data_) mj_deleteData(data_);
  if (model_) mj_deleteModel(model_);
}

void Environment::Reset(std::span<const double> qpos, std::span<const double> qvel) {
  if (int(qpos.size()) != nq() || int(qvel.size()) != nv()) {
    throw InputError(system_.name + " has " + std::to_string(nq()) + " joint position(s) and " +
                     std::to_string(nv()) + " velocity(ies), got " + std::to_string(qpos.size()) +
                     " and " + std::to_string(qvel.size()));
  }
  for (double v : qpos)
    if (!std::isfinite(v)) throw InputError("joint positions must be finite");
  for (double v : qvel)
    if (!std::isfinite(v)) throw InputError("joint velocities must be finite");
  mj_resetData(model_, data_);
  std::copy(qpos.begin(), qpos.end(), data_->qpos);
  std::copy(qvel.begin(), qvel.end(), data_->qvel);
  mj_forward(model_, data_);
}

void Environment::ResetRandom(Rng& rng) {
  std::vector<double> qpos(nq()), qvel(nv());
  for (int i = 0; i < nq(); ++i)
    qpos[i] = rng.Uniform(system_.qpos_init[i].lo, system_.qpos_init[i].hi);
  for (int i = 0; i < nv(); ++i)
    qvel[i] = rng.Uniform(system_.qvel_init[i].lo, system_.qvel_init[i].hi);
  Reset(qpos, qvel);
}

SystemDescription Environment::ResolveConstraints(int size) {
  SystemDescription out = system_;
  // Image points of the fixed sites, at this size.
  for (ConstraintSpec& c : out.constraints) {
    if (!c.point_site.empty()) {
      c.point = ProjectToImage(*c.point_world, size);
      c.point_site.clear();
      c.point_world.reset();
    }
  }
  std::vector<double> sums(out.constraints.size(), 0.0);
  std::vector<std::array<double, 2>> fixed(out.constraints.size(), {0.0, 0.0});
  for (int s = 0; s < kConstraintCheckStates; ++s) {
    Rng rng(kConstraintCheckSeed, 0, uint64_t(s));
    ResetRandom(rng);
    const auto p = KeypointImagePositions(size);
    for (size_t i = 0; i < out.constraints.size(); ++i) {
      const ConstraintSpec& c = out.constraints[i];
      const auto& pa = p[c.a];
      switch (c.type) {
        case ConstraintSpec::Type::kDistanceToPoint: {
          const auto q = c.point.value_or(std::array<double, 2>{0.0, 0.0});
          sums[i] += std::hypot(pa[0] - q[0], pa[1] - q[1]);
          break;
        }
        case ConstraintSpec::Type::kDistance:
          sums[i] += std::hypot(pa[0] - p[c.b][0], pa[1] - p[c.b][1]);
          break;
        case ConstraintSpec::Type::kOnLine:
          sums[i] += c.normal[0] * pa[0] + c.normal[1] * pa[1];
          break;
        case ConstraintSpec::Type::kFixedPoint:
          fixed[i][0] += pa[0];
          fixed[i][1] += pa[1];
          break;
      }
    }
  }
  for (size_t i = 0; i < out.constraints.size(); ++i) {
    ConstraintSpec& c = out.constraints[i];
    if (c.type == ConstraintSpec::Type::kFixedPoint) {
      if (!c.point) {
        c.point = std::array<double, 2>{fixed[i][0] / kConstraintCheckStates,
                                        fixed[i][1] / kConstraintCheckStates};
      }
    } else if (!c.length) {
      c.length = sums[i] / kConstraintCheckStates;
    }
  }
  mj_resetData(model_, data_);
  mj_forward(model_, data_);
  return out;
}

std::vector<double> Environment::CheckConstraints(const SystemDescription& resolved, int size,
                                                  double tolerance) {
  const std::vector<ConstraintTerm> terms = resolved.ConstraintTerms();
  // The measured quantity of each term (a distance, a coordinate, n·p): Φ_c + value.
  std::vector<double> lo(terms.size(), INFINITY), hi(terms.size(), -INFINITY);
  std::vector<std::vector<double>> lo_state(terms.size()), hi_state(terms.size());
  for (int s = 0; s < kConstraintCheckStates; ++s) {
    Rng rng(kConstraintCheckSeed, 0, uint64_t(s));
    ResetRandom(rng);
    const auto p = KeypointImagePositions(size);
    for (size_t i = 0; i < terms.size(); ++i) {
      const double q = Residual(terms[i], p) + terms[i].value;
      if (!(q >= lo[i])) lo[i] = q, lo_state[i] = qpos();
      if (!(q <= hi[i])) hi[i] = q, hi_state[i] = qpos();
    }
  }
  mj_resetData(model_, data_);
  mj_forward(model_, data_);
  auto text = [](const std::vector<double>& q) {
    std::string out;
    for (double v : q) out += (out.empty() ? "" : ", ") + std::to_string(v);
    return "(" + out + ")";
  };
  std::vector<double> spread(terms.size());
  for (size_t i = 0; i < terms.size(); ++i) {
    spread[i] = hi[i] - lo[i];
    if (!(spread[i] <= tolerance)) {
      throw InputError(
          "system '" + resolved.name + "': its constraint term " + std::to_string(i + 1) + " (" +
          DescribeConstraintTerm(terms[i]) + ") does not hold on the initial states: the " +
          "constrained quantity ranges from " + std::to_string(lo[i]) +
          " at qpos = " + text(lo_state[i]) + " to " + std::to_string(hi[i]) +
          " at qpos = " + text(hi_state[i]) + " (normalized image coordinates at " +
          std::to_string(size) + " px; it must stay within " + std::to_string(tolerance) +
          "); check the keypoint sites, the pivot point and that the mechanism moves in a "
          "plane facing the camera");
    }
  }
  return spread;
}

void Environment::SetAction(std::span<const double> u) {
  if (int(u.size()) != nu()) {
    throw InputError("Environment::SetAction: expected " + std::to_string(nu()) +
                     " actuator values, got " + std::to_string(u.size()));
  }
  std::copy(u.begin(), u.end(), data_->ctrl);
}

void Environment::Step() {
  mj_step(model_, data_);
  // mj_step leaves the derived quantities (body and site positions, camera, mass matrix) at
  // the state before the step; recompute them so that rendering, keypoints and energy all
  // describe the new state.
  mj_forward(model_, data_);
}

std::vector<double> Environment::qpos() const { return {data_->qpos, data_->qpos + nq()}; }
std::vector<double> Environment::qvel() const { return {data_->qvel, data_->qvel + nv()}; }
std::vector<double> Environment::action() const { return {data_->ctrl, data_->ctrl + nu()}; }

double Environment::TotalEnergy() {
  mj_fwdPosition(model_, data_);
  mj_energyPos(model_, data_);
  mj_energyVel(model_, data_);
  return data_->energy[0] + data_->energy[1];
}

std::vector<std::array<double, 3>> Environment::KeypointWorldPositions() const {
  std::vector<std::array<double, 3>> out;
  for (int id : keypoint_sites_) {
    const double* p = data_->site_xpos + 3 * id;
    out.push_back({p[0], p[1], p[2]});
  }
  return out;
}

std::array<double, 2> Environment::ProjectToImage(const std::array<double, 3>& world,
                                                  int size) const {
  // Fixed camera: world position cam_xpos, orientation cam_xmat (columns = camera x, y, z
  // axes in the world); it looks along −z. Perspective with vertical field of view fovy.
  const double* pos = data_->cam_xpos + 3 * camera_;
  const double* mat = data_->cam_xmat + 9 * camera_;
  double d[3] = {world[0] - pos[0], world[1] - pos[1], world[2] - pos[2]};
  double cx = mat[0] * d[0] + mat[3] * d[1] + mat[6] * d[2];
  double cy = mat[1] * d[0] + mat[4] * d[1] + mat[7] * d[2];
  double cz = mat[2] * d[0] + mat[5] * d[1] + mat[8] * d[2];
  double depth = -cz;
  double half = std::tan(model_->cam_fovy[camera_] * M_PI / 360.0);
  // NDC in [−1, 1] spans the image edges; the pixel-centre grid of §2 spans W−1 pixels.
  double scale = double(size) / double(size - 1);
  return {cx / (depth * half) * scale, cy / (depth * half) * scale};
}

std::vector<std::array<double, 2>> Environment::KeypointImagePositions(int size) const {
  std::vector<std::array<double, 2>> out;
  for (const auto& w : KeypointWorldPositions()) out.push_back(ProjectToImage(w, size));
  return out;
}

std::vector<std::vector<double>> StateGrid(EnvName env) { return StateGrid(BuiltinSystem(env)); }

std::vector<std::vector<double>> StateGrid(const SystemDescription& system) {
  std::vector<GridAxis> axes = system.grid;
  if (axes.empty()) {
    const int n = std::max(2, int(std::floor(std::pow(256.0, 1.0 / std::max(1, system.nq())))));
    for (const SampleRange& r : system.qpos_init) axes.push_back({r.lo, r.hi, n});
  }
  std::vector<std::vector<double>> grid = {{}};
  for (const GridAxis& a : axes) {
    std::vector<std::vector<double>> next;
    for (const auto& row : grid) {
      for (int i = 0; i < a.count; ++i) {
        auto r = row;
        r.push_back(a.lo + (a.hi - a.lo) * i / a.count);
        next.push_back(std::move(r));
      }
    }
    grid = std::move(next);
  }
  return grid;
}

std::vector<double> SampleAction(EnvName env, ControlMode mode, int nu, Rng& rng) {
  SystemDescription system = BuiltinSystem(env);
  if (nu != system.nu()) {
    throw InputError("SampleAction: the " + system.name + " has " + std::to_string(system.nu()) +
                     " actuator(s), not " + std::to_string(nu));
  }
  return SampleAction(system, mode, rng);
}

std::vector<double> SampleAction(const SystemDescription& system, ControlMode mode, Rng& rng) {
  const int nu = system.nu();
  std::vector<double> u(nu, 0.0);
  if (mode == ControlMode::kNone) return u;
  // Draw every number even when it is discarded, so each run consumes a fixed count.
  bool zero = rng.Uniform(0.0, 1.0) < system.zero_action_fraction;
  for (int i = 0; i < nu; ++i)
    u[i] = rng.Uniform(system.action_ranges[i].lo, system.action_ranges[i].hi);
  if (zero) std::fill(u.begin(), u.end(), 0.0);
  if (mode == ControlMode::kUnder) {
    for (int k : system.under_zero) u[k] = 0.0;
  }
  return u;
}

}  // namespace keycld
