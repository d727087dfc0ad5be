#include "keycld/util/interrupt.h"

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <mutex>

namespace keycld {

namespace {
std::atomic<bool> g_requested{false};
std::mutex g_mutex;
int g_depth = 0;
struct sigaction g_old_int, g_old_term, g_old_hup;

void Handler(int sig) {
  if (g_requested.exchange(true)) std::_Exit(128 + sig);
}
}  // namespace

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
