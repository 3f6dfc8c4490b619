// Transparent huge pages for the parameter path's large buffers (a snapshot, the running sum):
// with THP in "madvise" mode (Debian's default) a 1 GB buffer otherwise takes 262 144 page faults
// on first touch, each zeroing 4 KiB, and streaming passes over it miss the TLB every 4 KiB.
// Advising before the first touch gives 2 MiB pages where the kernel has them.
//
// Thread-safety: a system call on caller-owned memory.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

namespace meshtrain {

// Advises MADV_HUGEPAGE over the 2 MiB-aligned part of [p, p + bytes). Buffers under 4 MiB and
// kernels without THP are left as they are; failure is harmless (ordinary pages).
inline void AdviseHugePages(void* p, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  if (p == nullptr || bytes < 2 * kHuge) return;
  const auto begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const auto end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

}  // namespace meshtrain
