// Corpus preparation end to end on a small synthetic corpus.
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/file_io.h"
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

std::vector<int32_t> concatenated(const PrepareSummary& summary, const std::string& split) {
  std::vector<int32_t> tokens;
  for (const std::string& path : summary.shard_paths(split)) {
    const std::vector<int32_t> shard = read_shard(path);
    tokens.insert(tokens.end(), shard.begin(), shard.end());
  }
  return tokens;
}

TEST(Prepare, WritesTokenizerShardsAndMeta) {
  TempDir dir;
  PrepareOptions options = small_options(dir, "out");
  options.shard_tokens = 1000;
  const PrepareSummary summary = prepare_corpus(options);
  EXPECT_TRUE(summary.trained_tokenizer);
  EXPECT_EQ(summary.vocab_size, 350);
  EXPECT_EQ(summary.val_documents + summary.train_documents, 40);
  EXPECT_GT(summary.val_documents, 0);
  EXPECT_GT(summary.train_documents, summary.val_documents);

  const Tokenizer tokenizer = Tokenizer::load(dir.file("out/tokenizer.model"));
  const std::vector<int32_t> train = concatenated(summary, "train");
  const std::vector<int32_t> val = concatenated(summary, "val");
  EXPECT_GT(summary.shard_paths("train").size(), 2u);  // 1000-token shards
  EXPECT_EQ(static_cast<int64_t>(train.size()), summary.train_tokens);
  EXPECT_EQ(static_cast<int64_t>(val.size()), summary.val_tokens);
  check_tokens_below(train, summary.vocab_size, "train");
  // One EOS closes every document and nothing else encodes to EOS.
  EXPECT_EQ(std::count(train.begin(), train.end(), tokenizer.eos_id()), summary.train_documents);
  EXPECT_EQ(std::count(val.begin(), val.end(), tokenizer.eos_id()), summary.val_documents);
  EXPECT_EQ(train.back(), tokenizer.eos_id());

  // The shards hold the documents in input order, each in the split its hash chose.
  const std::vector<std::string> documents = split_documents(
      test::read_bytes(options.input_files[0]) + "\n\n" + test::read_bytes(options.input_files[1]));
  ASSERT_EQ(documents.size(), 40u);
  std::vector<int32_t> expected[2];
  for (const std::string& document : documents) {
    auto& into = expected[document_goes_to_val(document, options.val_fraction, options.seed)];
    const std::vector<int32_t> ids = tokenizer.encode(document);
    into.insert(into.end(), ids.begin(), ids.end());
    into.push_back(tokenizer.eos_id());
  }
  EXPECT_EQ(train, expected[0]);
  EXPECT_EQ(val, expected[1]);

  const auto meta = nlohmann::json::parse(test::read_bytes(dir.file("out/meta.json")));
  EXPECT_EQ(meta["vocab_size"], 350);
  EXPECT_EQ(meta["tokenizer"], "tokenizer.model");
  EXPECT_EQ(meta["train"]["tokens"], summary.train_tokens);
  EXPECT_EQ(meta["val"]["tokens"], summary.val_tokens);
  EXPECT_EQ(meta["shard_version"], 1);
  // Every shard but the last of a split is full, and its checksum is of its token bytes.
  const auto& shards = meta["train"]["shards"];
  ASSERT_EQ(shards.size(), summary.shard_paths("train").size());
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string bytes =
        test::read_bytes(dir.file("out/" + shards[i]["name"].get<std::string>()));
    EXPECT_EQ(shards[i]["checksum"],
              Checksum64::hex(Checksum64::of(bytes.data() + 1024, bytes.size() - 1024)));
    if (i + 1 < shards.size()) {
      EXPECT_EQ(shards[i]["tokens"], 1000);
    }
  }
  EXPECT_EQ(shards[0]["name"], "train_000000.bin");
  EXPECT_EQ(prepared_shards(dir.file("out"), "train"), summary.shard_paths("train"));
  ASSERT_EQ(meta["inputs"].size(), 2u);
  EXPECT_EQ(meta["inputs"][0]["documents"], 15);
  EXPECT_EQ(meta["inputs"][1]["documents"], 25);
  // Each file's tokens: its documents' tokens and EOS, whichever split they went to.
  int64_t first_file_tokens = 0;
  for (size_t i = 0; i < 15; ++i)
    first_file_tokens += static_cast<int64_t>(tokenizer.encode(documents[i]).size()) + 1;
  EXPECT_EQ(meta["inputs"][0]["tokens"], first_file_tokens);
  EXPECT_EQ(summary.files[0].tokens, first_file_tokens);
  EXPECT_EQ(meta["inputs"][1]["tokens"],
            summary.train_tokens + summary.val_tokens - first_file_tokens);
  EXPECT_EQ(meta["inputs"][0]["format"], "text");
}

// The same bytes for 1 and 3 encoding threads, run after run; a given tokenizer is copied.
TEST(Prepare, IsDeterministicAcrossThreadCountsAndReusesAGivenTokenizer) {
  TempDir dir;
  PrepareOptions options = small_options(dir, "one");
  options.shard_tokens = 700;
  options.threads = 1;
  const PrepareSummary one = prepare_corpus(options);
  options.output_dir = dir.file("two");
  options.threads = 3;
  const PrepareSummary two = prepare_corpus(options);
  ASSERT_EQ(one.shards.size(), two.shards.size());
  EXPECT_EQ(test::read_bytes(dir.file("one/tokenizer.model")),
            test::read_bytes(dir.file("two/tokenizer.model")));
  for (const PrepareShardSummary& shard : one.shards)
    EXPECT_EQ(test::read_bytes(dir.file("one/" + shard.name)),
              test::read_bytes(dir.file("two/" + shard.name)))
        << shard.name;
  options.output_dir = dir.file("three");
  options.tokenizer_path = dir.file("one/tokenizer.model");
  options.vocab_size = 999;  // ignored: the given tokenizer decides
  const PrepareSummary summary = prepare_corpus(options);
  EXPECT_FALSE(summary.trained_tokenizer);
  EXPECT_EQ(summary.vocab_size, 350);
  EXPECT_EQ(test::read_bytes(dir.file("three/train_000001.bin")),
            test::read_bytes(dir.file("one/train_000001.bin")));
}

// An interrupted run resumes from its complete shards and ends with the bytes of an
// uninterrupted one. The interruption is made exact here: a finished run cut back to the state a
// kill after its third shard leaves (progress.json lists three shards, a later shard and a
// temporary lie about, no meta.json); tests/cli/test_prepare.sh kills a real run.
TEST(Prepare, ResumesFromTheCompleteShardsOfAnInterruptedRun) {
  TempDir dir;
  PrepareOptions options = small_options(dir, "whole");
  options.shard_tokens = 300;
  options.threads = 2;
  const PrepareSummary whole = prepare_corpus(options);
  ASSERT_GT(whole.shards.size(), 5u);
  options.output_dir = dir.file("cut");
  prepare_corpus(options);
  auto progress = nlohmann::json::parse(test::read_bytes(dir.file("cut/progress.json")));
  progress["shards"].erase(progress["shards"].begin() + 3, progress["shards"].end());
  test::write_bytes(dir.file("cut/progress.json"), progress.dump());
  std::filesystem::remove(dir.file("cut/meta.json"));
  std::filesystem::remove(dir.file("cut/" + whole.shards[4].name));
  test::write_bytes(dir.file("cut/" + whole.shards[5].name), "half a shard");
  test::write_bytes(dir.file("cut/train_000007.bin.tmp.123"), "a temporary");

  PrepareOptions other = options;
  other.resume = true;
  other.seed = 6;
  expect_error([&] { prepare_corpus(other); }, {"--resume", "seed", "start over"});
  options.resume = true;
  const PrepareSummary resumed = prepare_corpus(options);
  EXPECT_TRUE(resumed.resumed);
  EXPECT_FALSE(std::filesystem::exists(dir.file("cut/train_000007.bin.tmp.123")));
  ASSERT_EQ(resumed.shards.size(), whole.shards.size());
  for (const PrepareShardSummary& shard : whole.shards)
    EXPECT_EQ(test::read_bytes(dir.file("cut/" + shard.name)),
              test::read_bytes(dir.file("whole/" + shard.name)))
        << shard.name;
  // The counts too, per file (tokens of the documents before the resume point come from
  // progress.json).
  auto meta = [&](const char* d) {
    auto j = nlohmann::json::parse(test::read_bytes(dir.file(std::string(d) + "/meta.json")));
    return std::make_tuple(j["train"], j["val"], j["inputs"]);
  };
  EXPECT_EQ(meta("cut"), meta("whole"));
  EXPECT_EQ(resumed.train_documents, whole.train_documents);
  // A record of the older layout (shards ending at a document count) cannot be continued.
  progress = nlohmann::json::parse(test::read_bytes(dir.file("cut/progress.json")));
  progress.erase("version");
  test::write_bytes(dir.file("cut/progress.json"), progress.dump());
  expect_error([&] { prepare_corpus(options); }, {"another version", "without --resume"});
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
  EXPECT_NE(test::read_bytes(dir.file("a/val_000000.bin")),
            test::read_bytes(dir.file("b/val_000000.bin")));
}

TEST(Prepare, NoValidationSplitWhenFractionIsZero) {
  TempDir dir;
  PrepareOptions options = small_options(dir, "out");
  options.val_fraction = 0.0;
  const PrepareSummary summary = prepare_corpus(options);
  EXPECT_EQ(summary.train_documents, 40);
  EXPECT_TRUE(summary.shard_paths("val").empty());
  EXPECT_FALSE(std::filesystem::exists(dir.file("out/val_000000.bin")));
  const auto meta = nlohmann::json::parse(test::read_bytes(dir.file("out/meta.json")));
  EXPECT_TRUE(meta["val"].is_null());
}

TEST(Prepare, RefusesBadInputs) {
  TempDir dir;
  PrepareOptions options = small_options(dir, "out");
  options.input_files.push_back(dir.file("missing.txt"));
  expect_error([&] { prepare_corpus(options); }, {"missing.txt", "does not exist"});

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
