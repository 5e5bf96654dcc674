// What the CUDA module (core/cuda_module.h) implements of core/gpu.h: the calls that touch
// the CUDA runtime, one virtual each, with gpu.h's meaning. core/gpu.cpp forwards to it;
// src/core/gpu_cuda.cpp, in the module, implements it. Nothing else includes this header.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/gpu.h"

namespace ringside::gpu {

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual int device_count() = 0;
  virtual std::string describe(int device) = 0;
  /// The streams of (device, slot), created on first use, with the calling thread made
  /// current on `device` and the device's clock anchored (gpu::Bind). Throws ringside::Error
  /// when the device does not exist.
  virtual const RankStreams& bind(int device, int slot) = 0;
  virtual void* allocate(int64_t bytes, const RankStreams& s) = 0;
  virtual void release(void* p, const RankStreams& s) = 0;
  virtual void copy(void* dst, const void* src, int64_t bytes) = 0;
  virtual void copy_2d(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t width,
                       int64_t rows) = 0;
  virtual void zero(void* p, int64_t bytes) = 0;
  virtual void fill(float* p, int64_t n, float value) = 0;
  virtual void add(const float* a, const float* b, float* out, int64_t n) = 0;
  virtual void synchronize() = 0;
  virtual bool is_device_pointer(const void* p) = 0;
  virtual std::shared_ptr<Event> record(bool comm) = 0;
  virtual void comm_wait(const Event& e) = 0;
  virtual void transfer(const RankStreams& sender, void* to, const void* from, int64_t bytes,
                        const std::vector<const Event*>& after, double timeout_s, int64_t& start_ns,
                        int64_t& end_ns) = 0;
};

}  // namespace ringside::gpu
