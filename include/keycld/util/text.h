// Small text helpers shared by error messages and reports.
#pragma once

#include <c10/util/StringUtil.h>
#include <torch/types.h>

#include <cstdio>
#include <string>

namespace keycld {

/// "[2, 3, 4]" for a tensor's shape, "undefined" for an undefined tensor (c10::str).
inline std::string ShapeText(const torch::Tensor& t) {
  return t.defined() ? c10::str(t.sizes()) : std::string("undefined");
}

/// `v` with `digits` decimals ("%.*f").
inline std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

/// `v` with 3 significant digits ("%.3g").
inline std::string Sci(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

}  // namespace keycld
