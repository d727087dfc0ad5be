#include "keycld/util/allocator.h"

#include <malloc.h>

namespace keycld {

bool TuneAllocatorForTraining() {
#if defined(__GLIBC__)
  bool ok = mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024) == 1;
  ok = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 && ok;
  ok = mallopt(M_TOP_PAD, 256 * 1024 * 1024) == 1 && ok;
  // Blocks above the threshold's 32 MiB cap (a [50, 96, 64, 64] float activation is 79 MB)
  // would still be mmap'ed and faulted in on every step: serve them from the heap too.
  ok = mallopt(M_MMAP_MAX, 0) == 1 && ok;
  return ok;
#else
  return false;
#endif
}

}  // namespace keycld
