// Session layers that every backend shares, so that the decision cadence and
// block summaries have one implementation and CPU and CUDA agree by
// construction (docs/step-semantics.md sections 10 and 11):
//
//  - CadenceLayer (decide_every > 1): records each step's appends and passes
//    them, with the step's queries and entropy, to the session below only on
//    decision steps.
//  - BlockSummaryLayer (block_summary): keeps the current partial block
//    itself and gives the session below one entry per full block, keyed by
//    the block's mean key; the session below runs at token granularity over
//    blocks, with a budget counted in blocks.
//
// Each layer validates a step completely before changing anything, so a
// rejected step leaves the whole stack as it was. Not thread-safe, like every
// SessionState.

#ifndef ENTROKV_CORE_SRC_LAYERED_SESSION_H_
#define ENTROKV_CORE_SRC_LAYERED_SESSION_H_

#include <memory>

#include "absl/functional/function_ref.h"
#include "entrokv/core/config.h"
#include "entrokv/core/session.h"

namespace entrokv::internal {

class ByteAccount;

// The configuration of the session below a BlockSummaryLayer: token
// granularity over blocks, budgets, sinks and recent windows counted in
// blocks (rounded up, so protection never shrinks).
SessionConfig BlockSummaryInnerConfig(const SessionConfig& config);

// Builds the stack `config` asks for on top of a backend session made by
// `make_inner` (called once, with the configuration of the lowest layer).
// REQUIRES: ValidateSessionConfig(config).ok().
std::unique_ptr<SessionState> CreateLayeredSession(
    const SessionConfig& config, const SessionLimits& limits,
    std::shared_ptr<ByteAccount> account,
    absl::FunctionRef<std::unique_ptr<SessionState>(const SessionConfig&,
                                                    const SessionLimits&)>
        make_inner);

}  // namespace entrokv::internal

#endif  // ENTROKV_CORE_SRC_LAYERED_SESSION_H_
