// Atomic file output: write to a temporary name beside the target, then rename.
#pragma once

#include <filesystem>
#include <string_view>

namespace keycld {

/// Reserves a temporary path next to `target` (same directory, so rename(2) is atomic).
/// Commit() renames the temporary onto the target; if the object is destroyed without
/// Commit() (an exception, an interruption), the temporary is removed and the target is
/// untouched; if a forced stop (a second Ctrl-C) ends the process, the interrupt handler removes
/// it. Creating one also removes stale temporaries in that directory (RemoveStaleTemporaries).
/// Throws IoError if the target directory cannot be created or written.
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path target);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Where to write the content before Commit().
  const std::filesystem::path& temp_path() const { return temp_; }
  const std::filesystem::path& target() const { return target_; }
  /// fsyncs the temporary and renames it onto the target. Throws IoError on failure.
  void Commit();

 private:
  std::filesystem::path target_;
  std::filesystem::path temp_;
  bool committed_ = false;
  int slot_ = -1;  // RegisterTemporaryFile
};

/// Removes the temporaries ".keycld-<pid>-<n>.tmp" in `dir` whose writing process no longer
/// exists (killed with SIGKILL, or by a power cut); errors are ignored.
void RemoveStaleTemporaries(const std::filesystem::path& dir);

/// Writes `bytes` to `file` atomically (AtomicFile): the content goes to the temporary with
/// write(2), is fsynced and renamed. On any failure (a full disk, a write error) throws IoError
/// "cannot write '<file>': <reason>" (WriteFailure), the temporary is removed and an existing
/// `file` is left as it was.
void WriteFileAtomically(const std::filesystem::path& file, std::string_view bytes);
/// Copies the file `from` to `to` atomically (same guarantees and errors as
/// WriteFileAtomically); IoError "cannot read '<from>': ..." if `from` cannot be read.
void CopyFileAtomically(const std::filesystem::path& from, const std::filesystem::path& to);
/// Same as WriteFileAtomically, for text.
void WriteTextAtomically(const std::filesystem::path& file, std::string_view text);

/// "cannot write '<file>': <strerror(err)>", lower-cased the way the CLI prints it (e.g.
/// "cannot write 'runs/a/metrics.jsonl': no space left on device").
std::string WriteFailure(const std::filesystem::path& file, int err);

/// Writes all of `bytes` to the open descriptor `fd` (retrying short writes and EINTR).
/// Returns 0, or the errno of the failed write.
int WriteAll(int fd, std::string_view bytes);

}  // namespace keycld
