#include "keycld/util/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <system_error>

#include "keycld/util/error.h"
#include "keycld/util/interrupt.h"

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
  slot_ = RegisterTemporaryFile(temp_.c_str());
  RemoveStaleTemporaries(dir);
}

AtomicFile::~AtomicFile() {
  UnregisterTemporaryFile(slot_);
  if (!committed_) {
    std::error_code ec;
    fs::remove(temp_, ec);
  }
}

void RemoveStaleTemporaries(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    long pid = 0;
    int n = 0;
    if (std::sscanf(name.c_str(), ".keycld-%ld-%*d.tmp%n", &pid, &n) != 1 ||
        size_t(n) != name.size() || pid <= 0) {
      continue;
    }
    // The writer is gone (killed before it could remove its temporary).
    if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
}

void AtomicFile::Commit() {
  int fd = ::open(temp_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    throw IoError(WriteFailure(target_, err));
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

std::string WriteFailure(const fs::path& file, int err) {
  return "cannot write '" + file.string() + "': " + ErrnoText(err);
}

int WriteAll(int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    done += size_t(n);
  }
  return 0;
}

void WriteFileAtomically(const fs::path& file, std::string_view bytes) {
  AtomicFile out(file);
  const int fd = ::open(out.temp_path().c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) throw IoError(WriteFailure(file, errno));
  int err = WriteAll(fd, bytes);
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) throw IoError(WriteFailure(file, err));
  out.Commit();
}

void CopyFileAtomically(const fs::path& from, const fs::path& to) {
  std::ifstream in(from, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.is_open() || in.bad()) throw IoError("cannot read '" + from.string() + "'");
  WriteFileAtomically(to, bytes);
}

void WriteTextAtomically(const fs::path& file, std::string_view text) {
  WriteFileAtomically(file, text);
}

}  // namespace keycld
