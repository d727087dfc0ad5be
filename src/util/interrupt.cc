#include "keycld/util/interrupt.h"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <mutex>

namespace keycld {

namespace {
std::atomic<bool> g_requested{false};
std::atomic<int64_t> g_first_ns{0};
std::mutex g_mutex;
int g_depth = 0;
struct sigaction g_old_int, g_old_term, g_old_hup;

// Temporary files of unfinished atomic writes, removed if a second signal ends the process.
constexpr int kSlots = 64;
std::atomic<const char*> g_temporaries[kSlots];

int64_t MonotonicNs() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);  // async-signal-safe
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

void Say(const char* text) {
  size_t n = 0;
  while (text[n] != '\0') ++n;
  ssize_t ignored = ::write(2, text, n);
  (void)ignored;
}

void Handler(int sig) {
  const int64_t now = MonotonicNs();
  if (!g_requested.exchange(true)) {
    g_first_ns.store(now);
    return;
  }
  // The same signal delivered twice at once (`timeout` signals the process and its group)
  // is one request; a second one a moment later (Ctrl-C again) ends the process now.
  if (now - g_first_ns.load() < kRepeatWindowNs) return;
  for (auto& slot : g_temporaries) {
    if (const char* path = slot.load()) ::unlink(path);
  }
  Say("keycld: interrupted again: stopped at once (unfinished outputs removed; a training run "
      "resumes from its last checkpoint)\n");
  std::_Exit(128 + sig);
}
}  // namespace

int RegisterTemporaryFile(const char* path) {
  for (int i = 0; i < kSlots; ++i) {
    const char* expected = nullptr;
    if (g_temporaries[i].compare_exchange_strong(expected, path)) return i;
  }
  return -1;  // more than kSlots at once: that one is not removed on a forced stop
}

void UnregisterTemporaryFile(int slot) {
  if (slot >= 0 && slot < kSlots) g_temporaries[slot].store(nullptr);
}

InterruptGuard::InterruptGuard() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_depth++ == 0) {
    struct sigaction sa {};
    sa.sa_handler = Handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &g_old_int);
    sigaction(SIGTERM, &sa, &g_old_term);
    sigaction(SIGHUP, &sa, &g_old_hup);
  }
}

InterruptGuard::~InterruptGuard() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (--g_depth == 0) {
    sigaction(SIGINT, &g_old_int, nullptr);
    sigaction(SIGTERM, &g_old_term, nullptr);
    sigaction(SIGHUP, &g_old_hup, nullptr);
  }
}

bool InterruptRequested() { return g_requested.load(std::memory_order_relaxed); }
void ClearInterrupt() { g_requested.store(false); }

}  // namespace keycld
