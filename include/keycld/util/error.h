// Typed errors of keycld. Every message names the file, field or option involved and the
// expected value, so that the CLI can print it as one line and exit non-zero.
#pragma once

#include <cctype>
#include <cstring>
#include <stdexcept>
#include <string>

namespace keycld {

/// strerror(err) in lower case, as keycld's messages print it ("no space left on device").
inline std::string ErrnoText(int err) {
  std::string text = std::strerror(err);
  if (!text.empty()) text[0] = char(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

/// Base of all keycld errors.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A command-line option, config value or API argument is out of its valid range.
class InputError : public Error {
 public:
  using Error::Error;
};

/// A file exists but is not what was expected (truncated, foreign, wrong version or shape).
class FormatError : public Error {
 public:
  using Error::Error;
};

/// Reading or writing a file failed (missing, unwritable, disk full).
class IoError : public Error {
 public:
  using Error::Error;
};

/// No usable OpenGL backend for headless rendering.
class GlError : public Error {
 public:
  using Error::Error;
};

/// The user interrupted a long operation (SIGINT / SIGTERM).
class Interrupted : public Error {
 public:
  using Error::Error;
};

/// A numerical computation failed: non-finite values, or an adaptive integrator exceeded its
/// step budget or could not meet its tolerance.
class NumericalError : public Error {
 public:
  using Error::Error;
};

}  // namespace keycld
