// The llama2.c-style BPE tokenizer against the independent Python one, and its
// encode/decode round trip.

#include "tinyllama/tokenizer.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/eval/reference.h"
#include "tests/testing/status_matchers.h"
#include "tinyllama/evaluator.h"

namespace entrokv::tinyllama {
namespace {

using ::entrokv::tinyllama::testing::DataDirOrEmpty;
using ::entrokv::tinyllama::testing::RunReference;

TEST(TokenizerLoadTest, MissingFileIsNotFound) {
  EXPECT_STATUS_CODE(Tokenizer::Load("/nonexistent/tok512.bin", 512),
                     absl::StatusCode::kNotFound);
}

TEST(TokenizerLoadTest, RejectsTruncatedAndEmptyFiles) {
  EXPECT_STATUS_CODE(Tokenizer::FromBytes({}, 512),
                     absl::StatusCode::kInvalidArgument);
  std::vector<char> bytes(4 + 8, 0);  // max length 0, one empty record.
  EXPECT_STATUS_CODE(Tokenizer::FromBytes(bytes, 512),
                     absl::StatusCode::kInvalidArgument);
}

class TokenizerReferenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = DataDirOrEmpty();
    ENTROKV_SKIP_WITHOUT_DATA(data_);
    ASSERT_OK_AND_ASSIGN(Tokenizer t,
                         Tokenizer::Load(TokenizerPath(data_), 512));
    tokenizer_ = std::make_unique<Tokenizer>(std::move(t));
  }

  std::string data_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(TokenizerReferenceTest, KnowsTheSpecialAndBytePieces) {
  EXPECT_EQ(tokenizer_->piece(kBosId), "\n<s>\n");
  EXPECT_EQ(tokenizer_->piece(kEosId), "\n</s>\n");
  EXPECT_EQ(tokenizer_->piece(3 + 0x41), "<0x41>");
  EXPECT_EQ(tokenizer_->piece(410), " ");
}

TEST_F(TokenizerReferenceTest, HandWorkedCases) {
  // Empty text: BOS only, no dummy prefix.
  EXPECT_EQ(tokenizer_->Encode("", true), std::vector<int>{kBosId});
  EXPECT_TRUE(tokenizer_->Encode("", false).empty());
  // "\n" has no piece: dummy prefix " " (410), then byte 0x0A → id 13.
  EXPECT_EQ(tokenizer_->Encode("\n", true), (std::vector<int>{1, 410, 13}));
  // A character with a piece is one token: é (C3 A9) is id 485.
  EXPECT_EQ(tokenizer_->Encode("\xC3\xA9", false),
            (std::vector<int>{410, 485}));
  // One without falls back to its UTF-8 bytes: ü = C3 BC.
  EXPECT_EQ(tokenizer_->Encode("\xC3\xBC", false),
            (std::vector<int>{410, 0xC3 + 3, 0xBC + 3}));
}

TEST_F(TokenizerReferenceTest, SameIdsAsReferenceAndRoundTrips) {
  ENTROKV_SKIP_WITHOUT_PYTHON();
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> texts,
                       LoadStories(StoriesPath(data_), 20));
  texts.push_back("Hello,  world!\n\nTwo  spaces\tand a tab.");
  texts.push_back(" leading space, trailing space ");
  texts.push_back(
      "caf\xC3\xA9 \xC3\xBC \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80 <0x41>");
  texts.push_back("Once upon a time");
  texts.push_back("a");

  const std::string path = ::testing::TempDir() + "/tokenizer_texts.bin";
  {
    std::ofstream out(path, std::ios::binary);
    for (size_t i = 0; i < texts.size(); ++i) {
      if (i > 0) out.put('\0');
      out << texts[i];
    }
  }
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> lines,
                       RunReference(data_, "encode '" + path + "'"));
  ASSERT_EQ(lines.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int> expected;
    for (absl::string_view f : absl::StrSplit(lines[i], ' ')) {
      int id = 0;
      ASSERT_TRUE(absl::SimpleAtoi(f, &id)) << lines[i];
      expected.push_back(id);
    }
    const std::vector<int> ids = tokenizer_->Encode(texts[i], /*bos=*/true);
    EXPECT_EQ(ids, expected) << "text " << i;
    EXPECT_EQ(tokenizer_->Decode(ids), texts[i]) << "text " << i;
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace entrokv::tinyllama
