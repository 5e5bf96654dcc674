// NumPy .npy files (format versions 1.0, 2.0 and 3.0), little-endian fp32 and fp64, C order.
// The format: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
#pragma once
#include <string>

#include "core/tensor.h"

namespace ringside {

/// Writes a CPU tensor as .npy (version 1.0, or 2.0 when the header needs it), descr '<f4' or
/// '<f8', C order. Throws ringside::Error if the file cannot be written.
void write_npy(const std::string& path, const Tensor& t);

/// Reads a .npy file of '<f4' or '<f8' in C order into a CPU tensor tagged `tag`. Throws
/// ringside::Error, naming the file and the problem, for a bad magic string, an unsupported
/// version, dtype or byte order, Fortran order, a malformed header, or truncated data.
Tensor read_npy(const std::string& path, AllocTag tag = {});

}  // namespace ringside
