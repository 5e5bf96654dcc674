// Device query: the first CUDA code of the build, so that every build with nvcc compiles and
// links CUDA. The kernels of the CUDA backend join this directory with issue 9.
#include <cuda_runtime.h>

namespace ringside {

int cuda_device_count() {
  int n = 0;
  // No driver or no device is not an error here: it means zero GPUs.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace ringside
