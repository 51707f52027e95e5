// Tokenizer training, loading and exact round trips, including text the model never saw.
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "core/rng.h"
#include "data/test_util.h"
#include "data/tokenizer.h"

namespace boostlm {
namespace {

using test::expect_error;
using test::TempDir;

constexpr int kVocab = 512;  // 256 byte pieces + 3 specials + ~56 characters + ~200 merges

std::string train_small(const TempDir& dir, const std::string& name) {
  const std::string corpus = dir.file("corpus.txt");
  if (!std::filesystem::exists(corpus)) test::write_bytes(corpus, test::synthetic_text(1, 20, 30));
  return Tokenizer::train({corpus}, dir.file(name), kVocab);
}

TEST(Tokenizer, TrainsBpeModelThatRoundTripsAnyUtf8) {
  TempDir dir;
  const std::string model = train_small(dir, "tok");
  EXPECT_EQ(model, dir.file("tok.model"));
  const Tokenizer tokenizer = Tokenizer::load(model);
  EXPECT_EQ(tokenizer.vocab_size(), kVocab);
  EXPECT_EQ(tokenizer.bos_id(), 1);
  EXPECT_EQ(tokenizer.eos_id(), 2);

  const std::string seen = "The river flows past old stone houses.";
  const std::vector<int32_t> seen_ids = tokenizer.encode(seen);
  // 200 merges are enough to make each of the 44 training words one piece.
  EXPECT_EQ(seen_ids.size(), 8u) << "7 words and a full stop";
  EXPECT_EQ(tokenizer.decode(seen_ids), seen);

  // None of these characters is in the training text: they must come back through byte fallback.
  const std::string unseen = "naïve café — Ελληνικά 日本語 🙂";
  const std::vector<int32_t> ids = tokenizer.encode(unseen);
  for (int32_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, kVocab);
  }
  EXPECT_EQ(tokenizer.decode(ids), unseen);
}

TEST(Tokenizer, KeepsWhitespaceAndNewlinesExactly) {
  TempDir dir;
  const Tokenizer tokenizer = Tokenizer::load(train_small(dir, "tok"));
  for (const std::string text : {"two  spaces", "line one\nline two\n\nend", "\ttab", "x  "}) {
    EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), text);
  }
}

TEST(Tokenizer, TrainingIsDeterministic) {
  TempDir dir;
  const std::string first = train_small(dir, "a");
  const std::string second = train_small(dir, "b");
  EXPECT_EQ(test::read_bytes(first), test::read_bytes(second));
}

TEST(Tokenizer, SamplesLinesDeterministicallyWhenTheInputIsLarge) {
  TempDir dir;
  const std::string corpus = dir.file("corpus.txt");
  test::write_bytes(corpus, test::synthetic_text(3, 10, 30));  // 300 lines
  TokenizerTrainOptions options;
  options.max_sentences = 100;
  const std::string a = Tokenizer::train({corpus}, dir.file("a"), 360, options);
  const std::string b = Tokenizer::train({corpus}, dir.file("b"), 360, options);
  EXPECT_EQ(test::read_bytes(a), test::read_bytes(b));
  options.seed += 1;  // another sample of 100 lines gives other merge statistics
  const std::string c = Tokenizer::train({corpus}, dir.file("c"), 360, options);
  EXPECT_NE(test::read_bytes(a), test::read_bytes(c));
  const std::string text = "Bread and fish near the bridge.";
  EXPECT_EQ(Tokenizer::load(c).decode(Tokenizer::load(c).encode(text)), text);
}

TEST(Tokenizer, LoadRefusesMissingAndCorruptModels) {
  TempDir dir;
  const std::string missing = dir.file("missing.model");
  expect_error([&] { Tokenizer::load(missing); }, {missing, "not found"});
  const std::string corrupt = dir.file("corrupt.model");
  test::write_bytes(corrupt, "this is not a protobuf");
  expect_error([&] { Tokenizer::load(corrupt); }, {corrupt, "not a valid SentencePiece model"});
}

TEST(Tokenizer, TrainRefusesMissingInputAndTooSmallVocabulary) {
  TempDir dir;
  const std::string missing = dir.file("nope.txt");
  expect_error([&] { Tokenizer::train({missing}, dir.file("m"), kVocab); }, {missing});
  const std::string corpus = dir.file("c.txt");
  test::write_bytes(corpus, test::synthetic_text(2, 2, 5));
  expect_error([&] { Tokenizer::train({corpus}, dir.file("m"), 100); }, {"m.model", "failed"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("m.model")));
}

TEST(Tokenizer, DecodeRefusesIdsOutsideTheVocabulary) {
  TempDir dir;
  const Tokenizer tokenizer = Tokenizer::load(train_small(dir, "tok"));
  expect_error([&] { tokenizer.decode({5, kVocab}); }, {"tok.model", "512"});
}

// SentencePiece's own ids for the whole text at once (what Tokenizer::encode cuts into parts).
std::vector<int32_t> whole_text_ids(const std::string& model, const std::string& text) {
  sentencepiece::SentencePieceProcessor processor;
  EXPECT_TRUE(processor.Load(model).ok());
  std::vector<int> ids;
  EXPECT_TRUE(processor.Encode(text, &ids).ok());
  return {ids.begin(), ids.end()};
}

// One long line with what could go wrong at a cut: runs of spaces, tabs and newlines, a space
// before punctuation or digits, words the model never saw and characters it only has as bytes.
std::string long_awkward_line(uint64_t seed, size_t bytes) {
  static const char* const kExtras[] = {"  ",  "\t", " \n ", " 123 ", " ,", "naïve café", " 🙂 ",
                                        "   ", "x y", " Ελληνικά ", "(a)", " - ", "日本語"};
  Rng rng(seed);
  const std::string words = test::synthetic_text(seed, 40, 40);
  std::string line;
  size_t at = 0;
  while (line.size() < bytes) {
    if (rng.below(8) == 0) {
      line += kExtras[rng.below(sizeof(kExtras) / sizeof(kExtras[0]))];
    } else {
      const size_t end = std::min(words.size(), at + 1 + rng.below(40));
      for (; at < end; ++at) line += words[at] == '\n' ? ' ' : words[at];
      if (at == words.size()) at = 0;
    }
  }
  return line;
}

// A long text is encoded in parts cut at single spaces (one 50 MB line took 280 s and 4.3 GB in
// one SentencePiece call, issue 37): the ids are SentencePiece's for the whole text, bit for bit.
TEST(Tokenizer, ALongLineIsEncodedInPartsWithTheWholeTextsIds) {
  TempDir dir;
  const std::string model = train_small(dir, "tok");
  const Tokenizer tokenizer = Tokenizer::load(model);
  EXPECT_TRUE(tokenizer.splits_at_spaces());
  for (uint64_t seed : {1, 2, 3}) {
    const std::string line = long_awkward_line(seed, 12 * Tokenizer::kSentencePieceChunkBytes);
    const std::vector<int32_t> ids = tokenizer.encode(line);
    EXPECT_EQ(ids, whole_text_ids(model, line)) << "seed " << seed;
    EXPECT_EQ(tokenizer.decode(ids), line);
  }
  // No space to cut at: one call, as before.
  const std::string unbroken(3 * Tokenizer::kSentencePieceChunkBytes, 'a');
  EXPECT_EQ(tokenizer.encode(unbroken), whole_text_ids(model, unbroken));
}

// A model whose pieces reach across spaces (trained with split_by_whitespace off: "x▁y" pieces)
// is never cut: its ids would change.
TEST(Tokenizer, AModelWithPiecesAcrossSpacesIsEncodedWhole) {
  TempDir dir;
  const std::string corpus = dir.file("corpus.txt");
  test::write_bytes(corpus, test::synthetic_text(1, 20, 30));
  const std::string prefix = dir.file("across");
  ASSERT_TRUE(sentencepiece::SentencePieceTrainer::Train(
                  "--input=" + corpus + " --model_prefix=" + prefix +
                  " --model_type=bpe --vocab_size=1000 --split_by_whitespace=false"
                  " --byte_fallback=true --minloglevel=2")
                  .ok());
  const Tokenizer tokenizer = Tokenizer::load(prefix + ".model");
  EXPECT_FALSE(tokenizer.splits_at_spaces());
  const std::string line = long_awkward_line(4, 3 * Tokenizer::kSentencePieceChunkBytes);
  EXPECT_EQ(tokenizer.encode(line), whole_text_ids(prefix + ".model", line));
}

}  // namespace
}  // namespace boostlm
