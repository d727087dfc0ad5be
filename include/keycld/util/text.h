// Small text helpers shared by error messages and reports.
#pragma once

#include <c10/util/StringUtil.h>
#include <torch/types.h>

#include <cctype>
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

/// `text` on one line, as error messages are printed: line breaks become "; ", trailing blank
/// space goes.
inline std::string OneLine(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  std::string out;
  for (char c : text) out += c == '\n' ? std::string("; ") : std::string(1, c);
  return out;
}

/// `v` with 3 significant digits ("%.3g").
inline std::string Sci(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

}  // namespace keycld
