// Helpers shared by the tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <random>
#include <string>

namespace keycld::testing {

/// A fresh directory under the system temp dir, removed with its content at destruction.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("keycld-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

/// The bytes of `file` ("" if it cannot be read).
inline std::string ReadText(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Runs the shell command `cmd` (/bin/sh -c); fills `output` with its standard output and
/// returns the wait status (-1 if it could not start).
inline int RunShell(const std::string& cmd, std::string* output) {
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return -1;
  char buf[4096];
  output->clear();
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) output->append(buf, n);
  return ::pclose(pipe);
}

/// Runs the keycld CLI with `args`; returns the exit code and fills `output` (stdout+stderr).
/// `cwd`: the working directory of the command (empty = the test's).
inline int RunCli(const std::string& args, std::string* output, const std::string& cwd = "") {
  const int status = RunShell((cwd.empty() ? "" : "cd '" + cwd + "' && ") +
                                  std::string(KEYCLD_CLI_PATH) + " " + args + " 2>&1",
                              output);
  return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace keycld::testing
