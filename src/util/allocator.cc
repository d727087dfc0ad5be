#include "keycld/util/allocator.h"

#include <malloc.h>

namespace keycld {

bool TuneAllocatorForTraining() {
#if defined(__GLIBC__)
  bool ok = mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024) == 1;
  ok = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 && ok;
  ok = mallopt(M_TOP_PAD, 256 * 1024 * 1024) == 1 && ok;
  return ok;
#else
  return false;
#endif
}

}  // namespace keycld
