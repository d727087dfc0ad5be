// Mixed precision for the convolutional networks (`--precision bf16`): LibTorch's autocast,
// switched per device type, the same on LibTorch 1.x and 2.x.
#pragma once

#include <ATen/ATen.h>
#include <torch/types.h>

namespace keycld {

/// Whether LibTorch's autocast is on for `device`'s type (CPU or CUDA) in this thread.
bool AutocastEnabled(const torch::Device& device);

/// Turns autocast on (with `dtype`) or off for `device`'s type (CPU or CUDA) for the guard's
/// lifetime, then restores the previous state. Thread-local, like autocast itself.
class AutocastGuard {
 public:
  AutocastGuard(const torch::Device& device, bool enabled, at::ScalarType dtype = at::kBFloat16);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool cuda_, enabled_, was_enabled_;
  at::ScalarType old_dtype_;
};

}  // namespace keycld
