// The input side of corpus preparation: which files a command line names, their bytes with any
// gzip or zstd compression undone, and the records they hold.
//
// Compression is told by the first bytes (gzip 1f 8b, zstd 28 b5 2f fd), whatever the name says.
// The format of the (decompressed) content: a name ending .jsonl, .json or .ndjson (after any
// .gz/.zst/.zstd) says JSON Lines, one object per line whose text field is one document; any
// other name leaves it to the content: JSON Lines when the first non-blank line is a JSON
// object, else plain text, where a document is a maximal run of non-blank lines
// (split_documents in data/prepare.h). --format text|jsonl overrides both.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace boostlm {

enum class Compression { none, gzip, zstd };
enum class InputFormat { automatic, text, jsonl };

const char* compression_name(Compression compression);
Compression detect_compression(const unsigned char* bytes, size_t size);
const char* input_format_name(InputFormat format);
// The format `path`'s name says (as above); automatic when it says none.
InputFormat input_format_by_name(const std::string& path);

// Files, directories (every regular file below, recursively) and glob patterns, each expanded
// in sorted order and the whole list in command-line order. Throws Error for an argument that
// names nothing.
std::vector<std::string> expand_inputs(const std::vector<std::string>& arguments);

// The decompressed bytes of one file, in chunks.
class ByteStream {
 public:
  explicit ByteStream(const std::string& path);  // throws Error if it cannot be opened
  ~ByteStream();
  ByteStream(const ByteStream&) = delete;
  ByteStream& operator=(const ByteStream&) = delete;

  // Up to `capacity` bytes; 0 at the end. Throws Error naming the file and the compressed byte
  // offset for a truncated or corrupt compressed stream, or a read error.
  size_t read(char* out, size_t capacity);

  Compression compression() const { return compression_; }
  int64_t file_bytes_read() const { return file_offset_; }  // compressed bytes consumed so far
  double read_seconds() const { return read_seconds_; }
  double decompress_seconds() const { return decompress_seconds_; }

 private:
  struct Decoder;
  bool fill();  // reads more of the file into in_; false at its end

  std::string path_;
  int fd_ = -1;
  Compression compression_ = Compression::none;
  std::vector<char> in_;
  size_t in_begin_ = 0, in_end_ = 0;
  bool file_end_ = false;
  int64_t file_offset_ = 0;  // bytes of the file read into in_
  std::unique_ptr<Decoder> decoder_;
  double read_seconds_ = 0, decompress_seconds_ = 0;
};

// A record the reader could not turn into a document.
struct BadRecord {
  std::string path;
  int64_t line = 0;
  std::string reason;
  std::string describe() const;  // "corpus.jsonl:12: not valid JSON (...)"
};

// One record of an input file as the reader cuts it: a line of JSON Lines, not yet parsed (that
// is the encoding threads' work, so that parsing runs on all of them), or a document of plain
// text.
struct InputRecord {
  std::string text;
  int64_t line = 0;  // its (first) line in the file, from 1
  bool json = false;
};

// The document a record holds: a JSON Lines record's text field (false, with the reason a
// BadRecord gives, when it holds none: not JSON, not an object, no such field, not a string,
// empty), else the record's own text. Moves from record.text.
bool record_document(InputRecord& record, const std::string& text_field, std::string* document,
                     std::string* reason);

struct RecordReaderStats {
  InputFormat format = InputFormat::text;  // what the file was read as
  int64_t decompressed_bytes = 0;
  int64_t records = 0;
  // In plain-text documents (a JSON string is well-formed UTF-8 by definition).
  int64_t invalid_utf8_bytes = 0, nul_bytes = 0;
};

// Reads the records of one file, calling `on_record` for each in order and counting into *stats
// (also what was read before an exception). A truncated or corrupt compressed stream throws
// Error. A document of plain text is capped at `max_document_bytes`
// (the rest of it starts the next document) so that one file without blank lines cannot hold the
// whole corpus in memory. Blank lines of JSON Lines are no records.
struct RecordReaderOptions {
  InputFormat format = InputFormat::automatic;
  int64_t max_document_bytes = int64_t{64} << 20;
};
void read_records(ByteStream& stream, const std::string& path, const RecordReaderOptions& options,
                  const std::function<void(InputRecord&&)>& on_record, RecordReaderStats* stats);

}  // namespace boostlm
