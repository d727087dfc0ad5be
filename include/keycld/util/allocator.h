// Tuning of the C library's memory allocator for training on the CPU.
#pragma once

namespace keycld {

/// Keeps freed memory in the process instead of returning it to the kernel: a training step
/// allocates and frees the same large activation buffers (tens of MB) every time, and glibc's
/// defaults hand them back and fault the pages in again, which on 2 cores cost more than the
/// arithmetic (measured: paper-setting step 2.1 s → 0.87 s, CPU preset 0.24 s → 0.07 s;
/// docs/benchmarks.md). Sets glibc's mmap threshold to its maximum (32 MiB), serves larger
/// blocks from the heap as well (no mmap; paper-setting run of 7 steps: 486k → 339k page
/// faults, peak RSS 1.54 → 1.47 GB), disables heap trimming and grows the heap in 256 MiB steps. Idempotent; returns false (and changes nothing
/// it could not) when the C library refuses a setting. Call once at program start.
bool TuneAllocatorForTraining();

}  // namespace keycld
