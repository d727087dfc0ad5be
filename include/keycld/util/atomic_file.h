// Atomic file output: write to a temporary name beside the target, then rename.
#pragma once

#include <filesystem>
#include <string_view>

namespace keycld {

/// Reserves a temporary path next to `target` (same directory, so rename(2) is atomic).
/// Commit() renames the temporary onto the target; if the object is destroyed without
/// Commit() (an exception, an interruption), the temporary is removed and the target is
/// untouched. Throws IoError if the target directory cannot be created or written.
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
};

/// Writes `text` to `file` atomically (AtomicFile). Throws IoError on failure.
void WriteTextAtomically(const std::filesystem::path& file, std::string_view text);

}  // namespace keycld
