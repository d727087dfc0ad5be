// Cooperative handling of Ctrl-C (SIGINT) and SIGTERM for long operations.
#pragma once

namespace keycld {

/// While alive, SIGINT, SIGTERM and SIGHUP set a flag instead of killing the process, so that long
/// work can stop at a safe point, clean up or checkpoint, and throw Interrupted. A second
/// signal more than kRepeatWindowNs after the first terminates at once (exit 128 + signal),
/// removing the temporary files of unfinished atomic writes (RegisterTemporaryFile); signals
/// within the window count as one (`timeout` sends SIGTERM to the process and to its group).
/// Nested guards share the flag.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
};

/// Signals this close together (nanoseconds) are one request.
constexpr long long kRepeatWindowNs = 1000000000;

/// Records `path` (kept alive by the caller until UnregisterTemporaryFile) for removal by a
/// forced stop; returns its slot, or -1 when all slots are taken.
int RegisterTemporaryFile(const char* path);
void UnregisterTemporaryFile(int slot);

/// True once a signal arrived under an InterruptGuard.
bool InterruptRequested();
/// Clears the flag (tests; a new command).
void ClearInterrupt();

}  // namespace keycld
