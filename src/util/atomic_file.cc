#include "keycld/util/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <system_error>

#include "keycld/util/error.h"

namespace keycld {

namespace fs = std::filesystem;

AtomicFile::AtomicFile(fs::path target) : target_(std::move(target)) {
  fs::path dir = target_.parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw IoError("cannot create output directory '" + dir.string() + "': " + ec.message());
  }
  std::random_device rd;
  if (target_.filename().empty() || fs::is_directory(target_)) {
    throw IoError("'" + target_.string() + "' is a directory, not a file name");
  }
  temp_ = dir / (".keycld-" + std::to_string(::getpid()) + "-" + std::to_string(rd() % 100000) +
                 ".tmp");  // LibTorch archives need a non-empty stem
  // Probe that the directory is writable before any long work starts.
  int fd = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) {
    throw IoError("cannot write in output directory '" + dir.string() +
                  "': " + std::strerror(errno));
  }
  ::close(fd);
}

AtomicFile::~AtomicFile() {
  if (!committed_) {
    std::error_code ec;
    fs::remove(temp_, ec);
  }
}

void AtomicFile::Commit() {
  int fd = ::open(temp_.c_str(), O_RDONLY);
  if (fd < 0 || ::fsync(fd) != 0) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    throw IoError("cannot flush '" + temp_.string() + "': " + std::strerror(err));
  }
  ::close(fd);
  std::error_code ec;
  fs::rename(temp_, target_, ec);
  if (ec) {
    throw IoError("cannot move '" + temp_.string() + "' to '" + target_.string() +
                  "': " + ec.message());
  }
  committed_ = true;
}

void WriteTextAtomically(const fs::path& file, std::string_view text) {
  AtomicFile out(file);
  {
    std::ofstream f(out.temp_path(), std::ios::binary);
    f.write(text.data(), std::streamsize(text.size()));
    f.flush();
    if (!f) throw IoError("cannot write '" + file.string() + "'");
  }
  out.Commit();
}

}  // namespace keycld
