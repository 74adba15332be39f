// Makes Debian's uninstrumented absl::Mutex and absl::Notification visible to
// ThreadSanitizer (scripts/sanitize.sh tsan preloads this library).
//
// Abseil's Mutex is built on its own atomics and futex calls; compiled
// without -fsanitize=thread, nothing it orders is seen by TSan, so every
// member that an absl::Mutex guards is reported as a race between its
// lockers. Suppressing those reports would hide real races in the same code.
// Instead this library interposes the exported entry points the project calls
// (directly or through absl::MutexLock) and tells TSan what they order:
// acquiring returns after __tsan_acquire(mu), releasing starts with
// __tsan_release(mu); waits that unlock and relock inside Abseil (Await,
// CondVar::Wait) do both; Notify() releases and a wait that saw the
// notification acquires. Reader locks are treated as writer locks (a little
// more ordering than there is, never less). Each wrapper forwards to the real
// function (dlsym(RTLD_NEXT)).
//
// Built by sanitize.sh with the system compiler, not instrumented itself; in
// a process without TSan the annotations are skipped.

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace {

using Annotate = void (*)(void*);

Annotate Lookup(const char* name) {
  return reinterpret_cast<Annotate>(dlsym(RTLD_DEFAULT, name));
}

void Acquire(const void* address) {
  static const Annotate acquire = Lookup("__tsan_acquire");
  if (acquire != nullptr) acquire(const_cast<void*>(address));
}

void Release(const void* address) {
  static const Annotate release = Lookup("__tsan_release");
  if (release != nullptr) release(const_cast<void*>(address));
}

template <typename Function>
Function Real(const char* symbol) {
  void* real = dlsym(RTLD_NEXT, symbol);
  if (real == nullptr) {
    std::fprintf(stderr, "absl_tsan_shim: %s not found\n", symbol);
    std::abort();
  }
  return reinterpret_cast<Function>(real);
}

// The Notification's flag lies after its Mutex (absl/synchronization/
// notification.h); HasBeenNotifiedInternal() is given the flag's address.
const void* FlagOf(const absl::Notification* n) {
  return reinterpret_cast<const char*>(n) + sizeof(absl::Mutex);
}

}  // namespace

using absl::Condition;
using absl::CondVar;
using absl::Duration;
using absl::Mutex;
using absl::Notification;
using absl::Time;

// Wrappers, one per exported symbol (Itanium mangling of absl::debian3::...).
#define ENTROKV_REAL(type, symbol) static const auto real = Real<type>(symbol)

extern "C" {

void _ZN4absl7debian35Mutex4LockEv(Mutex* mu) {
  ENTROKV_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex4LockEv");
  real(mu);
  Acquire(mu);
}

void _ZN4absl7debian35Mutex10ReaderLockEv(Mutex* mu) {
  ENTROKV_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex10ReaderLockEv");
  real(mu);
  Acquire(mu);
}

bool _ZN4absl7debian35Mutex7TryLockEv(Mutex* mu) {
  ENTROKV_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex7TryLockEv");
  const bool locked = real(mu);
  if (locked) Acquire(mu);
  return locked;
}

bool _ZN4absl7debian35Mutex13ReaderTryLockEv(Mutex* mu) {
  ENTROKV_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex13ReaderTryLockEv");
  const bool locked = real(mu);
  if (locked) Acquire(mu);
  return locked;
}

void _ZN4absl7debian35Mutex6UnlockEv(Mutex* mu) {
  ENTROKV_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex6UnlockEv");
  Release(mu);
  real(mu);
}

void _ZN4absl7debian35Mutex12ReaderUnlockEv(Mutex* mu) {
  ENTROKV_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex12ReaderUnlockEv");
  Release(mu);
  real(mu);
}

void _ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE(Mutex* mu,
                                                       const Condition& c) {
  ENTROKV_REAL(void (*)(Mutex*, const Condition&),
               "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  real(mu, c);
  Acquire(mu);
}

bool _ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(
    Mutex* mu, const Condition& c, Duration timeout) {
  ENTROKV_REAL(
      bool (*)(Mutex*, const Condition&, Duration),
      "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_"
      "8DurationE");
  const bool met = real(mu, c, timeout);
  Acquire(mu);  // Held on return either way.
  return met;
}

bool _ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(
    Mutex* mu, const Condition& c, Time deadline) {
  ENTROKV_REAL(
      bool (*)(Mutex*, const Condition&, Time),
      "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_"
      "4TimeE");
  const bool met = real(mu, c, deadline);
  Acquire(mu);
  return met;
}

void _ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE(Mutex* mu,
                                                    const Condition& c) {
  ENTROKV_REAL(void (*)(Mutex*, const Condition&),
               "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  Release(mu);
  real(mu, c);
  Acquire(mu);
}

bool _ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE(
    Mutex* mu, const Condition& c, Duration timeout) {
  ENTROKV_REAL(bool (*)(Mutex*, const Condition&, Duration),
               "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_"
               "8DurationE");
  Release(mu);
  const bool met = real(mu, c, timeout);
  Acquire(mu);
  return met;
}

bool _ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE(
    Mutex* mu, const Condition& c, Time deadline) {
  ENTROKV_REAL(bool (*)(Mutex*, const Condition&, Time),
               "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_"
               "4TimeE");
  Release(mu);
  const bool met = real(mu, c, deadline);
  Acquire(mu);
  return met;
}

void _ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(CondVar* cv, Mutex* mu) {
  ENTROKV_REAL(void (*)(CondVar*, Mutex*),
               "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  Release(mu);
  real(cv, mu);
  Acquire(mu);
}

bool _ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(
    CondVar* cv, Mutex* mu, Duration timeout) {
  ENTROKV_REAL(
      bool (*)(CondVar*, Mutex*, Duration),
      "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Release(mu);
  const bool timed_out = real(cv, mu, timeout);
  Acquire(mu);
  return timed_out;
}

void _ZN4absl7debian312Notification6NotifyEv(Notification* n) {
  ENTROKV_REAL(void (*)(Notification*),
               "_ZN4absl7debian312Notification6NotifyEv");
  Release(n);
  Release(FlagOf(n));
  real(n);
}

void _ZNK4absl7debian312Notification19WaitForNotificationEv(
    const Notification* n) {
  ENTROKV_REAL(void (*)(const Notification*),
               "_ZNK4absl7debian312Notification19WaitForNotificationEv");
  real(n);
  Acquire(n);
}

bool _ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE(
    const Notification* n, Duration timeout) {
  ENTROKV_REAL(
      bool (*)(const Notification*, Duration),
      "_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_"
      "8DurationE");
  const bool notified = real(n, timeout);
  if (notified) Acquire(n);
  return notified;
}

bool _ZN4absl7debian312Notification23HasBeenNotifiedInternalEPKSt6atomicIbE(
    const std::atomic<bool>* flag) {
  ENTROKV_REAL(
      bool (*)(const std::atomic<bool>*),
      "_ZN4absl7debian312Notification23HasBeenNotifiedInternalEPKSt6atomicIbE");
  const bool notified = real(flag);
  if (notified) Acquire(flag);
  return notified;
}

}  // extern "C"
