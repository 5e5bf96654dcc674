// The CUDA backend as a module loaded on first use. The CUDA runtime, cuBLAS and NCCL map
// nearly 900 MB of address space when they load; a CPU run should not pay for them (nor fail
// under `ulimit -v` before main). So in a build with CUDA they live in libringside_cuda.so,
// beside the executable: src/core/gpu_cuda.cpp, src/device/cuda_backend.cpp and
// src/comm/nccl.cpp, with kernels/cuda. The ringside executable exports its own symbols
// (core, tensors, communicators) for the module to use, and dlopen()s it on the first call
// that needs a GPU (`--device cuda`, `--backend nccl`, `bench cuda`). Each layer reaches its
// part of the module through one C entry point:
//   ringside_cuda_runtime       core/gpu.h        (gpu::Runtime, core/gpu_runtime.h)
//   ringside_make_cuda_backend  device/backend.h  (make_cuda_backend)
//   ringside_run_nccl, ringside_nccl_world  comm/communicator.h
#pragma once

namespace ringside::cuda_module {

/// The module's file name, looked for in the executable's directory.
inline constexpr const char* kFileName = "libringside_cuda.so";

/// The address of the C function `name` of the CUDA module: this executable's own when the
/// module's sources are linked into it (the CUDA tests), else libringside_cuda.so in the
/// executable's directory, loaded on the first call (RTLD_NOW: every symbol resolved then).
/// Throws ConfigError naming the file and the loader's reason when it cannot be loaded (not
/// there, a CUDA library missing, an address-space limit) or has no such function.
void* symbol(const char* name);

/// symbol(name) as the C function of type F it is: entry<gpu::Runtime*()>("ringside_cuda_runtime")().
template <class F>
F* entry(const char* name) {
  return reinterpret_cast<F*>(symbol(name));
}

}  // namespace ringside::cuda_module
