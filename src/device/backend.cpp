#include "device/backend.h"

namespace ringside {

#ifndef RINGSIDE_HAVE_CUDA
int cuda_device_count() { return 0; }
#endif

}  // namespace ringside
