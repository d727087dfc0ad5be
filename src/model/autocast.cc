#include "keycld/model/autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace keycld {
namespace {

// LibTorch 2.x takes the device type; 1.x has separate CPU and CUDA (gpu) functions.
#if TORCH_VERSION_MAJOR >= 2
bool IsEnabled(bool cuda) { return at::autocast::is_autocast_enabled(cuda ? at::kCUDA : at::kCPU); }
void SetEnabled(bool cuda, bool on) {
  at::autocast::set_autocast_enabled(cuda ? at::kCUDA : at::kCPU, on);
}
at::ScalarType GetDtype(bool cuda) {
  return at::autocast::get_autocast_dtype(cuda ? at::kCUDA : at::kCPU);
}
void SetDtype(bool cuda, at::ScalarType t) {
  at::autocast::set_autocast_dtype(cuda ? at::kCUDA : at::kCPU, t);
}
#else
bool IsEnabled(bool cuda) { return cuda ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled(); }
void SetEnabled(bool cuda, bool on) {
  cuda ? at::autocast::set_enabled(on) : at::autocast::set_cpu_enabled(on);
}
at::ScalarType GetDtype(bool cuda) {
  return cuda ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
void SetDtype(bool cuda, at::ScalarType t) {
  cuda ? at::autocast::set_autocast_gpu_dtype(t) : at::autocast::set_autocast_cpu_dtype(t);
}
#endif

}  // namespace

bool AutocastEnabled(const torch::Device& device) { return IsEnabled(device.is_cuda()); }

AutocastGuard::AutocastGuard(const torch::Device& device, bool enabled, at::ScalarType dtype)
    : cuda_(device.is_cuda()),
      enabled_(enabled),
      was_enabled_(IsEnabled(cuda_)),
      old_dtype_(GetDtype(cuda_)) {
  SetEnabled(cuda_, enabled);
  SetDtype(cuda_, dtype);
  if (enabled_) at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (enabled_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  SetEnabled(cuda_, was_enabled_);
  SetDtype(cuda_, old_dtype_);
}

}  // namespace keycld
