#include "core/npy.h"

#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/error.h"
#include "core/output.h"

namespace ringside {

namespace {
constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
}  // namespace

void write_npy(const std::string& path, const Tensor& t) {
  RS_CHECK(t.defined() && t.device() == Device::cpu, "write_npy ", path, ": need a defined CPU tensor");
  std::ostringstream dict;
  dict << "{'descr': '" << (t.dtype() == DType::f32 ? "<f4" : "<f8")
       << "', 'fortran_order': False, 'shape': (";
  for (int i = 0; i < t.ndim(); ++i) dict << (i ? ", " : "") << t.shape()[i];
  if (t.ndim() == 1) dict << ',';  // a 1-tuple is written "(n,)"
  dict << "), }";
  std::string header = dict.str();

  // The header is padded with spaces and ends in '\n' so that the data starts on a 64-byte
  // boundary (as NumPy writes it). Version 1.0 has a 2-byte length, 2.0 a 4-byte one.
  const bool v2 = header.size() + 1 + kMagicLen + 2 + 2 > 65535;
  const size_t prefix = kMagicLen + 2 + (v2 ? 4 : 2);
  const size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
  header.append(total - prefix - header.size() - 1, ' ');
  header.push_back('\n');

  // Whole or not at all (core/output.h): a temporary beside the file, renamed over it.
  output::write_with(
      path,
      [&](std::ostream& f) {
        f.write(kMagic, kMagicLen);
        const char version[2] = {static_cast<char>(v2 ? 2 : 1), 0};
        f.write(version, 2);
        const uint32_t len = static_cast<uint32_t>(header.size());
        const unsigned char len_bytes[4] = {static_cast<unsigned char>(len & 0xff),
                                            static_cast<unsigned char>((len >> 8) & 0xff),
                                            static_cast<unsigned char>((len >> 16) & 0xff),
                                            static_cast<unsigned char>((len >> 24) & 0xff)};
        f.write(reinterpret_cast<const char*>(len_bytes), v2 ? 4 : 2);
        f.write(header.data(), static_cast<std::streamsize>(header.size()));
        f.write(static_cast<const char*>(t.raw_data()), t.nbytes());
      },
      "write_npy");
}

Tensor read_npy(const std::string& path, AllocTag tag) {
  std::ifstream f(path, std::ios::binary);
  RS_CHECK(f, "read_npy: cannot open ", path);
  char magic[kMagicLen];
  unsigned char version[2];
  f.read(magic, kMagicLen);
  f.read(reinterpret_cast<char*>(version), 2);
  RS_CHECK(f && std::memcmp(magic, kMagic, kMagicLen) == 0, "read_npy: ", path, " is not a .npy file (bad magic string)");
  RS_CHECK(version[0] >= 1 && version[0] <= 3, "read_npy: ", path, ": unsupported .npy version ",
           int(version[0]), ".", int(version[1]));
  unsigned char len_bytes[4] = {0, 0, 0, 0};
  f.read(reinterpret_cast<char*>(len_bytes), version[0] == 1 ? 2 : 4);
  const uint32_t len = len_bytes[0] | (len_bytes[1] << 8) | (len_bytes[2] << 16) | (uint32_t(len_bytes[3]) << 24);
  // NumPy writes a few hundred bytes; a long header is not ours (and the regexes below recurse
  // once per character).
  RS_CHECK(f && len <= 4096, "read_npy: ", path, ": truncated or implausible header (", len, " bytes)");
  std::string header(len, '\0');
  f.read(header.data(), len);
  RS_CHECK(f, "read_npy: ", path, ": truncated header");

  std::smatch m;
  RS_CHECK(std::regex_search(header, m, std::regex(R"('descr'\s*:\s*'([^']*)')")), "read_npy: ", path,
           ": header has no 'descr'");
  const std::string descr = m[1];
  DType dtype;
  if (descr == "<f4") dtype = DType::f32;
  else if (descr == "<f8") dtype = DType::f64;
  else throw Error("read_npy: " + path + ": unsupported dtype '" + descr + "' (ringside reads '<f4' and '<f8')");
  RS_CHECK(std::regex_search(header, m, std::regex(R"('fortran_order'\s*:\s*(True|False))")), "read_npy: ",
           path, ": header has no 'fortran_order'");
  RS_CHECK(m[1] == "False", "read_npy: ", path, ": Fortran order is not supported (save in C order)");
  RS_CHECK(std::regex_search(header, m, std::regex(R"('shape'\s*:\s*\(([^)]*)\))")), "read_npy: ", path,
           ": header has no 'shape'");
  Shape shape;
  const std::string dims = m[1];
  const std::regex num(R"(\s*(\d+)\s*(,|$))");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num); it != std::sregex_iterator(); ++it)
    shape.push_back(std::stoll((*it)[1]));
  std::string rest = std::regex_replace(dims, std::regex(R"([\d,\s])"), "");
  RS_CHECK(rest.empty(), "read_npy: ", path, ": malformed shape '(", dims, ")'");

  Tensor t = Tensor::empty(shape, dtype, tag);
  f.read(static_cast<char*>(t.raw_data()), t.nbytes());
  RS_CHECK(f.gcount() == t.nbytes(), "read_npy: ", path, ": truncated data (expected ", t.nbytes(),
           " bytes for shape ", to_string(shape), ", got ", f.gcount(), ")");
  return t;
}

}  // namespace ringside
