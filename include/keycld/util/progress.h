// A terminal progress bar with rate and ETA. Silent when stderr is not a terminal.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace keycld {

class ProgressBar {
 public:
  /// `total` work units named `unit` (e.g. "frames"). `enabled` defaults to isatty(stderr).
  ProgressBar(std::string label, int64_t total, std::string unit);
  ProgressBar(std::string label, int64_t total, std::string unit, bool enabled);
  ~ProgressBar();

  /// Sets the number of completed units and an optional suffix (loss values, ...).
  /// Redraws at most 10 times a second.
  void Update(int64_t done, const std::string& suffix = "");
  /// Draws the final state and ends the line.
  void Finish(const std::string& suffix = "");
  /// Completed units per second since construction.
  double Rate() const;
  double ElapsedSeconds() const;

 private:
  void Draw(const std::string& suffix);

  std::string label_, unit_;
  int64_t total_, done_ = 0;
  bool enabled_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

/// Formats seconds as "1h02m", "3m05s" or "12.3s".
std::string FormatDuration(double seconds);

}  // namespace keycld
