// The backend as the timeline sees it: every op recorded on the calling rank's tracer, and the
// GPU clock that times a GPU rank's ops by CUDA events on its stream.
#pragma once
#include <memory>

#include "device/backend.h"
#include "trace/trace.h"

namespace ringside::trace {

/// A backend that records every op of `inner` on the calling rank's tracer (name, kind, FLOPs
/// as the op's formula gives them, bytes read and written), then runs it. Ops on a thread
/// with no tracer run untouched.
std::unique_ptr<Backend> make_traced_backend(std::unique_ptr<Backend> inner);

/// The calling GPU rank's device clock (CUDA events on its compute stream). Throws
/// ringside::Error off a GPU rank or in a build without CUDA.
std::unique_ptr<DeviceClock> make_gpu_clock();

}  // namespace ringside::trace
