#include "keycld/data/generate.h"

#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
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
  if (o.workers < 0 || o.workers > 256) {
    throw InputError("--workers must be in [0, 256] (0 = one per core), got " +
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

// Worker processes. Mesa's llvmpipe serializes the GL contexts of one process: measured here,
// two render threads gave 148 frames/s against 174 for one, while two processes gave 338. So
// each worker is a forked process with its own GL context, model copy and renderer, sending
// its items to the parent (the only one that touches the HDF5 file) through a pipe.
enum class MessageType : int32_t { kItem = 0, kError = 1, kGlInfo = 2 };
struct MessageHeader {
  MessageType type;
  int32_t index;
  uint64_t bytes;
};

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

// false on end of file before anything was read; throws if the stream ends mid-message.
bool ReadAll(int fd, void* data, size_t n, bool eof_ok) {
  char* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw IoError(std::string("reading from a render worker: ") + std::strerror(errno));
    if (r == 0) {
      if (got == 0 && eof_ok) return false;
      throw IoError("a render worker stopped in the middle of a message");
    }
    got += size_t(r);
  }
  return true;
}

void SendMessage(int fd, MessageType type, int32_t index, const std::vector<const void*>& parts,
                 const std::vector<size_t>& sizes) {
  uint64_t total = 0;
  for (size_t n : sizes) total += n;
  MessageHeader h{type, index, total};
  if (!WriteAll(fd, &h, sizeof h)) ::_exit(3);  // the parent is gone
  for (size_t i = 0; i < parts.size(); ++i)
    if (sizes[i] && !WriteAll(fd, parts[i], sizes[i])) ::_exit(3);
}

// What a worker process needs; it renders items w, w + W, w + 2W, …
struct WorkerJob {
  const GenerateOptions* options;
  const Environment* prototype;
  const std::vector<std::vector<double>>* grid;
  int worker, workers, total_items;
};

int g_worker_fd = -1;  // the pipe of this worker process, for MuJoCo's error handler

void ForwardMujocoError(const char* msg) {
  std::string what = std::string("MuJoCo: ") + msg;
  SendMessage(g_worker_fd, MessageType::kError, -1, {what.data()}, {what.size()});
}

[[noreturn]] void RunWorker(const WorkerJob& job, int fd) {
  g_worker_fd = fd;
  InstallMujocoHandlers(ForwardMujocoError);
  const GenerateOptions& o = *job.options;
  const int R = o.runs, N = o.frames, S = o.size;
  try {
    Environment env(*job.prototype);
    auto gl = GlContext::Create(o.gl);
    OffscreenRenderer renderer(env, *gl, S);
    if (job.worker == 0) {
      std::string info = GlBackendName(gl->info().backend) + "\n" + gl->info().renderer;
      SendMessage(fd, MessageType::kGlInfo, 0, {info.data()}, {info.size()});
    }
    const size_t frame_bytes = size_t(S) * S * 3;
    const int nu = env.nu();
    for (int i = job.worker; i < job.total_items; i += job.workers) {
      Item item;
      if (i < R) {
        Rng rng(o.seed, kRunStream, uint64_t(i));
        env.ResetRandom(rng);
        std::vector<double> u = SampleAction(o.env, o.control, nu, rng);
        env.SetAction(u);
        item.images.resize(frame_bytes * N);
        for (int t = 0; t < N; ++t) {
          env.Step();  // frame 0 is rendered after the first step (KEYCLD.md §7)
          renderer.Render(env, std::span(item.images.data() + t * frame_bytes, frame_bytes));
          item.time.push_back(env.time());
          for (double a : u) item.action.push_back(a);
          for (double q : env.qpos()) item.qpos.push_back(q);
          for (double v : env.qvel()) item.qvel.push_back(v);
        }
      } else {
        const auto& q = (*job.grid)[i - R];
        env.Reset(q, std::vector<double>(env.nv(), 0.0));
        item.images.resize(frame_bytes);
        renderer.Render(env, item.images);
        item.qpos = q;
      }
      auto bytes = [](const std::vector<double>& v) { return v.size() * sizeof(double); };
      SendMessage(fd, MessageType::kItem, i,
                  {item.images.data(), item.time.data(), item.action.data(), item.qpos.data(),
                   item.qvel.data()},
                  {item.images.size(), bytes(item.time), bytes(item.action), bytes(item.qpos),
                   bytes(item.qvel)});
    }
  } catch (const std::exception& e) {
    std::string what = e.what();
    SendMessage(fd, MessageType::kError, job.worker, {what.data()}, {what.size()});
    ::close(fd);
    ::_exit(1);
  }
  ::close(fd);
  ::_exit(0);  // no destructors or atexit handlers: they belong to the parent
}

// The parent's view of the workers: forks them, reads their messages, and kills and reaps them
// on destruction (an error or an interruption).
class WorkerPool {
 public:
  WorkerPool(const WorkerJob& job_template) {
    for (int w = 0; w < job_template.workers; ++w) {
      int fds[2];
      if (::pipe(fds) != 0) throw IoError(std::string("pipe: ") + std::strerror(errno));
      std::fflush(nullptr);
      pid_t pid = ::fork();
      if (pid < 0) throw IoError(std::string("fork: ") + std::strerror(errno));
      if (pid == 0) {
        ::close(fds[0]);
        for (int fd : fds_) ::close(fd);
        ::signal(SIGINT, SIG_IGN);  // the parent handles Ctrl-C and stops the workers
        ::signal(SIGTERM, SIG_DFL);
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        WorkerJob job = job_template;
        job.worker = w;
        RunWorker(job, fds[1]);
      }
      ::close(fds[1]);
      pids_.push_back(pid);
      fds_.push_back(fds[0]);
    }
  }
  ~WorkerPool() {
    for (size_t w = 0; w < pids_.size(); ++w) {
      if (pids_[w] > 0) {
        ::kill(pids_[w], SIGKILL);
        ::waitpid(pids_[w], nullptr, 0);
      }
      if (fds_[w] >= 0) ::close(fds_[w]);
    }
  }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Waits up to 100 ms for a message. Returns false on timeout or when a worker finished
  // (check done()). Throws GlError/Error with a worker's message, or IoError if one crashed.
  bool Next(MessageHeader* header, std::vector<char>* payload) {
    std::vector<pollfd> pfds;
    std::vector<size_t> which;
    for (size_t w = 0; w < fds_.size(); ++w) {
      if (fds_[w] >= 0) {
        pfds.push_back({fds_[w], POLLIN, 0});
        which.push_back(w);
      }
    }
    if (pfds.empty()) return false;
    int n = ::poll(pfds.data(), pfds.size(), 100);
    if (n <= 0) return false;
    for (size_t k = 0; k < pfds.size(); ++k) {
      if (!(pfds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const size_t w = which[k];
      if (!ReadAll(fds_[w], header, sizeof *header, /*eof_ok=*/true)) {
        Reap(w);
        return false;
      }
      payload->resize(header->bytes);
      ReadAll(fds_[w], payload->data(), payload->size(), false);
      if (header->type == MessageType::kError) {
        std::string what(payload->begin(), payload->end());
        if (what.find("OpenGL") != std::string::npos || what.find("GL") == 0) throw GlError(what);
        throw Error(what);
      }
      return true;
    }
    return false;
  }
  // Waits for every worker to exit (after all items arrived).
  void Join() {
    MessageHeader header;
    std::vector<char> payload;
    while (!done()) {
      if (Next(&header, &payload)) throw IoError("a render worker sent more items than asked");
    }
  }
  bool done() const {
    for (int fd : fds_)
      if (fd >= 0) return false;
    return true;
  }

 private:
  void Reap(size_t w) {
    ::close(fds_[w]);
    fds_[w] = -1;
    int status = 0;
    ::waitpid(pids_[w], &status, 0);
    pids_[w] = -1;
    if (WIFSIGNALED(status)) {
      throw IoError("render worker " + std::to_string(w) + " crashed (signal " +
                    std::to_string(WTERMSIG(status)) + ")");
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      throw IoError("render worker " + std::to_string(w) + " failed (exit status " +
                    std::to_string(WEXITSTATUS(status)) + ")");
    }
  }
  std::vector<pid_t> pids_;
  std::vector<int> fds_;
};

bool SameParameters(const DatasetInfo& i, const GenerateOptions& o) {
  return i.env == o.env && i.control == o.control && i.runs == o.runs && i.frames == o.frames &&
         i.size == o.size && i.seed == o.seed;
}

}  // namespace

GenerateResult GenerateDataset(const GenerateOptions& o) {
  ValidateGenerateOptions(o);
  h5::Quiet();
  GenerateResult result;
  result.path = DatasetPath(o);
  if (fs::is_directory(result.path)) {
    throw IoError("'" + result.path.string() + "' is a directory, not a data set file");
  }
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
  // Mesa's llvmpipe rasterizes on helper threads by default; the worker processes already fill
  // the cores (measured, 2 workers, pendulum: 302 frames/s without helper threads, 270 with).
  // A value set by the user is kept.
  ::setenv("LP_NUM_THREADS", "0", /*overwrite=*/0);
  const Environment prototype(o.env, o.assets_dir);
  const int nq = prototype.nq(), nv = prototype.nv(), nu = prototype.nu();
  const int R = o.runs, N = o.frames, S = o.size;
  const auto grid = StateGrid(o.env);
  const int G = int(grid.size());
  const int total_items = R + G;
  int workers = o.workers > 0 ? o.workers : int(std::max(1u, std::thread::hardware_concurrency()));
  workers = std::min(workers, R);

  // Fork the workers before the output file exists, so that no worker holds it open.
  const auto start = std::chrono::steady_clock::now();
  WorkerPool pool(WorkerJob{&o, &prototype, &grid, 0, workers, total_items});
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

  // Writer (this process): HDF5 writes and the exact statistics for ε.
  const size_t P = size_t(S) * S * 3;
  std::vector<uint64_t> sum(P, 0), sum_sq(P, 0);
  ProgressBar bar("generate " + EnvNameString(o.env) + "/" + ControlModeString(o.control),
                  int64_t(R) * N, "frames", o.progress && ::isatty(2));
  std::string gl_backend, gl_renderer;
  int done = 0, frames_done = 0;
  MessageHeader header;
  std::vector<char> payload;
  while (done < total_items) {
    if (InterruptRequested()) throw Interrupted("generation interrupted; nothing was written");
    if (!pool.Next(&header, &payload)) {
      if (pool.done()) throw IoError("the render workers stopped before finishing");
      continue;
    }
    if (header.type == MessageType::kGlInfo) {
      std::string info(payload.begin(), payload.end());
      gl_backend = info.substr(0, info.find('\n'));
      gl_renderer = info.substr(info.find('\n') + 1);
      continue;
    }
    const hsize_t i = hsize_t(header.index);
    const char* p = payload.data();
    if (header.index < R) {
      const uint8_t* images = reinterpret_cast<const uint8_t*>(p);
      const double* time = reinterpret_cast<const double*>(p + P * N);
      const double* action = time + N;
      const double* qpos = action + N * nu;
      const double* qvel = qpos + N * nq;
      if (payload.size() != P * N + sizeof(double) * N * (1 + nu + nq + nv)) {
        throw IoError("a render worker sent a malformed run");
      }
      h5::WriteSlab(d_images, H5T_NATIVE_UINT8, images, {i, 0, 0, 0, 0}, {1, hN, hS, hS, 3},
                    "images");
      h5::WriteSlab(d_time, H5T_NATIVE_DOUBLE, time, {i, 0}, {1, hN}, "time");
      h5::WriteSlab(d_action, H5T_NATIVE_DOUBLE, action, {i, 0, 0}, {1, hN, hsize_t(nu)},
                    "action");
      h5::WriteSlab(d_qpos, H5T_NATIVE_DOUBLE, qpos, {i, 0, 0}, {1, hN, hsize_t(nq)}, "qpos");
      h5::WriteSlab(d_qvel, H5T_NATIVE_DOUBLE, qvel, {i, 0, 0}, {1, hN, hsize_t(nv)}, "qvel");
      // Integer sums are exact, so ε does not depend on the order runs arrive in.
      for (int t = 0; t < N; ++t) {
        const uint8_t* f = images + t * P;
        for (size_t q = 0; q < P; ++q) {
          sum[q] += f[q];
          sum_sq[q] += uint64_t(f[q]) * f[q];
        }
      }
      frames_done += N;
      bar.Update(frames_done);
    } else {
      if (payload.size() != P + sizeof(double) * nq) {
        throw IoError("a render worker sent a malformed grid image");
      }
      const hsize_t g = i - hsize_t(R);
      h5::WriteSlab(d_grid_images, H5T_NATIVE_UINT8, p, {g, 0, 0, 0}, {1, hS, hS, 3},
                    "grid/images");
      h5::WriteSlab(d_grid_qpos, H5T_NATIVE_DOUBLE, p + P, {g, 0}, {1, hsize_t(nq)},
                    "grid/qpos");
    }
    ++done;
  }
  pool.Join();
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
  h5::WriteAttr(file, "gl_backend", gl_backend);
  h5::WriteAttr(file, "gl_renderer", gl_renderer);
  // Close every handle before the rename.
  for (h5::Id* id : {&d_images, &d_time, &d_action, &d_qpos, &d_qvel, &d_grid_images,
                     &d_grid_qpos, &g_grid, &d_mean, &d_train, &d_val, &g_split})
    id->Reset();
  if (H5Fclose(file.Release()) < 0) {
    throw IoError("cannot finish '" + out.temp_path().string() + "' (disk full?)");
  }
  // Check the finished file before it replaces anything.
  result.info = Dataset::Open(out.temp_path()).info();
  out.Commit();
  return result;
}

}  // namespace keycld
