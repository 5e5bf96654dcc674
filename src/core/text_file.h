// Reading a whole input file (a trace, a profile) into memory, gzip undone, with the checks
// that keep a bad path or a huge file from costing more than an error.
#pragma once
#include <cstdint>
#include <string>

namespace ringside {

/// The most bytes ringside reads from one input file (after gunzipping).
inline constexpr uint64_t kMaxInputBytes = uint64_t(4) << 30;

/// The bytes `path` will hold once read: its size, or for a gzip file (its first bytes gzip's
/// magic 1f 8b, whatever its name) the size gzip's trailer records (modulo 4 GiB, as gzip
/// stores it). Throws Error ("cannot read <what> <path>:
/// ...") for a path that does not exist, a directory, or anything but a regular file, and
/// ("trace t.json is 5120 MiB; ringside reads traces up to 4 GiB") for one over kMaxInputBytes.
uint64_t input_size(const std::string& path, const std::string& what);

/// The contents of the regular file `path`, gunzipped when it is gzip (by its magic bytes, not
/// its name: a plain file named .gz is read as it is). `what` names
/// it in errors ("trace"). Refuses, before reading, a file over kMaxInputBytes (input_size) and
/// one whose `memory_per_byte` x size does not fit in memory (require_memory); a .gz that
/// unzips past kMaxInputBytes stops there. Throws Error for a corrupt or truncated gzip stream.
std::string read_input_file(const std::string& path, const std::string& what, double memory_per_byte);

}  // namespace ringside
