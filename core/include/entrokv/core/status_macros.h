// Thin Status propagation macros. Debian's Abseil (20220623) ships no
// RETURN_IF_ERROR / ASSIGN_OR_RETURN, so entrokv defines its own once, here.
//
// ENTROKV_RETURN_IF_ERROR(expr): evaluates `expr` (an absl::Status) and returns
// it from the enclosing function when it is not OK.
// ENTROKV_ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (an absl::StatusOr<T>),
// returns its status when not OK, else move-assigns its value to `lhs`
// (`lhs` may be a declaration such as `auto x`).

#ifndef ENTROKV_CORE_STATUS_MACROS_H_
#define ENTROKV_CORE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ENTROKV_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::absl::Status entrokv_status_ = (expr);           \
    if (!entrokv_status_.ok()) return entrokv_status_; \
  } while (0)

#define ENTROKV_STATUS_CONCAT_INNER_(a, b) a##b
#define ENTROKV_STATUS_CONCAT_(a, b) ENTROKV_STATUS_CONCAT_INNER_(a, b)

#define ENTROKV_ASSIGN_OR_RETURN(lhs, expr) \
  ENTROKV_ASSIGN_OR_RETURN_IMPL_(           \
      ENTROKV_STATUS_CONCAT_(entrokv_statusor_, __LINE__), lhs, expr)

#define ENTROKV_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return std::move(tmp).status();       \
  lhs = std::move(tmp).value()

#endif  // ENTROKV_CORE_STATUS_MACROS_H_
