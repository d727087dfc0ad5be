// keycld train --nproc N: N local ranks of the same command, as torchrun would start them.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "keycld/util/error.h"

extern char** environ;

namespace keycld::cli {

namespace {

constexpr int kMaxRanks = 256;
volatile sig_atomic_t g_children = 0;
pid_t g_pids[kMaxRanks];

// Ctrl-C, SIGTERM, SIGHUP to the launcher reach every rank (each stops at its next step and
// rank 0 saves; a signal that also reached them from the terminal counts once).
void Forward(int sig) {
  for (int i = 0; i < g_children; ++i) ::kill(g_pids[i], sig);
}

std::vector<std::string> Environment(int rank, int n) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string v = *e;
    const std::string name = v.substr(0, v.find('='));
    if (name == "RANK" || name == "WORLD_SIZE" || name == "LOCAL_RANK" ||
        name == "LOCAL_WORLD_SIZE") {
      continue;
    }
    env.push_back(v);
  }
  env.push_back("RANK=" + std::to_string(rank));
  env.push_back("WORLD_SIZE=" + std::to_string(n));
  env.push_back("LOCAL_RANK=" + std::to_string(rank));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(n));
  return env;
}

std::vector<char*> Pointers(std::vector<std::string>& v) {
  std::vector<char*> p;
  for (auto& s : v) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

int RunLocalRanks(int n, const std::vector<std::string>& argv, bool has_dist_init,
                  bool has_threads) {
  if (n < 2 || n > kMaxRanks) {
    throw InputError("--nproc must be in [2, " + std::to_string(kMaxRanks) + "], got " +
                     std::to_string(n));
  }
  for (const char* v : {"WORLD_SIZE", "SLURM_NTASKS"}) {
    if (std::getenv(v) && std::atoi(std::getenv(v)) > 1) {
      throw InputError(std::string("--nproc starts its own ranks; ") + v +
                       " is already set by a launcher (drop --nproc, or unset it)");
    }
  }
  // The ranks' command: this one without --nproc, with a rendezvous file and, unless given,
  // an equal share of the cores as LibTorch threads.
  std::vector<std::string> child;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--nproc") {
      ++i;
      continue;
    }
    if (argv[i].rfind("--nproc=", 0) == 0) continue;
    child.push_back(argv[i]);
  }
  std::error_code ec;
  child[0] = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) throw IoError("cannot find this program's path: " + ec.message());
  std::filesystem::path dir;
  if (!has_dist_init) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "keycld-ranks-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) {
      throw IoError("cannot create a rendezvous folder: " + std::string(std::strerror(errno)));
    }
    dir = tmpl;
    child.push_back("--dist-init");
    child.push_back("file://" + (dir / "store").string());
  }
  if (!has_threads) {
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    child.push_back("--threads");
    child.push_back(std::to_string(std::max(1, cores / n)));
  }
  struct sigaction sa {
  }, old_int, old_term, old_hup;
  sa.sa_handler = Forward;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);
  int first_failure = 0;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> env = Environment(r, n), args = child;
    std::vector<char*> envp = Pointers(env), argp = Pointers(args);
    // fork + exec rather than posix_spawn: the rank asks to be terminated when the launcher
    // dies (SIGKILL to it included), so that no rank trains on as an orphan.
    const pid_t launcher = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != launcher) ::_exit(143);  // the launcher died before prctl
      ::execve(argp[0], argp.data(), envp.data());
      ::_exit(127);
    }
    if (pid < 0) {
      std::fprintf(stderr, "keycld: error: cannot start rank %d: %s\n", r, std::strerror(errno));
      first_failure = 1;
      break;
    }
    g_pids[r] = pid;
    g_children = r + 1;
  }
  // Wait for every rank. Once one has failed, the others normally stop by themselves (their
  // next collective fails); those still running after the grace period are terminated.
  const int started = g_children;
  int running = started;
  std::vector<bool> done(size_t(started), false);
  auto failed_at = std::chrono::steady_clock::time_point::max();
  bool terminated = false;
  if (first_failure && started > 0) {
    failed_at = std::chrono::steady_clock::now();
    Forward(SIGTERM);
    terminated = true;
  }
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < started; ++r) {
        if (g_pids[r] != pid || done[size_t(r)]) continue;
        done[size_t(r)] = true;
        --running;
        const int code = ExitCode(status);
        if (code != 0 && first_failure == 0) {
          first_failure = code;
          failed_at = std::chrono::steady_clock::now();
          if (running > 0 && code != 130) {  // 130: stopped by Ctrl-C, as the others will
            std::fprintf(stderr, "keycld: rank %d ended with exit code %d; stopping the others\n",
                         r, code);
          }
        }
      }
      continue;
    }
    if (pid < 0 && errno != EINTR) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto since = std::chrono::steady_clock::now() - failed_at;
    if (!terminated && since > std::chrono::seconds(60)) {
      Forward(SIGTERM);
      terminated = true;
    } else if (terminated && since > std::chrono::seconds(90)) {
      Forward(SIGKILL);
    }
  }
  g_children = 0;
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  return first_failure;
}

}  // namespace keycld::cli
