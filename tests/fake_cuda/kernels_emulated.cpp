// kernels/cuda/kernels.cu compiled as C++: the kernels on the CPU emulation of compat.h, for
// the fake-CUDA build of the core (tests/fake_cuda).
#include "kernels/cuda/kernels.cu"
