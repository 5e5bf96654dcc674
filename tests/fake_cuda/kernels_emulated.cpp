// kernels/cuda/kernels.cu compiled as C++: the kernels on the CPU emulation of compat.h, for
// the fake-CUDA build of the core (tests/fake_cuda), each launch queued on its fake stream.
#include "cuda_runtime_api.h"
#define RS_EMU_STREAM_ENQUEUE(stream, fn) ::fake_cuda::enqueue(static_cast<cudaStream_t>(stream), fn)
#include "kernels/cuda/kernels.cu"
