// Counting heap allocations in a test: replaces every form of operator new
// and delete for the whole binary, and counts the calls the calling thread
// makes while AllocationsIn() runs. Include it in exactly one source file of
// a test binary of its own (it replaces the allocator for all of it).
//
// Every form is replaced, so that what one form allocates another may free:
// gRPC, for one, allocates with the nothrow form, and a sanitizer build
// checks that allocation and release match.

#ifndef ENTROKV_TESTS_TESTING_COUNT_ALLOCATIONS_H_
#define ENTROKV_TESTS_TESTING_COUNT_ALLOCATIONS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

// The replacements below pair operator new with free(), which GCC cannot
// tell from a mismatch at the sites it inlines.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace entrokv::testing::count_allocations_internal {

// Only the counting thread counts: other threads (a server in process,
// gRPC's) allocate on theirs.
inline thread_local bool counting = false;
inline std::atomic<int64_t> allocations{0};

inline void Count() {
  if (counting) allocations.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace entrokv::testing::count_allocations_internal

void* operator new(std::size_t size) {
  entrokv::testing::count_allocations_internal::Count();
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
void* operator new(std::size_t size, std::align_val_t align) {
  entrokv::testing::count_allocations_internal::Count();
  const std::size_t a = static_cast<std::size_t>(align);
  if (void* p = std::aligned_alloc(a, (size + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size, std::align_val_t align) {
  return operator new(size, align);
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  entrokv::testing::count_allocations_internal::Count();
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t& n) noexcept {
  return operator new(size, n);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}

namespace entrokv::testing {

// Calls of operator new on this thread while `run` runs.
template <typename Run>
int64_t AllocationsIn(Run run) {
  namespace internal = count_allocations_internal;
  const int64_t before = internal::allocations.load();
  internal::counting = true;
  run();
  internal::counting = false;
  return internal::allocations.load() - before;
}

}  // namespace entrokv::testing

#endif  // ENTROKV_TESTS_TESTING_COUNT_ALLOCATIONS_H_
