#include "data/prepare_input.h"

#include <fcntl.h>
#include <glob.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "core/error.h"
#include "core/profile.h"
#include "data/json_record.h"

namespace boostlm {
namespace fs = std::filesystem;

namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Bytes outside well-formed UTF-8 sequences (overlong forms and surrogates included) and NULs.
void count_bad_text(std::string_view text, RecordReaderStats& stats) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      stats.nul_bytes += c == 0;
      ++i;
      continue;
    }
    int len = 0;
    uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0)
      len = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0)
      len = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0)
      len = 4, cp = c & 0x07;
    bool ok = len > 0 && i + len <= n;
    for (int k = 1; ok && k < len; ++k) {
      ok = (p[i + k] & 0xC0) == 0x80;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && cp >= kMin[len] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    i += ok ? len : 1;
    stats.invalid_utf8_bytes += ok ? 0 : 1;
  }
}

}  // namespace

const char* compression_name(Compression compression) {
  switch (compression) {
    case Compression::gzip:
      return "gzip";
    case Compression::zstd:
      return "zstd";
    default:
      return "none";
  }
}

Compression detect_compression(const unsigned char* bytes, size_t size) {
  if (size >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b) return Compression::gzip;
  if (size >= 4 && bytes[0] == 0x28 && bytes[1] == 0xb5 && bytes[2] == 0x2f && bytes[3] == 0xfd)
    return Compression::zstd;
  return Compression::none;
}

const char* input_format_name(InputFormat format) {
  switch (format) {
    case InputFormat::jsonl:
      return "jsonl";
    case InputFormat::text:
      return "text";
    default:
      return "auto";
  }
}

InputFormat input_format_by_name(const std::string& path) {
  std::string name = fs::path(path).filename().string();
  for (const char* suffix : {".gz", ".zst", ".zstd"})
    if (ends_with(name, suffix)) name.resize(name.size() - std::strlen(suffix));
  for (const char* suffix : {".jsonl", ".json", ".ndjson"})
    if (ends_with(name, suffix)) return InputFormat::jsonl;
  return InputFormat::automatic;
}

std::vector<std::string> expand_inputs(const std::vector<std::string>& arguments) {
  std::vector<std::string> files;
  for (const std::string& argument : arguments) {
    std::vector<std::string> found;
    std::error_code ec;
    if (fs::is_directory(argument, ec)) {
      for (const auto& entry : fs::recursive_directory_iterator(argument))
        if (entry.is_regular_file()) found.push_back(entry.path().string());
      if (found.empty()) throw error("prepare: input directory ", argument, " holds no files");
    } else if (fs::exists(argument, ec)) {
      found.push_back(argument);
    } else if (argument.find_first_of("*?[") != std::string::npos) {
      glob_t matches{};
      if (::glob(argument.c_str(), 0, nullptr, &matches) == 0)
        for (size_t i = 0; i < matches.gl_pathc; ++i)
          if (fs::is_regular_file(matches.gl_pathv[i])) found.emplace_back(matches.gl_pathv[i]);
      ::globfree(&matches);
      if (found.empty()) throw error("prepare: the pattern ", argument, " matches no files");
    } else {
      throw error("prepare: input ", argument,
                  " does not exist (give files, directories or globs)");
    }
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  if (files.empty()) throw error("prepare: no input files given");
  return files;
}

// The decoder state of a compressed stream.
struct ByteStream::Decoder {
  z_stream gzip{};
  bool gzip_open = false;
  bool member_ended = true;  // gzip: between members; zstd: between frames
  ZSTD_DCtx* zstd = nullptr;
  ~Decoder() {
    if (gzip_open) inflateEnd(&gzip);
    if (zstd) ZSTD_freeDCtx(zstd);
  }
};

ByteStream::ByteStream(const std::string& path) : path_(path), in_(kChunkBytes) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0)
    throw error(path, ": cannot open: ", std::strerror(errno),
                " (it was listed when prepare started; was it moved or deleted?)");
  fill();
  compression_ = detect_compression(reinterpret_cast<const unsigned char*>(in_.data()), in_end_);
  decoder_ = std::make_unique<Decoder>();
  if (compression_ == Compression::gzip) {
    if (inflateInit2(&decoder_->gzip, 15 + 16) != Z_OK)
      throw error(path, ": cannot start a gzip decoder");
    decoder_->gzip_open = true;
  } else if (compression_ == Compression::zstd) {
    decoder_->zstd = ZSTD_createDCtx();
    if (!decoder_->zstd) throw error(path, ": cannot start a zstd decoder");
  }
}

ByteStream::~ByteStream() {
  if (fd_ >= 0) ::close(fd_);
}

bool ByteStream::fill() {
  if (file_end_) return false;
  if (in_begin_ == in_end_) in_begin_ = in_end_ = 0;
  if (in_end_ == in_.size()) return true;
  const double start = now_s();
  ssize_t got;
  do {
    got = ::read(fd_, in_.data() + in_end_, in_.size() - in_end_);
  } while (got < 0 && errno == EINTR);
  read_seconds_ += now_s() - start;
  if (got < 0)
    throw error(path_, ": read error at byte ", file_offset_, ": ", std::strerror(errno));
  if (got == 0) {
    file_end_ = true;
    return false;
  }
  in_end_ += static_cast<size_t>(got);
  file_offset_ += got;
  return true;
}

size_t ByteStream::read(char* out, size_t capacity) {
  if (compression_ == Compression::none) {
    if (in_begin_ == in_end_ && !fill()) return 0;
    const size_t n = std::min(capacity, in_end_ - in_begin_);
    std::memcpy(out, in_.data() + in_begin_, n);
    in_begin_ += n;
    return n;
  }
  size_t produced = 0;
  while (produced == 0) {
    if (in_begin_ == in_end_ && !fill()) {
      if (!decoder_->member_ended)
        throw error(path_, ": truncated ", compression_name(compression_),
                    " stream: the file ends at byte ", file_offset_, " inside a compressed ",
                    compression_ == Compression::gzip ? "member" : "frame",
                    " (an interrupted download or copy? fetch the file again, or leave it out)");
      return 0;
    }
    const double start = now_s();
    const size_t offset_before = in_begin_;
    if (compression_ == Compression::gzip) {
      z_stream& z = decoder_->gzip;
      if (decoder_->member_ended && in_begin_ < in_end_) {
        inflateReset(&z);  // concatenated gzip members, as `cat a.gz b.gz` makes
        decoder_->member_ended = false;
      }
      z.next_in = reinterpret_cast<Bytef*>(in_.data() + in_begin_);
      z.avail_in = static_cast<uInt>(in_end_ - in_begin_);
      z.next_out = reinterpret_cast<Bytef*>(out);
      z.avail_out = static_cast<uInt>(capacity);
      const int status = inflate(&z, Z_NO_FLUSH);
      in_begin_ = in_end_ - z.avail_in;
      produced = capacity - z.avail_out;
      if (status == Z_STREAM_END) {
        decoder_->member_ended = true;
      } else if (status != Z_OK && status != Z_BUF_ERROR) {
        throw error(path_, ": corrupt gzip data near byte ",
                    file_offset_ - static_cast<int64_t>(in_end_ - in_begin_), ": ",
                    z.msg ? z.msg : "inflate failed");
      }
    } else {
      ZSTD_inBuffer input{in_.data() + in_begin_, in_end_ - in_begin_, 0};
      ZSTD_outBuffer output{out, capacity, 0};
      const size_t status = ZSTD_decompressStream(decoder_->zstd, &output, &input);
      if (ZSTD_isError(status))
        throw error(path_, ": corrupt zstd data near byte ",
                    file_offset_ - static_cast<int64_t>(in_end_ - in_begin_), ": ",
                    ZSTD_getErrorName(status));
      in_begin_ += input.pos;
      produced = output.pos;
      decoder_->member_ended = status == 0;
    }
    decompress_seconds_ += now_s() - start;
    if (produced == 0 && in_begin_ == offset_before && in_begin_ < in_end_)
      throw error(path_, ": the ", compression_name(compression_),
                  " decoder made no progress at byte ",
                  file_offset_ - static_cast<int64_t>(in_end_ - in_begin_));
  }
  return produced;
}

std::string BadRecord::describe() const {
  return path + ":" + std::to_string(line) + ": " + reason;
}

namespace {

// Lines of a ByteStream, each without its '\n' (and '\r'), numbered from 1.
class LineReader {
 public:
  explicit LineReader(ByteStream& stream) : stream_(stream) {}

  bool next(std::string_view* line) {
    for (;;) {
      const size_t newline = buffer_.find('\n', begin_);
      if (newline != std::string::npos) {
        *line = std::string_view(buffer_).substr(begin_, newline - begin_);
        begin_ = newline + 1;
        return finish(line);
      }
      buffer_.erase(0, begin_);
      begin_ = 0;
      const size_t old = buffer_.size();
      buffer_.resize(old + kChunkBytes);
      const size_t got = stream_.read(buffer_.data() + old, kChunkBytes);
      buffer_.resize(old + got);
      bytes_ += static_cast<int64_t>(got);
      if (got == 0) {
        if (buffer_.empty()) return false;
        *line = buffer_;
        begin_ = buffer_.size();
        return finish(line);
      }
    }
  }
  int64_t line_number() const { return line_number_; }
  int64_t bytes() const { return bytes_; }

 private:
  bool finish(std::string_view* line) {
    if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
    ++line_number_;
    return true;
  }

  ByteStream& stream_;
  std::string buffer_;
  size_t begin_ = 0;
  int64_t line_number_ = 0, bytes_ = 0;
};

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\f\v") == std::string_view::npos;
}

// read_records' loop: lines into records.
void cut_records(LineReader& lines, const std::string& path, const RecordReaderOptions& options,
                 const std::function<void(InputRecord&&)>& on_record, RecordReaderStats* stats) {
  InputFormat format =
      options.format == InputFormat::automatic ? input_format_by_name(path) : options.format;
  if (format != InputFormat::automatic) stats->format = format;
  std::string current;  // plain text: the document being gathered
  int64_t first_line = 0;
  auto finish = [&] {
    if (current.empty()) return;
    count_bad_text(current, *stats);
    ++stats->records;
    on_record({std::move(current), first_line, false});
    current.clear();
  };
  std::string_view line;
  while (lines.next(&line)) {
    if (is_blank(line)) {
      finish();
      continue;
    }
    if (format == InputFormat::automatic) {  // the first non-blank line decides
      std::string ignored;
      const JsonFieldStatus status = json_string_field(line, "", &ignored).status;
      format = status == JsonFieldStatus::not_json || status == JsonFieldStatus::not_object
                   ? InputFormat::text
                   : InputFormat::jsonl;
      stats->format = format;
    }
    if (format == InputFormat::jsonl) {
      ++stats->records;
      on_record({std::string(line), lines.line_number(), true});
      continue;
    }
    if (current.empty()) first_line = lines.line_number();
    if (!current.empty()) current += '\n';
    current += line;
    if (static_cast<int64_t>(current.size()) >= options.max_document_bytes) finish();
  }
  finish();
}

}  // namespace

bool record_document(InputRecord& record, const std::string& text_field, std::string* document,
                     std::string* reason) {
  if (!record.json) {
    *document = std::move(record.text);
    return true;
  }
  const JsonFieldResult found = json_string_field(record.text, text_field, document);
  switch (found.status) {
    case JsonFieldStatus::not_json:
      *reason = std::string("not valid JSON (") + found.error + " at byte " +
                std::to_string(found.error_offset) + ")";
      return false;
    case JsonFieldStatus::not_object:
      *reason = "not a JSON object";
      return false;
    case JsonFieldStatus::missing:
      *reason = "no field \"" + text_field + "\" (choose it with --text-field)";
      return false;
    case JsonFieldStatus::not_string:
      *reason = "field \"" + text_field + "\" is not a string";
      return false;
    case JsonFieldStatus::ok:
      break;
  }
  if (is_blank(*document) && document->find('\n') == std::string::npos) {
    *reason = "field \"" + text_field + "\" is empty";
    return false;
  }
  return true;
}

void read_records(ByteStream& stream, const std::string& path, const RecordReaderOptions& options,
                  const std::function<void(InputRecord&&)>& on_record, RecordReaderStats* stats) {
  *stats = RecordReaderStats{};
  LineReader lines(stream);
  try {
    cut_records(lines, path, options, on_record, stats);
  } catch (...) {
    stats->decompressed_bytes = lines.bytes();
    throw;
  }
  stats->decompressed_bytes = lines.bytes();
}

}  // namespace boostlm
