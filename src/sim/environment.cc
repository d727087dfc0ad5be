#include "keycld/sim/environment.h"

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
void MujocoWarning(const char* msg) {
  std::fprintf(stderr, "keycld: warning: MuJoCo: %s\n", msg);
}
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

const char* KeypointSiteNames(EnvName env, int k) {
  static const char* pendulum[] = {"tip"};
  static const char* two[][2] = {{"cart", "tip"}, {"elbow", "tip"}};
  switch (env) {
    case EnvName::kPendulum:
      return k < 1 ? pendulum[k] : nullptr;
    case EnvName::kCartpole:
      return k < 2 ? two[0][k] : nullptr;
    case EnvName::kAcrobot:
      return k < 2 ? two[1][k] : nullptr;
  }
  return nullptr;
}

}  // namespace

Environment::Environment(EnvName name, const fs::path& assets_dir) : name_(name) {
  static std::once_flag handlers;
  std::call_once(handlers, [] {
    if (mju_user_error == nullptr) InstallMujocoHandlers();
  });
  fs::path file = assets_dir / (EnvNameString(name) + ".xml");
  if (fs::exists(file) && !fs::is_regular_file(file)) {
    throw IoError("MJCF asset '" + file.string() + "' is not a regular file");
  }
  if (!fs::exists(file)) {
    throw IoError("MJCF asset not found: '" + file.string() +
                  "' (set KEYCLD_ASSETS to the folder holding " + EnvNameString(name) + ".xml)");
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
  if (model_->nu < 1 || !(model_->opt.timestep > 0)) {
    mj_deleteModel(model_);
    model_ = nullptr;
    throw FormatError("'" + file.string() + "' must have at least one actuator and a positive " +
                      "time step");
  }
  data_ = mj_makeData(model_);
  for (int k = 0; const char* site = KeypointSiteNames(name, k); ++k) {
    int id = mj_name2id(model_, mjOBJ_SITE, site);
    if (id < 0) {
      throw FormatError("'" + file.string() + "' lacks the keypoint site '" + site + "'");
    }
    keypoint_sites_.push_back(id);
  }
  camera_ = mj_name2id(model_, mjOBJ_CAMERA, "fixed");
  if (camera_ < 0) throw FormatError("'" + file.string() + "' lacks the camera 'fixed'");
  mj_forward(model_, data_);
}

Environment::Environment(const Environment& other)
    : name_(other.name_), keypoint_sites_(other.keypoint_sites_), camera_(other.camera_) {
  model_ = mj_copyModel(nullptr, other.model_);
  data_ = mj_copyData(nullptr, model_, other.data_);
}

Environment::~Environment() {
  if (data_) mj_deleteData(data_);
  if (model_) mj_deleteModel(model_);
}

void Environment::Reset(std::span<const double> qpos, std::span<const double> qvel) {
  if (int(qpos.size()) != nq() || int(qvel.size()) != nv()) {
    throw InputError(EnvNameString(name_) + " has " + std::to_string(nq()) +
                     " joint position(s) and " + std::to_string(nv()) + " velocity(ies), got " +
                     std::to_string(qpos.size()) + " and " + std::to_string(qvel.size()));
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
  switch (name_) {
    case EnvName::kPendulum:
      qpos[0] = rng.Uniform(-M_PI, M_PI);
      qvel[0] = rng.Uniform(-0.1, 0.1);
      break;
    case EnvName::kCartpole:
      qpos[0] = rng.Uniform(-1.0, 1.0);
      qpos[1] = rng.Uniform(-M_PI, M_PI);
      qvel[0] = rng.Uniform(-0.1, 0.1);
      qvel[1] = rng.Uniform(-0.1, 0.1);
      break;
    case EnvName::kAcrobot:
      qpos[0] = rng.Uniform(-M_PI, M_PI);
      qpos[1] = rng.Uniform(-M_PI, M_PI);
      qvel[0] = rng.Uniform(-0.1, 0.1);
      qvel[1] = rng.Uniform(-0.1, 0.1);
      break;
  }
  Reset(qpos, qvel);
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

std::vector<std::vector<double>> StateGrid(EnvName env) {
  constexpr int kN = 16;
  std::vector<std::vector<double>> grid;
  auto angle = [](int i) { return -M_PI + 2.0 * M_PI * i / kN; };
  switch (env) {
    case EnvName::kPendulum:
      for (int i = 0; i < kN; ++i) grid.push_back({angle(i)});
      break;
    case EnvName::kCartpole:
      for (int i = 0; i < kN; ++i)
        for (int j = 0; j < kN; ++j) grid.push_back({-1.0 + 2.0 * i / kN, angle(j)});
      break;
    case EnvName::kAcrobot:
      for (int i = 0; i < kN; ++i)
        for (int j = 0; j < kN; ++j) grid.push_back({angle(i), angle(j)});
      break;
  }
  return grid;
}

std::vector<double> SampleAction(EnvName env, ControlMode mode, int nu, Rng& rng) {
  std::vector<double> u(nu, 0.0);
  if (mode == ControlMode::kNone) return u;
  // Draw every number even when it is discarded, so each run consumes a fixed count.
  bool zero = rng.Uniform(0.0, 1.0) < 0.2;
  for (int i = 0; i < nu; ++i) u[i] = rng.Uniform(-2.0, 2.0);
  if (zero) std::fill(u.begin(), u.end(), 0.0);
  if (mode == ControlMode::kUnder && nu > 1) u[1] = 0.0;
  return u;
}

}  // namespace keycld
