// A tensor's values as doubles, for reports, JSON and the control laws' small vectors.
#pragma once

#include <torch/types.h>

#include <vector>

namespace keycld {

/// The values of `t` (any shape, dtype and device; detached), flattened in row-major order.
inline std::vector<double> TensorValues(const torch::Tensor& t) {
  const torch::Tensor c = t.detach().to(torch::kCPU, torch::kFloat64).contiguous().flatten();
  return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

}  // namespace keycld
