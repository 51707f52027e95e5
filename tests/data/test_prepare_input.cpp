// prepare's inputs: every format and compression gives the same shards as the plain text of the
// same documents, and every failure names the file and the line or byte.
#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "data/prepare.h"
#include "data/shard.h"
#include "data/test_util.h"
#include "data/tokenizer.h"

namespace boostlm {
namespace {

using test::expect_error;
using test::TempDir;

std::string gzip(const std::string& data) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, data.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string zstd(const std::string& data) {
  std::string out(ZSTD_compressBound(data.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), data.data(), data.size(), 3);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

std::vector<std::string> documents_of(uint64_t seed, int count) {
  return split_documents(test::synthetic_text(seed, count, 5));
}

std::string as_text(const std::vector<std::string>& documents) {
  std::string text;
  for (const std::string& d : documents) text += d + "\n\n";
  return text;
}

std::string as_jsonl(const std::vector<std::string>& documents, const std::string& field) {
  std::string text;
  for (const std::string& d : documents)
    text += nlohmann::json{{"id", 1}, {field, d}}.dump() + "\n";
  return text;
}

// A tokenizer trained once for the whole file of tests.
const std::string& shared_tokenizer() {
  static const TempDir dir;  // removed at exit
  static const std::string path = [] {
    const std::string text = dir.file("tok.txt");
    test::write_bytes(text, test::synthetic_text(3, 60, 6));
    return Tokenizer::train({text}, dir.file("tok"), 400);
  }();
  return path;
}

PrepareOptions options_for(const std::vector<std::string>& inputs, const std::string& out) {
  PrepareOptions options;
  options.input_files = inputs;
  options.output_dir = out;
  options.tokenizer_path = shared_tokenizer();
  options.val_fraction = 0.2;
  options.seed = 3;
  options.shard_tokens = 700;
  options.overwrite = true;  // the tests prepare into one directory again (refusal: NeverDestroys...)
  return options;
}

std::string all_shards(const PrepareSummary& summary) {
  std::string bytes;
  for (const PrepareShardSummary& shard : summary.shards)
    bytes += shard.name + ":" +
             test::read_bytes(
                 (std::filesystem::path(summary.meta_path).parent_path() / shard.name).string());
  return bytes;
}

TEST(PrepareInput, EveryFormatAndCompressionGivesTheSameShards) {
  TempDir dir;
  const auto documents = documents_of(21, 40);
  test::write_bytes(dir.file("plain.txt"), as_text(documents));
  const std::string reference =
      all_shards(prepare_corpus(options_for({dir.file("plain.txt")}, dir.file("ref"))));
  ASSERT_FALSE(reference.empty());

  struct Case {
    std::string name, bytes, format = "jsonl";
  };
  const std::vector<Case> cases = {
      {"a.jsonl", as_jsonl(documents, "text")},
      // The format told by content where the name does not tell: the first non-blank line is a
      // JSON object, or not.
      {"e.data", "\n" + as_jsonl(documents, "text")},
      {"f", zstd(as_jsonl(documents, "text"))},
      {"g", "[1, 2]\n\n" + as_text(documents), "text"},
      {"a.jsonl.gz", gzip(as_jsonl(documents, "text"))},
      {"a.jsonl.zst", zstd(as_jsonl(documents, "text"))},
      {"a.txt.gz", gzip(as_text(documents)), "text"},
      // Told by content: gzip named .txt, zstd named .zst-less, concatenated gzip members.
      {"b.txt", gzip(as_text(documents)), "text"},
      {"c.jsonl", zstd(as_jsonl(documents, "text"))},
      {"d.txt.gz",
       gzip(as_text({documents.begin(), documents.begin() + 17})) +
           gzip(as_text({documents.begin() + 17, documents.end()})),
       "text"},
  };
  for (const Case& c : cases) {
    test::write_bytes(dir.file(c.name), c.bytes);
    const PrepareSummary summary =
        prepare_corpus(options_for({dir.file(c.name)}, dir.file("out_" + c.name)));
    const std::string shards = all_shards(summary);
    if (c.name == "g") {  // its first paragraph is one more document
      EXPECT_EQ(summary.files.at(0).documents, 41);
    } else {
      EXPECT_EQ(shards, reference) << c.name;
      EXPECT_EQ(summary.files.at(0).documents, 40) << c.name;
    }
    EXPECT_EQ(summary.files.at(0).format, c.format) << c.name;
  }
  // Another text field, and a directory and a glob naming the same file.
  test::write_bytes(dir.file("field.jsonl"), as_jsonl(documents, "content"));
  PrepareOptions options = options_for({dir.file("field.jsonl")}, dir.file("field"));
  options.text_field = "content";
  EXPECT_EQ(all_shards(prepare_corpus(options)), reference);
  std::filesystem::create_directories(dir.file("tree/sub"));
  test::write_bytes(dir.file("tree/sub/x.txt"), as_text(documents));
  EXPECT_EQ(all_shards(prepare_corpus(options_for({dir.file("tree")}, dir.file("by_dir")))),
            reference);
  EXPECT_EQ(
      all_shards(prepare_corpus(options_for({dir.file("tree/*/*.txt")}, dir.file("by_glob")))),
      reference);
}

// Issue 37 §3: an existing preparation is refused without --overwrite and left as it was, the
// output directory is never read as input, and an input given twice is refused.
TEST(PrepareInput, NeverDestroysAPreparation) {
  TempDir dir;
  test::write_bytes(dir.file("a.txt"), as_text(documents_of(20, 5)));
  PrepareOptions options = options_for({dir.file("a.txt")}, dir.file("out"));
  options.overwrite = false;
  prepare_corpus(options);
  const std::string meta = test::read_bytes(dir.file("out/meta.json"));
  expect_error([&] { prepare_corpus(options); }, {"already holds a preparation (meta.json)",
                                                  "--overwrite"});
  PrepareOptions self = options_for({dir.file("out")}, dir.file("out"));
  expect_error([&] { prepare_corpus(self); }, {"is the output directory --out"});
  EXPECT_EQ(test::read_bytes(dir.file("out/meta.json")), meta);
  PrepareOptions twice = options_for({dir.file("a.txt"), dir.file("./a.txt")}, dir.file("two"));
  expect_error([&] { prepare_corpus(twice); }, {"is given twice"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("two/meta.json")));
}

TEST(PrepareInput, ABadRecordIsAnErrorNamingFileAndLineOrSkippedAndCounted) {
  TempDir dir;
  const auto documents = documents_of(22, 12);
  struct Case {
    std::string line, message;
  };
  const std::vector<Case> cases = {
      {"{\"text\": \"unterminated", "not valid JSON"},
      {"{\"body\": \"no text field\"}", "no field \"text\""},
      {"{\"text\": \"\"}", "field \"text\" is empty"},
      {"{\"text\": 5}", "is not a string"},
      {"[1, 2]", "not a JSON object"},
  };
  const std::string good = as_jsonl(documents, "text");
  const size_t third_line = good.find('\n', good.find('\n') + 1) + 1;
  for (const Case& c : cases) {
    const std::string path = dir.file("bad.jsonl");
    test::write_bytes(path, good.substr(0, third_line) + c.line + "\n" + good.substr(third_line));
    PrepareOptions options = options_for({path}, dir.file("out"));
    expect_error([&] { prepare_corpus(options); },
                 {"bad.jsonl:3: ", c.message, "--on-bad-record skip"});
    EXPECT_FALSE(std::filesystem::exists(dir.file("out/meta.json")));
    options.on_bad_record = BadRecordPolicy::skip;
    const PrepareSummary summary = prepare_corpus(options);
    EXPECT_EQ(summary.skipped_records, 1) << c.line;
    EXPECT_EQ(summary.files[0].documents, 12) << c.line;
    const auto meta = nlohmann::json::parse(test::read_bytes(dir.file("out/meta.json")));
    EXPECT_EQ(meta["skipped_records"], 1);
  }
}

TEST(PrepareInput, ATruncatedCompressedFileIsAnErrorNamingTheByteOrSkipped) {
  TempDir dir;
  const auto documents = documents_of(23, 1500);  // several zstd blocks of 128 KiB
  for (const bool use_zstd : {false, true}) {
    const std::string whole = use_zstd ? zstd(as_text(documents)) : gzip(as_text(documents));
    const std::string path = dir.file(use_zstd ? "cut.txt.zst" : "cut.txt.gz");
    test::write_bytes(path, whole.substr(0, whole.size() * 2 / 3));
    test::write_bytes(dir.file("fine.txt"), as_text(documents_of(24, 10)));
    PrepareOptions options = options_for({path, dir.file("fine.txt")}, dir.file("out"));
    options.tokenizer_path = shared_tokenizer();
    expect_error([&] { prepare_corpus(options); },
                 {use_zstd ? "cut.txt.zst" : "cut.txt.gz", "truncated", use_zstd ? "zstd" : "gzip",
                  "byte " + std::to_string(whole.size() * 2 / 3)});
    options.on_bad_record = BadRecordPolicy::skip;
    const PrepareSummary summary = prepare_corpus(options);
    EXPECT_EQ(summary.files[0].skipped_records, 1);
    EXPECT_GT(summary.files[0].documents, 0);  // those before the cut are kept
    EXPECT_LT(summary.files[0].documents, 1500);
    EXPECT_EQ(summary.files[1].documents, 10);  // and the next file is read
  }
}

// With several encoding threads, the first bad input in input order is the one reported: a bad
// record an encoder finds in an early batch, not the broken stream the reader meets later.
TEST(PrepareInput, ErrorsAreReportedInInputOrderOnAnyThreadCount) {
  TempDir dir;
  std::string records = as_jsonl(documents_of(25, 400), "text");
  records.insert(records.find('\n') + 1, "{\"text\": 7}\n");
  test::write_bytes(dir.file("a.jsonl"), records);
  const std::string cut = gzip(as_text(documents_of(26, 1500)));
  test::write_bytes(dir.file("b.txt.gz"), cut.substr(0, cut.size() / 2));
  for (const int threads : {1, 2, 4}) {
    PrepareOptions options = options_for({dir.file("a.jsonl"), dir.file("b.txt.gz")},
                                         dir.file("out"));
    options.threads = threads;
    expect_error([&] { prepare_corpus(options); }, {"a.jsonl:2: ", "is not a string"});
  }
}

TEST(PrepareInput, AFileThatDisappearsMidRunIsAnErrorOrSkipped) {
  TempDir dir;
  for (const char* name : {"a.txt", "b.txt", "c.txt"})
    test::write_bytes(dir.file(name), as_text(documents_of(name[0], 8)));
  PrepareOptions options = options_for({dir.file("*.txt")}, dir.file("out"));
  auto delete_b = [&](const std::string& path) {
    if (path.ends_with("a.txt")) std::filesystem::remove(dir.file("b.txt"));
  };
  options.before_file = delete_b;
  expect_error([&] { prepare_corpus(options); }, {"b.txt", "cannot open", "--on-bad-record skip"});
  test::write_bytes(dir.file("b.txt"), as_text(documents_of('b', 8)));
  options.on_bad_record = BadRecordPolicy::skip;
  const PrepareSummary summary = prepare_corpus(options);
  ASSERT_EQ(summary.files.size(), 3u);
  EXPECT_TRUE(summary.files[1].missing);
  EXPECT_EQ(summary.files[2].documents, 8);
  EXPECT_EQ(summary.skipped_records, 1);
}

TEST(PrepareInput, NamesWhatAnArgumentLacks) {
  TempDir dir;
  expect_error([&] { expand_inputs({dir.file("nothing.txt")}); },
               {"nothing.txt", "does not exist"});
  expect_error([&] { expand_inputs({dir.file("*.jsonl")}); }, {"*.jsonl", "matches no files"});
  std::filesystem::create_directories(dir.file("empty"));
  expect_error([&] { expand_inputs({dir.file("empty")}); }, {"empty", "holds no files"});
}

}  // namespace
}  // namespace boostlm
