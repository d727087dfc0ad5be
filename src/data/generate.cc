#include "keycld/data/generate.h"

#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "dataset_writer.h"
#include "hdf5.h"
#include "keycld/sim/offscreen_renderer.h"
#include "keycld/util/atomic_file.h"
#include "keycld/util/interrupt.h"
#include "keycld/util/progress.h"

namespace keycld {

namespace fs = std::filesystem;

void ValidateGenerateOptions(const GenerateOptions& o) {
  if (o.system) {
    o.system->CheckControlMode(o.control);
  } else {
    CheckControlMode(o.env, o.control);
  }
  if (o.runs < 1) throw InputError("--runs must be at least 1, got " + std::to_string(o.runs));
  if (o.frames < 3) {
    throw InputError("--frames must be at least 3 (central differences need 3 frames), got " +
                     std::to_string(o.frames));
  }
  // Upper bounds: the runs and frames are stored as whole arrays (time, actions, joint states
  // are allocated for every frame up front), and rendering runs at a few hundred frames/s, so
  // 10⁷ frames (400× the paper's 25,000) already take about ten hours.
  constexpr int64_t kMaxFrames = 10000000;
  if (o.runs > 1000000 || o.frames > 100000 || int64_t(o.runs) * o.frames > kMaxFrames) {
    throw InputError(
        "--runs × --frames must stay within 10,000,000 frames (runs ≤ 1,000,000, "
        "frames ≤ 100,000), got " +
        std::to_string(o.runs) + " × " + std::to_string(o.frames));
  }
  if (o.size < 8 || o.size > 1024) {
    throw InputError("--size must be in [8, 1024] pixels, got " + std::to_string(o.size));
  }
  if (o.workers < 0 || o.workers > 256) {
    throw InputError("--workers must be in [0, 256] (0 = one per core), got " +
                     std::to_string(o.workers));
  }
}

std::string GenerateSystemName(const GenerateOptions& o) {
  return o.system ? o.system->name : EnvNameString(o.env);
}

fs::path DatasetPath(const GenerateOptions& o) {
  return o.out_dir / (GenerateSystemName(o) + "-" + ControlModeString(o.control) + "-" +
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
    for (int i = job.worker; i < job.total_items; i += job.workers) {
      Item item;
      if (i < R) {
        Rng rng(o.seed, kRunStream, uint64_t(i));
        env.ResetRandom(rng);
        std::vector<double> u = SampleAction(env.system(), o.control, rng);
        env.SetAction(u);
        item.images.resize(frame_bytes * N);
        for (int t = 0; t < N; ++t) {
          env.Step();  // frame 0 is rendered after the first step (docs/method.md §7)
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
  return i.env == (o.system ? EnvName::kCustom : o.env) && i.system == GenerateSystemName(o) &&
         i.control == o.control && i.runs == o.runs && i.frames == o.frames && i.size == o.size &&
         i.seed == o.seed;
}

// An existing file with the same parameters is kept (and reported as reused) unless --force;
// one with other parameters, or that is not a data set, is refused.
bool ReuseExisting(const GenerateOptions& o, GenerateResult* result) {
  if (fs::is_directory(result->path)) {
    throw IoError("'" + result->path.string() + "' is a directory, not a data set file");
  }
  if (!fs::exists(result->path) || o.force) return false;
  Dataset existing = [&] {
    try {
      return Dataset::Open(result->path);
    } catch (const Error& e) {
      throw FormatError(std::string(e.what()) +
                        "; the existing file is not a valid data set: rerun with --force");
    }
  }();
  if (!SameParameters(existing.info(), o)) {
    throw InputError("'" + result->path.string() +
                     "' exists with other generation parameters: rerun with --force");
  }
  result->reused = true;
  result->info = existing.info();
  return true;
}

// A worker's run message: images, then time, action, qpos and qvel per frame.
void WriteRunMessage(DatasetWriter& writer, const DatasetHeader& h, hsize_t i,
                     const std::vector<char>& payload) {
  const size_t N = size_t(h.frames), P = size_t(h.size) * h.size * 3;
  if (payload.size() != P * N + sizeof(double) * N * (1 + h.nu + h.nq + h.nv)) {
    throw IoError("a render worker sent a malformed run");
  }
  const uint8_t* images = reinterpret_cast<const uint8_t*>(payload.data());
  const double* time = reinterpret_cast<const double*>(payload.data() + P * N);
  const double* action = time + N;
  const double* qpos = action + N * size_t(h.nu);
  const double* qvel = qpos + N * size_t(h.nq);
  writer.WriteRun(i, images, time, action, qpos, qvel);
}

// A state-grid image's message: the image, then its qpos.
void WriteGridMessage(DatasetWriter& writer, const DatasetHeader& h, hsize_t g,
                      const std::vector<char>& payload) {
  const size_t P = size_t(h.size) * h.size * 3;
  if (payload.size() != P + sizeof(double) * size_t(h.nq)) {
    throw IoError("a render worker sent a malformed grid image");
  }
  writer.WriteGridImage(g, reinterpret_cast<const uint8_t*>(payload.data()),
                        reinterpret_cast<const double*>(payload.data() + P));
}

}  // namespace

GenerateResult GenerateDataset(const GenerateOptions& o) {
  ValidateGenerateOptions(o);
  h5::Quiet();
  GenerateResult result;
  result.path = DatasetPath(o);
  if (ReuseExisting(o, &result)) return result;

  InterruptGuard interrupt_guard;
  // Mesa's llvmpipe rasterizes on helper threads by default; the worker processes already fill
  // the cores (measured, 2 workers, pendulum: 302 frames/s without helper threads, 270 with).
  // A value set by the user is kept.
  ::setenv("LP_NUM_THREADS", "0", /*overwrite=*/0);
  Environment prototype = o.system ? Environment(*o.system) : Environment(o.env, o.assets_dir);
  // The constraints' missing numbers measured at this size, then all of them checked on the
  // initial states (docs/systems.md): a description whose keypoints do not obey its
  // constraints is refused before anything is rendered.
  const SystemDescription resolved = prototype.ResolveConstraints(o.size);
  prototype.CheckConstraints(resolved, o.size, kConstraintTolerance);
  const std::string description = SystemToToml(resolved);
  const auto grid = StateGrid(prototype.system());
  const int R = o.runs, total_items = R + int(grid.size());
  int workers = o.workers > 0 ? o.workers : int(std::max(1u, std::thread::hardware_concurrency()));
  workers = std::min(workers, R);

  // Fork the workers before the output file exists, so that no worker holds it open.
  const auto start = std::chrono::steady_clock::now();
  WorkerPool pool(WorkerJob{&o, &prototype, &grid, 0, workers, total_items});
  AtomicFile out(result.path);
  DatasetHeader header_attrs;
  header_attrs.env = prototype.name();
  header_attrs.system = prototype.system_name();
  header_attrs.description = description;
  header_attrs.control = o.control;
  header_attrs.runs = o.runs;
  header_attrs.frames = o.frames;
  header_attrs.size = o.size;
  header_attrs.seed = o.seed;
  header_attrs.nq = prototype.nq();
  header_attrs.nv = prototype.nv();
  header_attrs.nu = prototype.nu();
  header_attrs.dt = prototype.timestep();
  header_attrs.grid_size = int(grid.size());
  DatasetWriter writer(out.temp_path(), out.target(), header_attrs);
  ProgressBar bar("generate " + GenerateSystemName(o) + "/" + ControlModeString(o.control),
                  int64_t(R) * o.frames, "frames", o.progress && ::isatty(2));
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
    try {
      if (header.index < R) {
        WriteRunMessage(writer, header_attrs, hsize_t(header.index), payload);
        frames_done += o.frames;
        bar.Update(frames_done);
      } else {
        WriteGridMessage(writer, header_attrs, hsize_t(header.index - R), payload);
      }
    } catch (const IoError& e) {
      throw IoError("data set '" + out.target().string() + "': " + e.what());
    }
    ++done;
  }
  pool.Join();
  bar.Finish();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.frames_per_second = double(R) * o.frames / result.seconds;
  writer.Finish(gl_backend, gl_renderer, MujocoVersion());
  // Check the finished file before it replaces anything.
  result.info = Dataset::Open(out.temp_path()).info();
  out.Commit();
  return result;
}

}  // namespace keycld
