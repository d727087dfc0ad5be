#include "keycld/data/dataset.h"

#include <cstdint>
#include <filesystem>
#include <string>

#include "hdf5.h"
#include "keycld/sim/env_name.h"

namespace keycld {

SystemDescription DatasetSystem(const DatasetInfo& info) {
  if (info.system_description.empty()) return BuiltinSystem(info.env);
  SystemDescription d = ParseSystem(info.system_description, "the data set's system_description",
                                    std::filesystem::path("/"));
  if (info.env != EnvName::kCustom) d.builtin = info.env;
  return d;
}

std::string NeedsSimulatorMessage(const std::string& what, const std::string& file,
                                  const DatasetInfo& info) {
  std::string inputs = info.source_files;
  for (char& c : inputs) {
    if (c == '\n') c = ',';
  }
  return what + " needs a simulator: '" + file + "' was imported from " +
         (inputs.empty() ? std::string("video") : "'" + inputs + "'") +
         " and has no joint states (qpos, qvel) or state grid";
}

int ValidationRunCount(int runs) {
  if (runs < 2) return 0;
  return std::max(1, runs / 10);
}

struct Dataset::Handle {
  h5::Id file;
};

Dataset::Dataset(Dataset&&) noexcept = default;
Dataset& Dataset::operator=(Dataset&&) noexcept = default;
Dataset::~Dataset() = default;

namespace {

// Opens `name` and checks its element class, size and dimensions.
h5::Id OpenChecked(hid_t file, const char* name, H5T_class_t cls, size_t elem_size,
                   const std::vector<hsize_t>& dims, const std::string& path) {
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0) {
    throw FormatError(path + ": dataset '" + name + "' is missing");
  }
  h5::Id ds = h5::Check<FormatError>(H5Dopen2(file, name, H5P_DEFAULT),
                                     path + ": cannot open dataset '" + name + "'");
  h5::Id type = h5::Check<FormatError>(H5Dget_type(ds), path + ": dataset type");
  if (H5Tget_class(type) != cls || H5Tget_size(type) != elem_size) {
    throw FormatError(path + ": dataset '" + name + "' has the wrong element type");
  }
  auto got = h5::Dims(ds);
  if (got != dims) {
    auto fmt = [](const std::vector<hsize_t>& d) {
      std::string s = "[";
      for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
      return s + "]";
    };
    throw FormatError(path + ": dataset '" + name + "' has shape " + fmt(got) + ", expected " +
                      fmt(dims));
  }
  return ds;
}

}  // namespace

Dataset Dataset::Open(const std::filesystem::path& path) {
  h5::Quiet();
  const std::string p = path.string();
  if (!std::filesystem::exists(path)) throw IoError("data set not found: '" + p + "'");
  if (H5Fis_hdf5(p.c_str()) <= 0) {
    throw FormatError("'" + p + "' is not an HDF5 file (truncated or foreign?)");
  }
  Dataset d;
  d.path_ = path;
  d.h_ = std::make_unique<Handle>();
  d.h_->file = h5::Check<FormatError>(H5Fopen(p.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT),
                                      "cannot open '" + p + "' as HDF5 (truncated or corrupt?)");
  hid_t f = d.h_->file;
  if (!h5::HasAttr(f, "format") || h5::ReadStringAttr(f, "format", p) != kDatasetFormatName) {
    throw FormatError("'" + p + "' is an HDF5 file but not a keycld data set (attribute " +
                      "'format' is not '" + kDatasetFormatName + "')");
  }
  DatasetInfo& i = d.info_;
  i.format_version = int(h5::ReadIntAttr(f, "format_version", p));
  if (i.format_version != kDatasetFormatVersion) {
    throw FormatError(p + ": format_version " + std::to_string(i.format_version) +
                      " is not supported (expected " + std::to_string(kDatasetFormatVersion) +
                      "); regenerate it with keycld generate --force");
  }
  try {
    i.env = ParseStoredEnvName(h5::ReadStringAttr(f, "env", p));
    i.control = ParseControlMode(h5::ReadStringAttr(f, "control", p));
    i.system = h5::HasAttr(f, "system") ? h5::ReadStringAttr(f, "system", p) : EnvNameString(i.env);
    if (h5::HasAttr(f, "system_description")) {
      i.system_description = h5::ReadStringAttr(f, "system_description", p);
    }
  } catch (const InputError& e) {
    throw FormatError(p + ": " + e.what());
  }
  if (h5::HasAttr(f, "source")) {
    i.source = h5::ReadStringAttr(f, "source", p);
    if (i.source != "simulation" && i.source != "import") {
      throw FormatError(p + ": attribute 'source' = '" + i.source +
                        "' (expected 'simulation' or 'import')");
    }
    if (h5::HasAttr(f, "source_files")) i.source_files = h5::ReadStringAttr(f, "source_files", p);
  }
  if (i.env != EnvName::kCustom && i.system != EnvNameString(i.env)) {
    throw FormatError(p + ": attribute 'env' = '" + EnvNameString(i.env) +
                      "' but attribute 'system' = '" + i.system + "'");
  }
  if (i.env == EnvName::kCustom && i.system_description.empty()) {
    throw FormatError(p + ": a custom system's data set without its 'system_description'");
  }
  // Each count is checked in 64 bits before it becomes an int (4294967308 runs read as 12).
  auto count = [&](const char* name, int64_t lo, int64_t hi) {
    const int64_t v = h5::ReadIntAttr(f, name, p);
    if (v < lo || v > hi) {
      throw FormatError(p + ": attribute '" + name + "' = " + std::to_string(v) + " is outside [" +
                        std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return int(v);
  };
  i.runs = count("runs", 1, 1000000);
  i.frames = count("frames", 1, 100000);
  i.size = count("size", 1, 4096);
  i.seed = uint64_t(h5::ReadIntAttr(f, "seed", p));
  if (int64_t(i.seed) < 0) throw FormatError(p + ": attribute 'seed' is negative");
  // A system known only from video has no joints (sim/system.h).
  i.nq = count("nq", i.has_state() ? 1 : 0, 64);
  i.nv = count("nv", i.has_state() ? 1 : 0, 64);
  i.nu = count("nu", 1, 64);
  i.dt = h5::ReadDoubleAttr(f, "dt", p);
  i.vpt_epsilon = h5::ReadDoubleAttr(f, "vpt_epsilon", p);
  i.train_runs = count("train_runs", 0, 1000000);
  i.validation_runs = count("validation_runs", 0, 1000000);
  i.mujoco_version = h5::ReadStringAttr(f, "mujoco_version", p);
  i.keycld_version = h5::ReadStringAttr(f, "keycld_version", p);
  i.gl_backend = h5::ReadStringAttr(f, "gl_backend", p);
  i.gl_renderer = h5::ReadStringAttr(f, "gl_renderer", p);
  if (i.train_runs + i.validation_runs != i.runs) {
    throw FormatError(p + ": inconsistent attributes: train_runs " + std::to_string(i.train_runs) +
                      " + validation_runs " + std::to_string(i.validation_runs) + " ≠ runs " +
                      std::to_string(i.runs));
  }
  // The frame interval is the physics time step (0.01–0.02 s for the built-in systems).
  if (!(i.dt > 0 && i.dt <= 1)) {
    throw FormatError(p + ": attribute 'dt' = " + std::to_string(i.dt) + " s is outside (0, 1] s");
  }
  // ε is a mean squared difference of [0, 1] pixels.
  if (!(i.vpt_epsilon > 0 && i.vpt_epsilon <= 1)) {
    throw FormatError(p + ": attribute 'vpt_epsilon' = " + std::to_string(i.vpt_epsilon) +
                      " is outside (0, 1] (the VPT threshold, a per-pixel MSE)");
  }
  SystemDescription system;
  try {
    system = DatasetSystem(i);
  } catch (const Error& e) {
    throw FormatError(p + ": its system description: " + e.what());
  }
  if (system.name != i.system) {
    throw FormatError(p + ": attribute 'system' = '" + i.system + "' but the description is of '" +
                      system.name + "'");
  }
  if (i.nq != system.nq() || i.nv != system.nv() || i.nu != system.nu()) {
    throw FormatError(p + ": the " + i.system + " has nq " + std::to_string(system.nq()) + ", nv " +
                      std::to_string(system.nv()) + ", nu " + std::to_string(system.nu()) +
                      ", but the attributes say nq " + std::to_string(i.nq) + ", nv " +
                      std::to_string(i.nv) + ", nu " + std::to_string(i.nu));
  }
  const hsize_t R = i.runs, N = i.frames, S = i.size;
  OpenChecked(f, "images", H5T_INTEGER, 1, {R, N, S, S, 3}, p);
  OpenChecked(f, "time", H5T_FLOAT, 8, {R, N}, p);
  OpenChecked(f, "action", H5T_FLOAT, 8, {R, N, hsize_t(i.nu)}, p);
  if (i.has_state()) {
    OpenChecked(f, "qpos", H5T_FLOAT, 8, {R, N, hsize_t(i.nq)}, p);
    OpenChecked(f, "qvel", H5T_FLOAT, 8, {R, N, hsize_t(i.nv)}, p);
  }
  OpenChecked(f, "mean_image", H5T_FLOAT, 4, {S, S, 3}, p);
  OpenChecked(f, "split/train", H5T_INTEGER, 8, {hsize_t(i.train_runs)}, p);
  OpenChecked(f, "split/validation", H5T_INTEGER, 8, {hsize_t(i.validation_runs)}, p);
  return d;
}

namespace {

template <typename T>
std::vector<T> ReadRunSlab(hid_t file, const char* name, hid_t mem_type, int run,
                           const DatasetInfo& info, const std::string& path) {
  if (run < 0 || run >= info.runs) {
    throw InputError(path + ": run " + std::to_string(run) + " out of range [0, " +
                     std::to_string(info.runs) + ")");
  }
  h5::Id ds = h5::Check<FormatError>(H5Dopen2(file, name, H5P_DEFAULT), path + ": " + name);
  auto dims = h5::Dims(ds);
  std::vector<hsize_t> offset(dims.size(), 0), count = dims;
  offset[0] = hsize_t(run);
  count[0] = 1;
  size_t n = 1;
  for (auto c : count) n *= c;
  std::vector<T> out(n);
  h5::ReadSlab(ds, mem_type, out.data(), offset, count, path + ": " + name);
  return out;
}

template <typename T>
std::vector<T> ReadAll(hid_t file, const char* name, hid_t mem_type, const std::string& path) {
  h5::Id ds = h5::Check<FormatError>(H5Dopen2(file, name, H5P_DEFAULT), path + ": " + name);
  auto dims = h5::Dims(ds);
  size_t n = 1;
  for (auto c : dims) n *= c;
  std::vector<T> out(n);
  if (n > 0)
    h5::ReadSlab(ds, mem_type, out.data(), std::vector<hsize_t>(dims.size(), 0), dims,
                 path + ": " + name);
  return out;
}

}  // namespace

std::vector<uint8_t> Dataset::ReadImages(int run) const {
  return ReadRunSlab<uint8_t>(h_->file, "images", H5T_NATIVE_UINT8, run, info_, path_.string());
}
std::vector<double> Dataset::ReadTime(int run) const {
  return ReadRunSlab<double>(h_->file, "time", H5T_NATIVE_DOUBLE, run, info_, path_.string());
}
std::vector<double> Dataset::ReadAction(int run) const {
  return ReadRunSlab<double>(h_->file, "action", H5T_NATIVE_DOUBLE, run, info_, path_.string());
}
std::vector<double> Dataset::ReadQpos(int run) const {
  if (!info_.has_state()) {
    throw InputError(NeedsSimulatorMessage("the joint positions", path_.string(), info_));
  }
  return ReadRunSlab<double>(h_->file, "qpos", H5T_NATIVE_DOUBLE, run, info_, path_.string());
}
std::vector<double> Dataset::ReadQvel(int run) const {
  if (!info_.has_state()) {
    throw InputError(NeedsSimulatorMessage("the joint velocities", path_.string(), info_));
  }
  return ReadRunSlab<double>(h_->file, "qvel", H5T_NATIVE_DOUBLE, run, info_, path_.string());
}
std::vector<float> Dataset::ReadMeanImage() const {
  return ReadAll<float>(h_->file, "mean_image", H5T_NATIVE_FLOAT, path_.string());
}
std::vector<int64_t> Dataset::TrainRuns() const {
  return ReadAll<int64_t>(h_->file, "split/train", H5T_NATIVE_INT64, path_.string());
}
std::vector<int64_t> Dataset::ValidationRuns() const {
  return ReadAll<int64_t>(h_->file, "split/validation", H5T_NATIVE_INT64, path_.string());
}
std::vector<double> Dataset::ReadGridQpos(int* count) const {
  if (!info_.has_state()) {
    throw InputError(NeedsSimulatorMessage("the state grid", path_.string(), info_));
  }
  auto q = ReadAll<double>(h_->file, "grid/qpos", H5T_NATIVE_DOUBLE, path_.string());
  if (count) *count = info_.nq > 0 ? int(q.size()) / info_.nq : 0;
  return q;
}
std::vector<uint8_t> Dataset::ReadGridImages() const {
  if (!info_.has_state()) {
    throw InputError(NeedsSimulatorMessage("the state grid", path_.string(), info_));
  }
  return ReadAll<uint8_t>(h_->file, "grid/images", H5T_NATIVE_UINT8, path_.string());
}

}  // namespace keycld
