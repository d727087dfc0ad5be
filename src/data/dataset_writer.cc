#include "dataset_writer.h"

#include "keycld/util/atomic_file.h"

namespace keycld {

namespace fs = std::filesystem;

void PixelStatistics::AddFrames(const uint8_t* frames, int count) {
  const size_t P = sum_.size();
  for (int t = 0; t < count; ++t) {
    const uint8_t* f = frames + size_t(t) * P;
    for (size_t q = 0; q < P; ++q) {
      sum_[q] += f[q];
      sum_sq_[q] += uint64_t(f[q]) * f[q];
    }
  }
  frames_ += count;
}

std::vector<float> PixelStatistics::MeanImage() const {
  std::vector<float> mean(sum_.size());
  for (size_t p = 0; p < sum_.size(); ++p) mean[p] = float(double(sum_[p]) / frames_ / 255.0);
  return mean;
}

double PixelStatistics::Epsilon() const {
  double sq_err = 0;
  for (size_t p = 0; p < sum_.size(); ++p) {
    const double m = double(sum_[p]) / frames_;
    sq_err += double(sum_sq_[p]) - 2.0 * m * double(sum_[p]) + frames_ * m * m;
  }
  return sq_err / (frames_ * double(sum_.size())) / (255.0 * 255.0);
}

DatasetWriter::DatasetWriter(const fs::path& path, const fs::path& target, DatasetHeader header)
    : target_(target), h_(std::move(header)), stats_(size_t(h_.size) * h_.size * 3) {
  file_ = h5::Check(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                    "cannot create HDF5 file '" + path.string() + "'");
  const hsize_t R = h_.runs, N = h_.frames, S = h_.size, G = hsize_t(h_.grid_size);
  images_ = h5::CreateDataset(file_, "images", H5T_STD_U8LE, {R, N, S, S, 3}, {1, N, S, S, 3}, 4);
  time_ = h5::CreateDataset(file_, "time", H5T_IEEE_F64LE, {R, N}, {}, 0);
  action_ = h5::CreateDataset(file_, "action", H5T_IEEE_F64LE, {R, N, hsize_t(h_.nu)}, {}, 0);
  if (!h_.has_state) return;
  qpos_ = h5::CreateDataset(file_, "qpos", H5T_IEEE_F64LE, {R, N, hsize_t(h_.nq)}, {}, 0);
  qvel_ = h5::CreateDataset(file_, "qvel", H5T_IEEE_F64LE, {R, N, hsize_t(h_.nv)}, {}, 0);
  grid_ = h5::Check(H5Gcreate2(file_, "grid", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                    "cannot create group grid");
  grid_images_ = h5::CreateDataset(grid_, "images", H5T_STD_U8LE, {G, S, S, 3}, {1, S, S, 3}, 4);
  grid_qpos_ = h5::CreateDataset(grid_, "qpos", H5T_IEEE_F64LE, {G, hsize_t(h_.nq)}, {}, 0);
}

void DatasetWriter::WriteRun(hsize_t i, const uint8_t* images, const double* time,
                             const double* action, const double* qpos, const double* qvel) {
  const hsize_t N = h_.frames, S = h_.size;
  h5::WriteSlab(images_, H5T_NATIVE_UINT8, images, {i, 0, 0, 0, 0}, {1, N, S, S, 3}, "images");
  h5::WriteSlab(time_, H5T_NATIVE_DOUBLE, time, {i, 0}, {1, N}, "time");
  h5::WriteSlab(action_, H5T_NATIVE_DOUBLE, action, {i, 0, 0}, {1, N, hsize_t(h_.nu)}, "action");
  if (h_.has_state) {
    h5::WriteSlab(qpos_, H5T_NATIVE_DOUBLE, qpos, {i, 0, 0}, {1, N, hsize_t(h_.nq)}, "qpos");
    h5::WriteSlab(qvel_, H5T_NATIVE_DOUBLE, qvel, {i, 0, 0}, {1, N, hsize_t(h_.nv)}, "qvel");
  }
  stats_.AddFrames(images, h_.frames);
}

void DatasetWriter::WriteGridImage(hsize_t g, const uint8_t* image, const double* qpos) {
  const hsize_t S = h_.size;
  h5::WriteSlab(grid_images_, H5T_NATIVE_UINT8, image, {g, 0, 0, 0}, {1, S, S, 3}, "grid/images");
  h5::WriteSlab(grid_qpos_, H5T_NATIVE_DOUBLE, qpos, {g, 0}, {1, hsize_t(h_.nq)}, "grid/qpos");
}

void DatasetWriter::Finish(const std::string& gl_backend, const std::string& gl_renderer,
                           const std::string& mujoco_version) {
  const hsize_t S = h_.size;
  h5::Id mean = h5::CreateDataset(file_, "mean_image", H5T_IEEE_F32LE, {S, S, 3}, {}, 0);
  const std::vector<float> mean_image = stats_.MeanImage();
  h5::WriteSlab(mean, H5T_NATIVE_FLOAT, mean_image.data(), {0, 0, 0}, {S, S, 3}, "mean_image");
  mean.Reset();
  WriteSplit();
  WriteAttributes(gl_backend, gl_renderer, mujoco_version);
  // Close every handle before the rename; closing flushes the chunk caches, so each close can
  // be the write that fails.
  for (h5::Id* id :
       {&images_, &time_, &action_, &qpos_, &qvel_, &grid_images_, &grid_qpos_, &grid_}) {
    if (id->valid() && H5Idec_ref(id->Release()) < 0) Fail();
  }
  if (H5Fclose(file_.Release()) < 0) Fail();
}

void DatasetWriter::Fail() const {
  const int err = h5::LastErrno();
  if (err != 0) throw IoError(WriteFailure(target_, err));
  throw IoError("cannot write data set '" + target_.string() + "': HDF5 write failed");
}

// The last ValidationRunCount(R) runs validate, the others train (docs/method.md §7).
void DatasetWriter::WriteSplit() {
  const int R = h_.runs, V = ValidationRunCount(R);
  std::vector<int64_t> train, validation;
  for (int r = 0; r < R; ++r) (r < R - V ? train : validation).push_back(r);
  h5::Id split = h5::Check(H5Gcreate2(file_, "split", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                           "cannot create group split");
  h5::Id d_train = h5::CreateDataset(split, "train", H5T_STD_I64LE, {hsize_t(R - V)}, {}, 0);
  h5::Id d_val = h5::CreateDataset(split, "validation", H5T_STD_I64LE, {hsize_t(V)}, {}, 0);
  if (R - V > 0) {
    h5::WriteSlab(d_train, H5T_NATIVE_INT64, train.data(), {0}, {hsize_t(R - V)}, "split/train");
  }
  if (V > 0) {
    h5::WriteSlab(d_val, H5T_NATIVE_INT64, validation.data(), {0}, {hsize_t(V)},
                  "split/validation");
  }
}

void DatasetWriter::WriteAttributes(const std::string& gl_backend, const std::string& gl_renderer,
                                    const std::string& mujoco_version) {
  const int R = h_.runs, V = ValidationRunCount(R);
  h5::WriteAttr(file_, "format", std::string(kDatasetFormatName));
  h5::WriteAttr(file_, "format_version", int64_t(kDatasetFormatVersion));
  h5::WriteAttr(file_, "env", EnvNameString(h_.env));
  h5::WriteAttr(file_, "system", h_.system);
  h5::WriteAttr(file_, "system_description", h_.description);
  h5::WriteAttr(file_, "control", ControlModeString(h_.control));
  h5::WriteAttr(file_, "runs", int64_t(R));
  h5::WriteAttr(file_, "frames", int64_t(h_.frames));
  h5::WriteAttr(file_, "size", int64_t(h_.size));
  h5::WriteAttr(file_, "seed", int64_t(h_.seed));
  h5::WriteAttr(file_, "nq", int64_t(h_.nq));
  h5::WriteAttr(file_, "nv", int64_t(h_.nv));
  h5::WriteAttr(file_, "nu", int64_t(h_.nu));
  h5::WriteAttr(file_, "dt", h_.dt);
  h5::WriteAttr(file_, "vpt_epsilon", stats_.Epsilon());
  h5::WriteAttr(file_, "train_runs", int64_t(R - V));
  h5::WriteAttr(file_, "validation_runs", int64_t(V));
  h5::WriteAttr(file_, "mujoco_version", mujoco_version);
  h5::WriteAttr(file_, "keycld_version", std::string(KEYCLD_VERSION));
  h5::WriteAttr(file_, "gl_backend", gl_backend);
  h5::WriteAttr(file_, "gl_renderer", gl_renderer);
  if (h_.source != "simulation") {
    h5::WriteAttr(file_, "source", h_.source);
    h5::WriteAttr(file_, "source_files", h_.source_files);
  }
}

}  // namespace keycld
