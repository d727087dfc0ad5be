// Cooperative handling of Ctrl-C (SIGINT) and SIGTERM for long operations.
#pragma once

namespace keycld {

/// While alive, SIGINT, SIGTERM and SIGHUP set a flag instead of killing the process, so that long
/// work can stop at a safe point, clean up or checkpoint, and throw Interrupted. A second
/// signal while the flag is set terminates at once. Nested guards share the flag.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
};

/// True once a signal arrived under an InterruptGuard.
bool InterruptRequested();
/// Clears the flag (tests; a new command).
void ClearInterrupt();

}  // namespace keycld
