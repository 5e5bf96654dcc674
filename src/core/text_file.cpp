#include "core/text_file.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "core/error.h"
#include "core/memory_limits.h"

namespace ringside {

namespace {

// Whether the file is gzip: by its first two bytes, gzip's magic 1f 8b (RFC 1952), not by its
// name (a plain JSON file named .json.gz is read as it is; a gzip named .json is unzipped).
bool gzipped(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  unsigned char magic[2] = {};
  f.read(reinterpret_cast<char*>(magic), 2);
  return f.gcount() == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

// The bytes the file will hold once read (see input_size), unchecked against the limit.
uint64_t stored_size(const std::string& path, const std::string& what) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  RS_CHECK(!ec, "cannot read ", what, " ", path, ": ", ec.message());
  RS_CHECK(!std::filesystem::is_directory(status), "cannot read ", what, " ", path, ": it is a directory");
  RS_CHECK(std::filesystem::is_regular_file(status), "cannot read ", what, " ", path, ": not a regular file");
  const uint64_t size = std::filesystem::file_size(path, ec);
  RS_CHECK(!ec, "cannot read ", what, " ", path, ": ", ec.message());
  if (!gzipped(path) || size < 18) return size;  // 18: gzip's smallest header and trailer
  std::ifstream f(path, std::ios::binary);
  unsigned char t[4] = {};
  f.seekg(std::streamoff(size - 4));
  f.read(reinterpret_cast<char*>(t), 4);
  RS_CHECK(f.good(), "cannot read ", what, " ", path, ": ", std::strerror(errno));
  const uint64_t recorded = uint64_t(t[0]) | uint64_t(t[1]) << 8 | uint64_t(t[2]) << 16 | uint64_t(t[3]) << 24;
  // deflate expands at most 1032-fold: a larger figure is a corrupt or foreign trailer (the
  // reading checks again as the text grows).
  return std::min(recorded, 1032 * size);
}

}  // namespace

uint64_t input_size(const std::string& path, const std::string& what) {
  const uint64_t size = stored_size(path, what);
  RS_CHECK(size <= kMaxInputBytes, what, " ", path, " is ", size >> 20, " MiB; ringside reads ", what, "s up to ",
           kMaxInputBytes >> 30, " GiB");
  return size;
}

std::string read_input_file(const std::string& path, const std::string& what, double memory_per_byte) {
  const uint64_t size = input_size(path, what);
  require_memory(memory_per_byte * double(size), "reading " + what + " " + path, what, 1);
  try {
    if (!gzipped(path)) {
      std::ifstream f(path, std::ios::binary);
      RS_CHECK(f.good(), "cannot read ", what, " ", path, ": ", std::strerror(errno));
      std::string text(size, '\0');
      f.read(text.data(), std::streamsize(size));
      RS_CHECK(!f.bad() && uint64_t(f.gcount()) == size, "cannot read ", what, " ", path, ": read failed");
      return text;
    }
    // Closed on every way out: an error below (the memory check, a corrupt stream) included.
    std::unique_ptr<gzFile_s, int (*)(gzFile)> gz(gzopen(path.c_str(), "rb"), gzclose);
    RS_CHECK(gz != nullptr, "cannot read ", what, " ", path, ": ", std::strerror(errno));
    std::string text;
    text.reserve(size_t(size));
    char chunk[1 << 16];
    for (;;) {
      const int n = gzread(gz.get(), chunk, sizeof chunk);
      if (n < 0) {
        int code = 0;
        throw Error(detail::concat(what, " ", path, ": corrupt gzip (", gzerror(gz.get(), &code), ")"));
      }
      if (n == 0) break;
      RS_CHECK(text.size() + size_t(n) <= kMaxInputBytes, what, " ", path, " unzips past ", kMaxInputBytes >> 20,
               " MiB; ringside reads ", what, "s up to ", kMaxInputBytes >> 30, " GiB");
      // The trailer's size may understate (it wraps at 4 GiB): check again as the text grows.
      if (text.size() + size_t(n) > text.capacity())
        require_memory(memory_per_byte * double(2 * (text.size() + size_t(n))), "reading " + what + " " + path, what, 1);
      text.append(chunk, size_t(n));
    }
    // zlib says only on closing that the last read ended inside the compressed stream.
    RS_CHECK(gzclose(gz.release()) != Z_BUF_ERROR, what, " ", path,
             ": corrupt gzip (truncated: it ends inside the compressed stream)");
    return text;
  } catch (const std::bad_alloc&) {
    throw Error(detail::concat(what, " ", path, ": out of memory reading ", size >> 20, " MiB"));
  }
}

}  // namespace ringside
