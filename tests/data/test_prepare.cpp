// Corpus preparation end to end on a small synthetic corpus.
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "data/prepare.h"
#include "data/shard.h"
#include "data/test_util.h"
#include "data/tokenizer.h"

namespace boostlm {
namespace {

using test::expect_error;
using test::TempDir;

TEST(SplitDocuments, BlankLinesSeparateDocuments) {
  EXPECT_EQ(split_documents("a\nb\n\n  \t\nc\r\n\r\nd"),
            (std::vector<std::string>{"a\nb", "c", "d"}));
  EXPECT_EQ(split_documents("\n\n one \n"), (std::vector<std::string>{" one "}));
  EXPECT_TRUE(split_documents(" \n\n").empty());
}

PrepareOptions small_options(const TempDir& dir, const std::string& out) {
  // 2 files of 15 and 25 documents: 40 documents, so val_fraction 0.1 gives 4 val documents.
  const std::string first = dir.file("first.txt");
  const std::string second = dir.file("second.txt");
  if (!std::filesystem::exists(first)) {
    test::write_bytes(first, test::synthetic_text(11, 15, 8));
    test::write_bytes(second, "Ünïcödé header\n\n" + test::synthetic_text(12, 24, 8));
  }
  PrepareOptions options;
  options.input_files = {first, second};
  options.output_dir = dir.file(out);
  options.vocab_size = 350;
  options.val_fraction = 0.1;
  options.seed = 5;
  return options;
}

TEST(Prepare, WritesTokenizerShardsAndMeta) {
  TempDir dir;
  const PrepareOptions options = small_options(dir, "out");
  const PrepareSummary summary = prepare_corpus(options);
  EXPECT_TRUE(summary.trained_tokenizer);
  EXPECT_EQ(summary.vocab_size, 350);
  EXPECT_EQ(summary.val_documents, 4);
  EXPECT_EQ(summary.train_documents, 36);

  const Tokenizer tokenizer = Tokenizer::load(dir.file("out/tokenizer.model"));
  const std::vector<int32_t> train = read_shard(dir.file("out/train.bin"));
  const std::vector<int32_t> val = read_shard(dir.file("out/val.bin"));
  EXPECT_EQ(static_cast<int64_t>(train.size()), summary.train_tokens);
  EXPECT_EQ(static_cast<int64_t>(val.size()), summary.val_tokens);
  check_tokens_below(train, summary.vocab_size, "train.bin");
  check_tokens_below(val, summary.vocab_size, "val.bin");
  // One EOS closes every document and nothing else encodes to EOS.
  EXPECT_EQ(std::count(train.begin(), train.end(), tokenizer.eos_id()), 36);
  EXPECT_EQ(std::count(val.begin(), val.end(), tokenizer.eos_id()), 4);
  EXPECT_EQ(train.back(), tokenizer.eos_id());

  // Decoding the shards gives back the documents, in some order, exactly.
  std::string all_text =
      test::read_bytes(options.input_files[0]) + test::read_bytes(options.input_files[1]);
  const std::vector<int32_t> first_document(val.begin(),
                                            std::find(val.begin(), val.end(), tokenizer.eos_id()));
  const std::string decoded = tokenizer.decode(first_document);
  EXPECT_FALSE(decoded.empty());
  EXPECT_NE(all_text.find(decoded + "\n\n"), std::string::npos) << decoded;

  const auto meta = nlohmann::json::parse(test::read_bytes(dir.file("out/meta.json")));
  EXPECT_EQ(meta["vocab_size"], 350);
  EXPECT_EQ(meta["tokenizer"], "tokenizer.model");
  EXPECT_EQ(meta["train"]["tokens"], summary.train_tokens);
  EXPECT_EQ(meta["val"]["tokens"], summary.val_tokens);
  EXPECT_EQ(meta["shard_version"], 1);
  ASSERT_EQ(meta["inputs"].size(), 2u);
  EXPECT_EQ(meta["inputs"][0]["documents"], 15);
  EXPECT_EQ(meta["inputs"][1]["documents"], 25);
}

TEST(Prepare, IsDeterministicAndReusesAGivenTokenizer) {
  TempDir dir;
  PrepareOptions options = small_options(dir, "one");
  prepare_corpus(options);
  options.output_dir = dir.file("two");
  prepare_corpus(options);
  for (const char* name : {"tokenizer.model", "train.bin", "val.bin"}) {
    EXPECT_EQ(test::read_bytes(dir.file(std::string("one/") + name)),
              test::read_bytes(dir.file(std::string("two/") + name)))
        << name;
  }
  options.output_dir = dir.file("three");
  options.tokenizer_path = dir.file("one/tokenizer.model");
  options.vocab_size = 999;  // ignored: the given tokenizer decides
  const PrepareSummary summary = prepare_corpus(options);
  EXPECT_FALSE(summary.trained_tokenizer);
  EXPECT_EQ(summary.vocab_size, 350);
  EXPECT_EQ(test::read_bytes(dir.file("three/train.bin")),
            test::read_bytes(dir.file("one/train.bin")));
}

// meta.json records which tokenizer made the shards; another tokenizer of the same vocabulary size
// (trained on other text) is told apart, whatever the directory, and check_same_tokenizer
// refuses the pair naming both unless allowed.
TEST(Prepare, RecordsTheTokenizersIdentity) {
  TempDir dir;
  PrepareOptions options = small_options(dir, "one");
  prepare_corpus(options);
  const auto meta = nlohmann::json::parse(test::read_bytes(dir.file("one/meta.json")));
  const TokenizerIdentity one = prepared_tokenizer(dir.file("one"));
  EXPECT_EQ(meta["tokenizer_hash"], one.hash);
  EXPECT_EQ(one.hash, tokenizer_identity(dir.file("one/tokenizer.model")).hash);
  EXPECT_EQ(one.hash.size(), 16u);

  options.output_dir = dir.file("other");  // another text: another tokenizer of 350 tokens
  options.input_files = {dir.file("third.txt")};
  test::write_bytes(options.input_files[0], test::synthetic_text(31, 40, 8));
  prepare_corpus(options);
  const TokenizerIdentity other = prepared_tokenizer(dir.file("other"));
  ASSERT_NE(other.hash, one.hash);
  EXPECT_EQ(Tokenizer::load(dir.file("other/tokenizer.model")).vocab_size(), 350);
  expect_error([&] { check_same_tokenizer(one, other, false, "eval"); },
               {"eval", one.describe(), other.describe(), "--allow-tokenizer-change"});
  EXPECT_NE(check_same_tokenizer(one, other, true, "eval").find("--allow-tokenizer-change"),
            std::string::npos);
  EXPECT_EQ(check_same_tokenizer(one, one, false, "eval"), "");
  EXPECT_EQ(check_same_tokenizer(one, TokenizerIdentity{}, false, "eval"), "");  // unrecorded

  // A tokenizer.model replaced after preparing contradicts meta.json.
  test::write_bytes(dir.file("other/tokenizer.model"),
                    test::read_bytes(dir.file("one/tokenizer.model")));
  expect_error([&] { prepared_tokenizer(dir.file("other")); },
               {"other/tokenizer.model", "is not the tokenizer", "meta.json"});
  // Without meta.json (shards from elsewhere), the directory's tokenizer.model speaks for them.
  std::filesystem::remove(dir.file("other/meta.json"));
  EXPECT_EQ(prepared_tokenizer(dir.file("other")).hash, one.hash);
}

TEST(Prepare, SeedChangesTheSplit) {
  TempDir dir;
  PrepareOptions options = small_options(dir, "a");
  prepare_corpus(options);
  options.output_dir = dir.file("b");
  options.tokenizer_path = dir.file("a/tokenizer.model");
  options.seed = 6;
  prepare_corpus(options);
  EXPECT_NE(test::read_bytes(dir.file("a/val.bin")), test::read_bytes(dir.file("b/val.bin")));
}

TEST(Prepare, NoValidationSplitWhenFractionIsZero) {
  TempDir dir;
  PrepareOptions options = small_options(dir, "out");
  options.val_fraction = 0.0;
  const PrepareSummary summary = prepare_corpus(options);
  EXPECT_EQ(summary.train_documents, 40);
  EXPECT_TRUE(summary.val_path.empty());
  EXPECT_FALSE(std::filesystem::exists(dir.file("out/val.bin")));
  const auto meta = nlohmann::json::parse(test::read_bytes(dir.file("out/meta.json")));
  EXPECT_TRUE(meta["val"].is_null());
}

TEST(Prepare, RefusesBadInputs) {
  TempDir dir;
  PrepareOptions options = small_options(dir, "out");
  options.input_files.push_back(dir.file("missing.txt"));
  expect_error([&] { prepare_corpus(options); }, {"missing.txt", "cannot open"});

  const std::string single = dir.file("single.txt");
  test::write_bytes(single, "just one document\nof two lines\n");
  options.input_files = {single};
  expect_error([&] { prepare_corpus(options); }, {"at least 2 documents", "hold 1"});

  options = small_options(dir, "out");
  options.val_fraction = 1.0;
  expect_error([&] { prepare_corpus(options); }, {"--val-fraction 1"});
  options.val_fraction = 0.1;
  options.tokenizer_path = dir.file("first.txt");
  expect_error([&] { prepare_corpus(options); }, {"first.txt", "not a valid SentencePiece"});
}

}  // namespace
}  // namespace boostlm
