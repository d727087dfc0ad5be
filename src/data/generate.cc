#include "keycld/data/generate.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <iostream>
#include <mutex>
#include <thread>

#include <cstdlib>
#include <unistd.h>

#include "hdf5.h"
#include "keycld/sim/offscreen_renderer.h"
#include "keycld/util/atomic_file.h"
#include "keycld/util/interrupt.h"
#include "keycld/util/progress.h"

namespace keycld {

namespace fs = std::filesystem;

void ValidateGenerateOptions(const GenerateOptions& o) {
  CheckControlMode(o.env, o.control);
  if (o.runs < 1) throw InputError("--runs must be at least 1, got " + std::to_string(o.runs));
  if (o.frames < 3) {
    throw InputError("--frames must be at least 3 (central differences need 3 frames), got " +
                     std::to_string(o.frames));
  }
  if (o.size < 8 || o.size > 1024) {
    throw InputError("--size must be in [8, 1024] pixels, got " + std::to_string(o.size));
  }
  if (o.workers < 0) {
    throw InputError("--workers must be ≥ 0 (0 = one per core), got " +
                     std::to_string(o.workers));
  }
}

fs::path DatasetPath(const GenerateOptions& o) {
  return o.out_dir / (EnvNameString(o.env) + "-" + ControlModeString(o.control) + "-" +
                      std::to_string(o.size) + "px-" + std::to_string(o.runs) + "x" +
                      std::to_string(o.frames) + "-seed" + std::to_string(o.seed) + ".h5");
}

namespace {

// Random streams of the protocol: one per run.
constexpr uint64_t kRunStream = 1;

// The output of one work item: a run (index < runs) or a state-grid image.
struct Item {
  int index = 0;
  std::vector<uint8_t> images;
  std::vector<double> time, action, qpos, qvel;
};

// A bounded queue from the workers to the writer (the HDF5 library is not thread-safe here:
// only the calling thread touches the file).
class ItemQueue {
 public:
  explicit ItemQueue(size_t capacity) : capacity_(capacity) {}
  // false if the queue was closed.
  bool Push(Item&& item) {
    std::unique_lock<std::mutex> lock(m_);
    not_full_.wait(lock, [&] { return q_.size() < capacity_ || closed_; });
    if (closed_) return false;
    q_.push_back(std::move(item));
    not_empty_.notify_one();
    return true;
  }
  // Waits up to 100 ms; false if nothing arrived.
  bool Pop(Item* item) {
    std::unique_lock<std::mutex> lock(m_);
    if (!not_empty_.wait_for(lock, std::chrono::milliseconds(100), [&] { return !q_.empty(); }))
      return false;
    *item = std::move(q_.front());
    q_.pop_front();
    not_full_.notify_one();
    return true;
  }
  void Close() {
    std::lock_guard<std::mutex> lock(m_);
    closed_ = true;
    not_full_.notify_all();
  }

 private:
  size_t capacity_;
  std::mutex m_;
  std::condition_variable not_full_, not_empty_;
  std::deque<Item> q_;
  bool closed_ = false;
};

bool SameParameters(const DatasetInfo& i, const GenerateOptions& o) {
  return i.env == o.env && i.control == o.control && i.runs == o.runs && i.frames == o.frames &&
         i.size == o.size && i.seed == o.seed;
}

std::string MujocoVersion() {
  int v = mj_version();
  return std::to_string(v / 100) + "." + std::to_string((v / 10) % 10) + "." +
         std::to_string(v % 10);
}

}  // namespace

GenerateResult GenerateDataset(const GenerateOptions& o) {
  ValidateGenerateOptions(o);
  h5::Quiet();
  GenerateResult result;
  result.path = DatasetPath(o);
  if (fs::exists(result.path) && !o.force) {
    Dataset existing = [&] {
      try {
        return Dataset::Open(result.path);
      } catch (const Error& e) {
        throw FormatError(std::string(e.what()) +
                          "; the existing file is not a valid data set: rerun with --force");
      }
    }();
    if (!SameParameters(existing.info(), o)) {
      throw InputError("'" + result.path.string() +
                       "' exists with other generation parameters: rerun with --force");
    }
    result.reused = true;
    result.info = existing.info();
    return result;
  }

  InterruptGuard interrupt_guard;
  // Mesa's llvmpipe rasterizes on helper threads by default; at these image sizes the workers
  // already fill the cores and the helpers cost 20 % more CPU for no gain (measured with
  // bench/generate_bench). A value set by the user is kept.
  ::setenv("LP_NUM_THREADS", "0", /*overwrite=*/0);
  const Environment prototype(o.env, o.assets_dir);
  const int nq = prototype.nq(), nv = prototype.nv(), nu = prototype.nu();
  const int R = o.runs, N = o.frames, S = o.size;
  const auto grid = StateGrid(o.env);
  const int G = int(grid.size());
  const int total_items = R + G;
  int workers = o.workers > 0 ? o.workers : int(std::max(1u, std::thread::hardware_concurrency()));
  workers = std::min(workers, total_items);

  AtomicFile out(result.path);
  h5::Id file = h5::Check(
      H5Fcreate(out.temp_path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
      "cannot create HDF5 file '" + out.temp_path().string() + "'");
  const hsize_t hR = R, hN = N, hS = S;
  h5::Id d_images = h5::CreateDataset(file, "images", H5T_STD_U8LE, {hR, hN, hS, hS, 3},
                                      {1, hN, hS, hS, 3}, 4);
  h5::Id d_time = h5::CreateDataset(file, "time", H5T_IEEE_F64LE, {hR, hN}, {}, 0);
  h5::Id d_action =
      h5::CreateDataset(file, "action", H5T_IEEE_F64LE, {hR, hN, hsize_t(nu)}, {}, 0);
  h5::Id d_qpos = h5::CreateDataset(file, "qpos", H5T_IEEE_F64LE, {hR, hN, hsize_t(nq)}, {}, 0);
  h5::Id d_qvel = h5::CreateDataset(file, "qvel", H5T_IEEE_F64LE, {hR, hN, hsize_t(nv)}, {}, 0);
  h5::Id g_grid = h5::Check(H5Gcreate2(file, "grid", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                            "cannot create group grid");
  h5::Id d_grid_images = h5::CreateDataset(g_grid, "images", H5T_STD_U8LE,
                                           {hsize_t(G), hS, hS, 3}, {1, hS, hS, 3}, 4);
  h5::Id d_grid_qpos =
      h5::CreateDataset(g_grid, "qpos", H5T_IEEE_F64LE, {hsize_t(G), hsize_t(nq)}, {}, 0);

  // Workers: each owns a GL context, a copy of the model and a renderer.
  ItemQueue queue(size_t(4 * workers));
  std::atomic<int> next{0};
  std::atomic<bool> stop{false};
  std::mutex error_mutex, setup_mutex;
  std::exception_ptr error;
  GlInfo gl_info;
  auto worker = [&](int w) {
    try {
      std::unique_ptr<GlContext> gl;
      std::unique_ptr<OffscreenRenderer> renderer;
      Environment env(prototype);
      {
        // Context creation and MuJoCo's GL loading are not safe to run concurrently.
        std::lock_guard<std::mutex> lock(setup_mutex);
        gl = GlContext::Create(o.gl);
        renderer = std::make_unique<OffscreenRenderer>(env, *gl, S);
        if (w == 0) gl_info = gl->info();
      }
      const size_t frame_bytes = size_t(S) * S * 3;
      for (int i; !stop && (i = next.fetch_add(1)) < total_items;) {
        Item item;
        item.index = i;
        if (i < R) {
          Rng rng(o.seed, kRunStream, uint64_t(i));
          env.ResetRandom(rng);
          std::vector<double> u = SampleAction(o.env, o.control, nu, rng);
          env.SetAction(u);
          item.images.resize(frame_bytes * N);
          for (int t = 0; t < N; ++t) {
            env.Step();  // frame 0 is rendered after the first step (KEYCLD.md §7)
            renderer->Render(env, std::span(item.images.data() + t * frame_bytes, frame_bytes));
            item.time.push_back(env.time());
            for (double a : u) item.action.push_back(a);
            for (double q : env.qpos()) item.qpos.push_back(q);
            for (double v : env.qvel()) item.qvel.push_back(v);
          }
        } else {
          const auto& q = grid[i - R];
          env.Reset(q, std::vector<double>(nv, 0.0));
          item.images.resize(frame_bytes);
          renderer->Render(env, item.images);
          item.qpos = q;
        }
        if (!queue.Push(std::move(item))) break;
      }
      renderer.reset();
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      stop = true;
    }
  };

  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (int w = 0; w < workers; ++w) threads.emplace_back(worker, w);
  auto join_all = [&] {
    stop = true;
    queue.Close();
    for (auto& t : threads)
      if (t.joinable()) t.join();
  };

  // Writer (this thread): HDF5 writes and the exact statistics for ε.
  const size_t P = size_t(S) * S * 3;
  std::vector<uint64_t> sum(P, 0), sum_sq(P, 0);
  ProgressBar bar("generate " + EnvNameString(o.env) + "/" + ControlModeString(o.control),
                  int64_t(R) * N, "frames", o.progress && ::isatty(2));
  int done = 0, frames_done = 0;
  try {
    while (done < total_items) {
      if (InterruptRequested()) throw Interrupted("generation interrupted; nothing was written");
      {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (error) std::rethrow_exception(error);
      }
      Item item;
      if (!queue.Pop(&item)) continue;
      const hsize_t i = hsize_t(item.index);
      if (item.index < R) {
        h5::WriteSlab(d_images, H5T_NATIVE_UINT8, item.images.data(), {i, 0, 0, 0, 0},
                      {1, hN, hS, hS, 3}, "images");
        h5::WriteSlab(d_time, H5T_NATIVE_DOUBLE, item.time.data(), {i, 0}, {1, hN}, "time");
        h5::WriteSlab(d_action, H5T_NATIVE_DOUBLE, item.action.data(), {i, 0, 0},
                      {1, hN, hsize_t(nu)}, "action");
        h5::WriteSlab(d_qpos, H5T_NATIVE_DOUBLE, item.qpos.data(), {i, 0, 0},
                      {1, hN, hsize_t(nq)}, "qpos");
        h5::WriteSlab(d_qvel, H5T_NATIVE_DOUBLE, item.qvel.data(), {i, 0, 0},
                      {1, hN, hsize_t(nv)}, "qvel");
        // Integer sums are exact, so ε does not depend on the order runs arrive in.
        for (int t = 0; t < N; ++t) {
          const uint8_t* f = item.images.data() + t * P;
          for (size_t p = 0; p < P; ++p) {
            sum[p] += f[p];
            sum_sq[p] += uint64_t(f[p]) * f[p];
          }
        }
        frames_done += N;
        bar.Update(frames_done);
      } else {
        const hsize_t g = i - hsize_t(R);
        h5::WriteSlab(d_grid_images, H5T_NATIVE_UINT8, item.images.data(), {g, 0, 0, 0},
                      {1, hS, hS, 3}, "grid/images");
        h5::WriteSlab(d_grid_qpos, H5T_NATIVE_DOUBLE, item.qpos.data(), {g, 0},
                      {1, hsize_t(nq)}, "grid/qpos");
      }
      ++done;
    }
  } catch (...) {
    join_all();
    throw;
  }
  join_all();
  if (error) std::rethrow_exception(error);
  bar.Finish();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.frames_per_second = double(R) * N / result.seconds;

  // Mean image (mean over runs of each run's time average = mean over all frames) and the VPT
  // threshold ε = mean over runs of the per-pixel MSE to the mean image (KEYCLD.md §8).
  const double count = double(R) * N;
  std::vector<float> mean(P);
  double sq_err = 0;
  for (size_t p = 0; p < P; ++p) {
    double m = double(sum[p]) / count;
    mean[p] = float(m / 255.0);
    sq_err += double(sum_sq[p]) - 2.0 * m * double(sum[p]) + count * m * m;
  }
  const double epsilon = sq_err / (count * double(P)) / (255.0 * 255.0);
  h5::Id d_mean = h5::CreateDataset(file, "mean_image", H5T_IEEE_F32LE, {hS, hS, 3}, {}, 0);
  h5::WriteSlab(d_mean, H5T_NATIVE_FLOAT, mean.data(), {0, 0, 0}, {hS, hS, 3}, "mean_image");

  const int V = ValidationRunCount(R);
  std::vector<int64_t> train(R - V), validation(V);
  for (int r = 0; r < R; ++r) (r < R - V ? train[r] : validation[r - (R - V)]) = r;
  h5::Id g_split = h5::Check(H5Gcreate2(file, "split", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                             "cannot create group split");
  h5::Id d_train = h5::CreateDataset(g_split, "train", H5T_STD_I64LE, {hsize_t(R - V)}, {}, 0);
  h5::Id d_val = h5::CreateDataset(g_split, "validation", H5T_STD_I64LE, {hsize_t(V)}, {}, 0);
  if (R - V > 0) h5::WriteSlab(d_train, H5T_NATIVE_INT64, train.data(), {0}, {hsize_t(R - V)},
                               "split/train");
  if (V > 0) h5::WriteSlab(d_val, H5T_NATIVE_INT64, validation.data(), {0}, {hsize_t(V)},
                           "split/validation");

  h5::WriteAttr(file, "format", std::string(kDatasetFormatName));
  h5::WriteAttr(file, "format_version", int64_t(kDatasetFormatVersion));
  h5::WriteAttr(file, "env", EnvNameString(o.env));
  h5::WriteAttr(file, "control", ControlModeString(o.control));
  h5::WriteAttr(file, "runs", int64_t(R));
  h5::WriteAttr(file, "frames", int64_t(N));
  h5::WriteAttr(file, "size", int64_t(S));
  h5::WriteAttr(file, "seed", int64_t(o.seed));
  h5::WriteAttr(file, "nq", int64_t(nq));
  h5::WriteAttr(file, "nv", int64_t(nv));
  h5::WriteAttr(file, "nu", int64_t(nu));
  h5::WriteAttr(file, "dt", prototype.timestep());
  h5::WriteAttr(file, "vpt_epsilon", epsilon);
  h5::WriteAttr(file, "train_runs", int64_t(R - V));
  h5::WriteAttr(file, "validation_runs", int64_t(V));
  h5::WriteAttr(file, "mujoco_version", MujocoVersion());
  h5::WriteAttr(file, "keycld_version", std::string(KEYCLD_VERSION));
  h5::WriteAttr(file, "gl_backend", GlBackendName(gl_info.backend));
  h5::WriteAttr(file, "gl_renderer", gl_info.renderer);
  // Close every handle before the rename.
  for (h5::Id* id : {&d_images, &d_time, &d_action, &d_qpos, &d_qvel, &d_grid_images,
                     &d_grid_qpos, &g_grid, &d_mean, &d_train, &d_val, &g_split})
    id->Reset();
  if (H5Fclose(file.Release()) < 0) {
    throw IoError("cannot finish '" + out.temp_path().string() + "' (disk full?)");
  }
  out.Commit();
  result.info = Dataset::Open(result.path).info();
  return result;
}

}  // namespace keycld
