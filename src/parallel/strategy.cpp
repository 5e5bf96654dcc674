#include "parallel/strategy.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "parallel/ring_attention.h"
#include "parallel/tp_sp.h"
#include "parallel/ulysses.h"

namespace ringside {

const std::vector<Strategy>& strategies() {
  static const std::vector<Strategy> all = {tp_sp_strategy(), ring_strategy(), ulysses_strategy()};
  return all;
}

const Strategy& find_strategy(const std::string& name) {
  std::string names;
  for (const Strategy& s : strategies()) {
    if (s.name == name) return s;
    names += (names.empty() ? "" : ", ") + s.name;
  }
  throw ConfigError("unknown strategy '" + name + "' (this build has: " + names + ")");
}

std::vector<RankResult> run_strategy_local(const Strategy& st, const LayerConfig& cfg, int P, DType dt,
                                           MemoryTracker& tracker, const LocalOptions& opts) {
  st.validate(cfg, P);  // one clear error before any thread starts
  std::vector<RankResult> results(P);
  auto be = make_cpu_backend();
  run_local(
      P, [&](Communicator& comm) { results[comm.rank()] = st.run(cfg, comm, *be, tracker, dt); }, opts);
  return results;
}

void all_reduce_packed(Communicator& comm, const std::vector<Tensor*>& tensors, AllocTag tag) {
  int64_t n = 0;
  for (const Tensor* t : tensors) n += t->numel();
  Tensor packed = Tensor::empty({n}, tensors.at(0)->dtype(), tag);
  auto* p = static_cast<char*>(packed.raw_data());
  for (const Tensor* t : tensors) std::memcpy(p, t->raw_data(), static_cast<size_t>(t->nbytes())), p += t->nbytes();
  comm.all_reduce(packed);
  p = static_cast<char*>(packed.raw_data());
  for (Tensor* t : tensors) std::memcpy(t->raw_data(), p, static_cast<size_t>(t->nbytes())), p += t->nbytes();
}

PhaseMeter::PhaseMeter(Communicator& comm) : comm_(comm), s0_(comm.stats()), t0_(std::chrono::steady_clock::now()) {}
void PhaseMeter::forward_done() { s1_ = comm_.stats(), t1_ = std::chrono::steady_clock::now(); }
void PhaseMeter::backward_done() { s2_ = comm_.stats(), t2_ = std::chrono::steady_clock::now(); }

void PhaseMeter::fill(RankResult& r, const MemoryTracker& tracker) const {
  auto diff = [](const CommStats& a, const CommStats& b) {
    return CommStats{b.bytes_sent - a.bytes_sent, b.bytes_received - a.bytes_received, b.messages_sent - a.messages_sent};
  };
  r.forward = diff(s0_, s1_);
  r.backward = diff(s1_, s2_);
  r.forward_s = std::chrono::duration<double>(t1_ - t0_).count();
  r.backward_s = std::chrono::duration<double>(t2_ - t1_).count();
  r.peak_saved = tracker.peak(comm_.rank(), MemCategory::activations);
}

Tensor slice_seq(const Tensor& t, int64_t s0, int64_t n, AllocTag tag) {
  RS_CHECK(t.ndim() >= 2 && s0 >= 0 && s0 + n <= t.dim(1), "slice_seq: tokens [", s0, ", ", s0 + n, ") of ",
           to_string(t.shape()));
  Shape shape = t.shape();
  shape[1] = n;
  Tensor out = Tensor::empty(shape, t.dtype(), tag);
  const int64_t row = t.numel() / (t.dim(0) * t.dim(1)) * dtype_size(t.dtype());  // bytes per token
  const auto* src = static_cast<const char*>(t.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int64_t b = 0; b < t.dim(0); ++b)
    std::memcpy(dst + b * n * row, src + (b * t.dim(1) + s0) * row, static_cast<size_t>(n * row));
  return out;
}

Tensor gather_seq(Communicator& comm, const Tensor& shard, AllocTag tag) {
  const int P = comm.size();
  const Tensor all = comm.all_gather(shard, tag);  // [P][b][n][...]
  Shape shape = shard.shape();
  const int64_t b = shape[0], n = shape[1];
  shape[1] = n * P;
  Tensor out = Tensor::empty(shape, shard.dtype(), tag);
  const int64_t row = shard.numel() / (b * n) * dtype_size(shard.dtype());
  const auto* src = static_cast<const char*>(all.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int r = 0; r < P; ++r)
    for (int64_t bi = 0; bi < b; ++bi)
      std::memcpy(dst + (bi * n * P + r * n) * row, src + (r * b + bi) * n * row, static_cast<size_t>(n * row));
  return out;
}

Tensor reduce_scatter_seq(Communicator& comm, const Tensor& t, AllocTag tag) {
  const int P = comm.size();
  const int64_t b = t.dim(0), s = t.dim(1), n = s / P;
  RS_CHECK(s % P == 0, "reduce_scatter_seq: sequence ", s, " does not split over ", P, " ranks");
  // Pack as [P][b][s/P][...] so that each rank's tokens are one contiguous chunk.
  Shape packed_shape = t.shape();
  packed_shape[1] = n;
  packed_shape.insert(packed_shape.begin(), P);
  Tensor packed = Tensor::empty(packed_shape, t.dtype(), tag);
  const int64_t row = t.numel() / (b * s) * dtype_size(t.dtype());
  const auto* src = static_cast<const char*>(t.raw_data());
  auto* dst = static_cast<char*>(packed.raw_data());
  for (int r = 0; r < P; ++r)
    for (int64_t bi = 0; bi < b; ++bi)
      std::memcpy(dst + (r * b + bi) * n * row, src + (bi * s + r * n) * row, static_cast<size_t>(n * row));
  Shape out_shape = t.shape();
  out_shape[1] = n;
  return comm.reduce_scatter(packed, tag).reshape(out_shape);
}

Tensor take_tokens(const Tensor& t, const std::vector<int64_t>& pos, AllocTag tag) {
  Shape shape = t.shape();
  shape[1] = static_cast<int64_t>(pos.size());
  Tensor out = Tensor::empty(shape, t.dtype(), tag);
  const int64_t row = t.numel() / (t.dim(0) * t.dim(1)) * dtype_size(t.dtype());
  const auto* src = static_cast<const char*>(t.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int64_t b = 0; b < t.dim(0); ++b)
    for (size_t i = 0; i < pos.size(); ++i)
      std::memcpy(dst + (b * shape[1] + int64_t(i)) * row, src + (b * t.dim(1) + pos[i]) * row, static_cast<size_t>(row));
  return out;
}

Tensor gather_tokens(Communicator& comm, const Tensor& shard, const std::function<std::vector<int64_t>(int)>& positions_of,
                     int64_t s, AllocTag tag) {
  const int P = comm.size();
  const Tensor all = comm.all_gather(shard, tag);  // [P][b][n][...]
  Shape shape = shard.shape();
  const int64_t b = shape[0], n = shape[1];
  shape[1] = s;
  Tensor out = Tensor::empty(shape, shard.dtype(), tag);
  const int64_t row = shard.numel() / (b * n) * dtype_size(shard.dtype());
  const auto* src = static_cast<const char*>(all.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int r = 0; r < P; ++r) {
    const auto pos = positions_of(r);
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(dst + (bi * s + pos[i]) * row, src + ((r * b + bi) * n + i) * row, static_cast<size_t>(row));
  }
  return out;
}

void put_seq(Tensor& dst, const Tensor& src, int64_t s0) {
  const int64_t b = src.dim(0), n = src.dim(1), row = src.numel() / (b * n) * dtype_size(src.dtype());
  for (int64_t bi = 0; bi < b; ++bi)
    std::memcpy(static_cast<char*>(dst.raw_data()) + (bi * dst.dim(1) + s0) * row,
                static_cast<const char*>(src.raw_data()) + bi * n * row, static_cast<size_t>(n * row));
}

Tensor slice_cols(const Tensor& m, const std::vector<std::pair<int64_t, int64_t>>& segments, AllocTag tag) {
  const int64_t rows = m.ndim() == 1 ? 1 : m.dim(0), cols = m.dim(-1), es = dtype_size(m.dtype());
  int64_t width = 0;
  for (auto [a, e] : segments) width += e - a;
  Tensor out = Tensor::empty(m.ndim() == 1 ? Shape{width} : Shape{rows, width}, m.dtype(), tag);
  const auto* src = static_cast<const char*>(m.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int64_t r = 0; r < rows; ++r) {
    int64_t o = 0;
    for (auto [a, e] : segments) {
      std::memcpy(dst + (r * width + o) * es, src + (r * cols + a) * es, static_cast<size_t>((e - a) * es));
      o += e - a;
    }
  }
  return out;
}

Tensor gather_cols(Communicator& comm, const Tensor& local, int64_t cols,
                   const std::function<std::vector<std::pair<int64_t, int64_t>>(int)>& segments_of, AllocTag tag) {
  const int P = comm.size();
  const int64_t rows = local.ndim() == 1 ? 1 : local.dim(0), width = local.dim(-1), es = dtype_size(local.dtype());
  const Tensor all = comm.all_gather(local, tag);  // [P][rows][width]
  Tensor out = Tensor::empty(local.ndim() == 1 ? Shape{cols} : Shape{rows, cols}, local.dtype(), tag);
  const auto* src = static_cast<const char*>(all.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int r = 0; r < P; ++r)
    for (int64_t row = 0; row < rows; ++row) {
      int64_t o = 0;
      for (auto [a, e] : segments_of(r)) {
        std::memcpy(dst + (row * cols + a) * es, src + ((r * rows + row) * width + o) * es,
                    static_cast<size_t>((e - a) * es));
        o += e - a;
      }
    }
  return out;
}

Tensor slice_rows(const Tensor& m, int64_t r0, int64_t n, AllocTag tag) {
  const int64_t cols = m.ndim() == 1 ? 1 : m.dim(1), es = dtype_size(m.dtype());
  Tensor out = Tensor::empty(m.ndim() == 1 ? Shape{n} : Shape{n, cols}, m.dtype(), tag);
  std::memcpy(out.raw_data(), static_cast<const char*>(m.raw_data()) + r0 * cols * es, static_cast<size_t>(n * cols * es));
  return out;
}

int64_t ring_all_gather_bytes(int64_t n, int P, int rank, DType dt) {
  if (P == 1) return 0;
  return (n - even_counts(n, P)[(rank + 1) % P]) * dtype_size(dt);  // every chunk but the right neighbour's
}

int64_t ring_reduce_scatter_bytes(int64_t n, int P, int rank, DType dt) {
  if (P == 1) return 0;
  return (n - even_counts(n, P)[rank]) * dtype_size(dt);  // every chunk but its own
}

int64_t ring_all_reduce_bytes(int64_t n, int P, int rank, DType dt) {
  return ring_reduce_scatter_bytes(n, P, rank, dt) + ring_all_gather_bytes(n, P, rank, dt);
}

void maybe_inject_failure(int rank, const char* phase) {
  const char* spec = std::getenv("RINGSIDE_INJECT_FAILURE");
  if (!spec) return;
  std::istringstream in(spec);
  int r = -1;
  char colon = 0;
  std::string p;
  if (in >> r >> colon >> p && r == rank && p == phase)
    throw Error(detail::concat("injected failure at the start of the ", phase, " (RINGSIDE_INJECT_FAILURE)"));
}

}  // namespace ringside
