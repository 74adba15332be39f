// ParseReusing (server/raw_messages.h): the Decode stream's request parse
// reads every message as a fresh parse would, and allocates nothing once a
// stream's messages keep their shape. The same for the client library's
// message building into a request emptied by proto_convert::ClearForReuse.
// A binary of its own, because it counts calls to operator new
// (testing/count_allocations.h).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "entrokv/v1/entrokv.pb.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/convert/message_reuse.h"
#include "server/raw_messages.h"
#include "testing/count_allocations.h"

namespace entrokv::server {
namespace {

using ::google::protobuf::util::MessageDifferencer;

// The bytes as gRPC hands them over: slices of at most 8 KiB, so that the
// long fields cross slice boundaries.
grpc::ByteBuffer ToBytes(const std::string& serialized) {
  constexpr size_t kSlice = 8192;
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < serialized.size(); at += kSlice) {
    slices.emplace_back(serialized.data() + at,
                        std::min(kSlice, serialized.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// A batch message: `steps` sessions, each appending `entries` entries of
// `key_bytes` bytes with `query_bytes` of queries; `seed` varies the values.
v1::DecodeRequest Batch(int steps, int entries, int key_bytes,
                        int query_bytes, int seed) {
  v1::DecodeRequest request;
  for (int i = 0; i < steps; ++i) {
    v1::SessionStep* step = request.add_steps();
    step->set_session_id("session-" + std::to_string(i));
    step->set_step(static_cast<uint64_t>(seed * 1000 + i));
    for (int e = 0; e < entries; ++e) {
      step->mutable_append()->add_slot_ids(
          static_cast<uint64_t>(seed * 100 + e));
      step->mutable_append()->add_pinned((seed + e) % 3 == 0);
    }
    step->mutable_append()->set_keys(
        std::string(static_cast<size_t>(entries * key_bytes),
                    static_cast<char>('a' + (seed + i) % 26)));
    step->set_queries(std::string(static_cast<size_t>(query_bytes),
                                  static_cast<char>('A' + (seed + i) % 26)));
    step->set_entropy(0.25 * seed + i);
  }
  return request;
}

// `message` with each empty Append dropped: ParseReusing may leave one where
// the wire had none, which the wire reads the same.
v1::DecodeRequest WithoutEmptyAppends(v1::DecodeRequest message) {
  for (v1::SessionStep& step : *message.mutable_steps()) {
    if (step.has_append() && step.append().ByteSizeLong() == 0) {
      step.clear_append();
    }
  }
  return message;
}

TEST(ParseReuseTest, EachMessageReadsAsAFreshParse) {
  std::vector<v1::DecodeRequest> messages;
  messages.push_back(Batch(8, 1, 64, 128, 1));
  messages.push_back(Batch(3, 4, 64, 128, 2));   // Fewer steps, more entries.
  messages.push_back(Batch(12, 0, 64, 0, 3));    // No append, no queries.
  v1::DecodeRequest mixed = Batch(5, 2, 32, 16, 4);
  mixed.add_attach("a");
  mixed.add_detach("d");
  mixed.mutable_steps(1)->mutable_logits()->add_values(1.5f);
  mixed.mutable_steps(2)->clear_append();
  mixed.mutable_steps(3)->clear_entropy_source();
  messages.push_back(mixed);
  messages.push_back(v1::DecodeRequest());      // The empty message.
  messages.push_back(Batch(8, 1, 64, 128, 5));

  v1::DecodeRequest reused;
  for (size_t m = 0; m < messages.size(); ++m) {
    SCOPED_TRACE(m);
    grpc::ByteBuffer bytes = ToBytes(messages[m].SerializeAsString());
    ASSERT_TRUE(ParseReusing(&bytes, &reused).ok());
    EXPECT_TRUE(MessageDifferencer::Equals(WithoutEmptyAppends(reused),
                                           WithoutEmptyAppends(messages[m])))
        << reused.ShortDebugString();
  }
}

TEST(ParseReuseTest, AWarmStreamParsesWithoutAllocating) {
  // A batch of 64 decode steps at the 8B shape with sketches (32 layers,
  // 8 kv heads, 32 q heads, r 16, f16): 8 KiB of keys and 32 KiB of queries
  // per step.
  constexpr int kSteps = 64;
  const std::string first =
      Batch(kSteps, 1, 8192, 32768, 1).SerializeAsString();
  const std::string second =
      Batch(kSteps, 1, 8192, 32768, 2).SerializeAsString();
  grpc::ByteBuffer bytes1 = ToBytes(first);
  grpc::ByteBuffer bytes2 = ToBytes(second);

  v1::DecodeRequest reused;
  ASSERT_TRUE(ParseReusing(&bytes1, &reused).ok());
  ASSERT_TRUE(ParseReusing(&bytes2, &reused).ok());
  absl::Status status;
  const int64_t allocations = ::entrokv::testing::AllocationsIn(
      [&] { status = ParseReusing(&bytes1, &reused); });
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(allocations, 0);
  EXPECT_EQ(reused.SerializeAsString(), first);

  // Protobuf's own parse into a reused message (ParseMessage) allocates
  // each step's Append and its fields again: the cost this removes.
  v1::DecodeRequest plain;
  ASSERT_TRUE(ParseMessage(&bytes2, &plain).ok());
  absl::Status plain_status;
  const int64_t plain_allocations = ::entrokv::testing::AllocationsIn(
      [&] { plain_status = ParseMessage(&bytes1, &plain); });
  ASSERT_TRUE(plain_status.ok());
  EXPECT_GE(plain_allocations, 3 * kSteps);
}

TEST(ParseReuseTest, ABigMessageIsNotHeldForSmallOnes) {
  v1::DecodeRequest reused;
  grpc::ByteBuffer big = ToBytes(Batch(1, 4096, 1024, 0, 1).SerializeAsString());
  ASSERT_TRUE(ParseReusing(&big, &reused).ok());
  ASSERT_GE(reused.steps(0).append().keys().capacity(), size_t{4} << 20);
  grpc::ByteBuffer small = ToBytes(Batch(1, 1, 1024, 0, 2).SerializeAsString());
  ASSERT_TRUE(ParseReusing(&small, &reused).ok());
  EXPECT_EQ(reused.steps(0).append().keys().size(), 1024u);
  EXPECT_LT(reused.steps(0).append().keys().capacity(), size_t{64} << 10);
}

TEST(ParseReuseTest, AMalformedMessageIsRefusedAndTheNextReadsWhole) {
  v1::DecodeRequest reused;
  grpc::ByteBuffer good = ToBytes(Batch(4, 2, 64, 64, 1).SerializeAsString());
  ASSERT_TRUE(ParseReusing(&good, &reused).ok());
  std::string truncated = Batch(4, 2, 64, 64, 2).SerializeAsString();
  truncated.resize(truncated.size() - 3);  // Inside the last step's entropy.
  grpc::ByteBuffer bad = ToBytes(truncated);
  const absl::Status status = ParseReusing(&bad, &reused);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("DecodeRequest"), std::string::npos);
  const v1::DecodeRequest expected = Batch(2, 1, 64, 64, 3);
  grpc::ByteBuffer next = ToBytes(expected.SerializeAsString());
  ASSERT_TRUE(ParseReusing(&next, &reused).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(WithoutEmptyAppends(reused), expected));
}

// A step kept from an earlier message but not used by the last one is still
// emptied within the next message's budget: a 4 MiB step left in the pool
// by a shorter message is let go before a small one.
TEST(ParseReuseTest, StepsLeftOverFromEarlierMessagesAreBudgetedToo) {
  v1::DecodeRequest reused;
  v1::DecodeRequest two = Batch(2, 1, 1024, 0, 1);
  two.mutable_steps(0)->mutable_append()->set_keys(
      std::string(size_t{4} << 20, 'k'));  // The first step, 4 MiB.
  grpc::ByteBuffer first = ToBytes(two.SerializeAsString());
  ASSERT_TRUE(ParseReusing(&first, &reused).ok());
  // A 5 MiB message of one step keeps both steps (within its budget) and
  // uses one of them.
  grpc::ByteBuffer big =
      ToBytes(Batch(1, 5, 1 << 20, 0, 2).SerializeAsString());
  ASSERT_TRUE(ParseReusing(&big, &reused).ok());
  // Two small steps: whichever pooled steps they reuse hold no megabytes.
  grpc::ByteBuffer small = ToBytes(Batch(2, 1, 1024, 0, 3).SerializeAsString());
  ASSERT_TRUE(ParseReusing(&small, &reused).ok());
  for (const v1::SessionStep& step : reused.steps()) {
    EXPECT_LT(step.append().keys().capacity(), size_t{64} << 10);
  }
}

// Builds into `out` what Batch(steps, 1, key_bytes, query_bytes, seed)
// holds, field by field as the client library's Session::Impl::Prepare
// builds a step (appending to the strings and repeated fields).
void BuildLikeTheClient(int steps, int key_bytes, int query_bytes, int seed,
                        v1::DecodeRequest* out) {
  for (int i = 0; i < steps; ++i) {
    v1::SessionStep* step = out->add_steps();
    step->set_session_id("session-" + std::to_string(i));
    step->set_step(static_cast<uint64_t>(seed * 1000 + i));
    v1::Append* append = step->mutable_append();
    append->add_slot_ids(static_cast<uint64_t>(seed * 100));
    append->add_pinned(seed % 3 == 0);
    append->mutable_keys()->append(static_cast<size_t>(key_bytes),
                                   static_cast<char>('a' + (seed + i) % 26));
    step->mutable_queries()->append(static_cast<size_t>(query_bytes),
                                    static_cast<char>('A' + (seed + i) % 26));
    step->set_entropy(0.25 * seed + i);
  }
}

TEST(ClearForReuseTest, AWarmRequestIsBuiltWithoutAllocatingAndAsAFreshOne) {
  constexpr int kSteps = 64;
  v1::DecodeRequest reused;
  // Two messages warm it; the client's budget is the last message's size.
  BuildLikeTheClient(kSteps, 8192, 32768, 1, &reused);
  proto_convert::ClearForReuse(reused.ByteSizeLong(), &reused);
  EXPECT_EQ(reused.ByteSizeLong(), 0u);
  EXPECT_EQ(reused.steps_size(), 0);
  BuildLikeTheClient(kSteps, 8192, 32768, 2, &reused);
  const size_t budget = reused.ByteSizeLong();
  EXPECT_EQ(::entrokv::testing::AllocationsIn([&] {
              proto_convert::ClearForReuse(budget, &reused);
              BuildLikeTheClient(kSteps, 8192, 32768, 3, &reused);
            }),
            0);
  EXPECT_EQ(reused.SerializeAsString(),
            Batch(kSteps, 1, 8192, 32768, 3).SerializeAsString());

  // Fewer steps, then more: the message reads as a fresh one either way.
  proto_convert::ClearForReuse(reused.ByteSizeLong(), &reused);
  BuildLikeTheClient(kSteps / 2, 8192, 32768, 4, &reused);
  EXPECT_EQ(reused.SerializeAsString(),
            Batch(kSteps / 2, 1, 8192, 32768, 4).SerializeAsString());
  proto_convert::ClearForReuse(reused.ByteSizeLong(), &reused);
  BuildLikeTheClient(kSteps + 3, 8192, 32768, 5, &reused);
  EXPECT_EQ(reused.SerializeAsString(),
            Batch(kSteps + 3, 1, 8192, 32768, 5).SerializeAsString());
}

TEST(ClearForReuseTest, WhatIsKeptStaysWithinTheBudget) {
  v1::DecodeRequest reused;
  BuildLikeTheClient(4, 1 << 20, 0, 1, &reused);  // 4 MiB of keys.
  proto_convert::ClearForReuse(size_t{64} << 10, &reused);
  BuildLikeTheClient(4, 1024, 0, 2, &reused);
  size_t held = 0;
  for (const v1::SessionStep& step : reused.steps()) {
    held += step.append().keys().capacity();
  }
  EXPECT_LT(held, size_t{64} << 10);
  EXPECT_EQ(reused.SerializeAsString(),
            Batch(4, 1, 1024, 0, 2).SerializeAsString());
}

// After a prefill chunk, each step's keys had grown to the chunk's size.
// Kept, those would take the budget of the decode messages that follow, and
// the steps left without it would allocate again at every message.
TEST(ClearForReuseTest, APrefillChunkIsNotKeptForTheDecodeStepsAfterIt) {
  constexpr int kSteps = 64;
  v1::DecodeRequest reused;
  BuildLikeTheClient(kSteps, 8 * 1024, 256, 1, &reused);  // 8 entries each.
  for (int seed = 2; seed < 4; ++seed) {  // The first decode messages.
    proto_convert::ClearForReuse(reused.ByteSizeLong(), &reused);
    BuildLikeTheClient(kSteps, 1024, 256, seed, &reused);
  }
  EXPECT_EQ(::entrokv::testing::AllocationsIn([&] {
              for (int seed = 4; seed < 8; ++seed) {
                proto_convert::ClearForReuse(reused.ByteSizeLong(), &reused);
                BuildLikeTheClient(kSteps, 1024, 256, seed, &reused);
              }
            }),
            0);
  EXPECT_EQ(reused.SerializeAsString(),
            Batch(kSteps, 1, 1024, 256, 7).SerializeAsString());
}

}  // namespace
}  // namespace entrokv::server
