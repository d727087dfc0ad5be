#include "keycld/util/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace keycld {

std::string FormatDuration(double s) {
  char buf[32];
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%.1fs", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%dh%02dm", int(s) / 3600, (int(s) % 3600) / 60);
  }
  return buf;
}

ProgressBar::ProgressBar(std::string label, int64_t total, std::string unit)
    : ProgressBar(std::move(label), total, std::move(unit), ::isatty(STDERR_FILENO) != 0) {}

ProgressBar::ProgressBar(std::string label, int64_t total, std::string unit, bool enabled)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      enabled_(enabled),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_ - std::chrono::seconds(1)) {}

ProgressBar::~ProgressBar() {
  if (enabled_ && !finished_) std::fputc('\n', stderr);
}

double ProgressBar::ElapsedSeconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

double ProgressBar::Rate() const {
  double t = ElapsedSeconds();
  return t > 0 ? double(done_) / t : 0.0;
}

void ProgressBar::Update(int64_t done, const std::string& suffix) {
  done_ = done;
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  Draw(suffix);
}

void ProgressBar::Finish(const std::string& suffix) {
  if (finished_) return;
  Draw(suffix);
  if (enabled_) std::fputc('\n', stderr);
  finished_ = true;
}

void ProgressBar::Draw(const std::string& suffix) {
  if (!enabled_) return;
  constexpr int kWidth = 30;
  double frac = total_ > 0 ? double(done_) / double(total_) : 1.0;
  int filled = int(frac * kWidth);
  std::string bar(filled, '#');
  bar.resize(kWidth, '-');
  double rate = Rate();
  double eta = rate > 0 ? double(total_ - done_) / rate : NAN;
  std::fprintf(stderr, "\r%s [%s] %lld/%lld %s  %.1f %s/s  ETA %s %s\x1b[K", label_.c_str(),
               bar.c_str(), static_cast<long long>(done_), static_cast<long long>(total_),
               unit_.c_str(), rate, unit_.c_str(), FormatDuration(eta).c_str(), suffix.c_str());
  std::fflush(stderr);
}

}  // namespace keycld
