#include "comm/tensor_comm.h"

#include "trace/trace.h"

namespace ringside {

void all_reduce_packed(Communicator& comm, const std::vector<Tensor*>& tensors, AllocTag tag) {
  int64_t n = 0;
  for (const Tensor* t : tensors) n += t->numel();
  Tensor packed = Tensor::empty({n}, tensors.at(0)->dtype(), tag);
  auto* p = static_cast<char*>(packed.raw_data());
  {
    trace::Span copy("all_reduce pack", "memory", 0, 2 * packed.nbytes());
    if (!packed.is_dry())  // a dry run (what-if model) records the copy but moves nothing
      for (const Tensor* t : tensors) copy_bytes(p, t->raw_data(), t->nbytes()), p += t->nbytes();
  }
  comm.all_reduce(packed);
  trace::Span copy("all_reduce unpack", "memory", 0, 2 * packed.nbytes());
  if (packed.is_dry()) return;
  p = static_cast<char*>(packed.raw_data());
  for (Tensor* t : tensors) copy_bytes(t->raw_data(), p, t->nbytes()), p += t->nbytes();
}

// Calls f(i, len, stride) for the arithmetic runs of pos: pos[i + k] = pos[i] + k stride for
// k < len. Every layout's positions are a few such runs (contiguous, zigzag: stride 1;
// striped: stride P), so token copies are a few strided copies, not one per token.
template <class F> static void for_each_stride_run(const std::vector<int64_t>& pos, F&& f) {
  const int64_t n = static_cast<int64_t>(pos.size());
  for (int64_t i = 0; i < n;) {
    const int64_t stride = i + 1 < n && pos[i + 1] > pos[i] ? pos[i + 1] - pos[i] : 1;
    int64_t len = 1;
    while (i + len < n && pos[i + len] == pos[i] + len * stride) ++len;
    f(i, len, stride);
    i += len;
  }
}

Tensor slice_seq(const Tensor& t, int64_t s0, int64_t n, AllocTag tag) {
  RS_CHECK(t.ndim() >= 2 && s0 >= 0 && s0 + n <= t.dim(1), "slice_seq: tokens [", s0, ", ", s0 + n, ") of ",
           to_string(t.shape()));
  Shape shape = t.shape();
  shape[1] = n;
  Tensor out = Tensor::empty(shape, t.dtype(), tag);
  trace::Span copy("slice_seq", "memory", 0, 2 * out.nbytes());
  if (out.is_dry()) return out;
  const int64_t row = t.numel() / (t.dim(0) * t.dim(1)) * dtype_size(t.dtype());  // bytes per token
  const auto* src = static_cast<const char*>(t.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  copy_rows(dst, n * row, src + s0 * row, t.dim(1) * row, n * row, t.dim(0));
  return out;
}

Tensor gather_seq(Communicator& comm, const Tensor& shard, AllocTag tag) {
  const int P = comm.size();
  const Tensor all = comm.all_gather(shard, tag);  // [P][b][n][...]
  Shape shape = shard.shape();
  const int64_t b = shape[0], n = shape[1];
  shape[1] = n * P;
  Tensor out = Tensor::empty(shape, shard.dtype(), tag);
  trace::Span copy("gather_seq reorder", "memory", 0, 2 * out.nbytes());
  if (out.is_dry()) return out;
  const int64_t row = shard.numel() / (b * n) * dtype_size(shard.dtype());
  const auto* src = static_cast<const char*>(all.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int r = 0; r < P; ++r) copy_rows(dst + r * n * row, n * P * row, src + r * b * n * row, n * row, n * row, b);
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
  {
    trace::Span copy("reduce_scatter_seq pack", "memory", 0, 2 * packed.nbytes());
    for (int r = 0; r < P && !packed.is_dry(); ++r)  // (a dry run: no data, no copy)
      copy_rows(dst + r * b * n * row, n * row, src + r * n * row, s * row, n * row, b);
  }
  Shape out_shape = t.shape();
  out_shape[1] = n;
  return comm.reduce_scatter(packed, tag).reshape(out_shape);
}

Tensor take_tokens(const Tensor& t, const std::vector<int64_t>& pos, AllocTag tag) {
  Shape shape = t.shape();
  shape[1] = static_cast<int64_t>(pos.size());
  Tensor out = Tensor::empty(shape, t.dtype(), tag);
  trace::Span copy("take_tokens", "memory", 0, 2 * out.nbytes());
  if (out.is_dry()) return out;
  const int64_t row = t.numel() / (t.dim(0) * t.dim(1)) * dtype_size(t.dtype());
  const auto* src = static_cast<const char*>(t.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for_each_stride_run(pos, [&](int64_t i, int64_t len, int64_t stride) {
    for (int64_t b = 0; b < t.dim(0); ++b)
      copy_rows(dst + (b * shape[1] + i) * row, row, src + (b * t.dim(1) + pos[i]) * row, stride * row, row, len);
  });
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
  trace::Span copy("gather_tokens reorder", "memory", 0, 2 * out.nbytes());
  if (out.is_dry()) return out;
  const int64_t row = shard.numel() / (b * n) * dtype_size(shard.dtype());
  const auto* src = static_cast<const char*>(all.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int r = 0; r < P; ++r) {
    const auto pos = positions_of(r);
    for_each_stride_run(pos, [&](int64_t i, int64_t len, int64_t stride) {
      for (int64_t bi = 0; bi < b; ++bi)
        copy_rows(dst + (bi * s + pos[i]) * row, stride * row, src + ((r * b + bi) * n + i) * row, row, row, len);
    });
  }
  return out;
}

Tensor reduce_scatter_tokens(Communicator& comm, const Tensor& t,
                             const std::function<std::vector<int64_t>(int)>& positions_of, AllocTag tag) {
  const int P = comm.size();
  Shape shape = t.shape();
  const int64_t n = t.dim(1) / P;
  shape[1] = n;
  Shape packed_shape = shape;
  packed_shape.insert(packed_shape.begin(), P);
  Tensor packed = Tensor::empty(packed_shape, t.dtype(), tag);  // [P][b][n][...]: rank r's tokens, chunk r
  const int64_t chunk = packed.nbytes() / P;
  for (int r = 0; r < P && !packed.is_dry(); ++r) {
    const Tensor mine = take_tokens(t, positions_of(r), tag);
    copy_bytes(static_cast<char*>(packed.raw_data()) + r * chunk, mine.raw_data(), chunk);
  }
  return comm.reduce_scatter(packed, tag).reshape(shape);
}

void put_seq(Tensor& dst, const Tensor& src, int64_t s0) {
  trace::Span copy("put_seq", "memory", 0, 2 * src.nbytes());
  if (dst.is_dry()) return;
  const int64_t b = src.dim(0), n = src.dim(1), row = src.numel() / (b * n) * dtype_size(src.dtype());
  copy_rows(static_cast<char*>(dst.raw_data()) + s0 * row, dst.dim(1) * row, src.raw_data(), n * row, n * row, b);
}

Tensor slice_cols(const Tensor& m, const std::vector<std::pair<int64_t, int64_t>>& segments, AllocTag tag) {
  const int64_t rows = m.ndim() == 1 ? 1 : m.dim(0), cols = m.dim(-1), es = dtype_size(m.dtype());
  int64_t width = 0;
  for (auto [a, e] : segments) width += e - a;
  Tensor out = Tensor::empty(m.ndim() == 1 ? Shape{width} : Shape{rows, width}, m.dtype(), tag);
  trace::Span copy("slice_cols", "memory", 0, 2 * out.nbytes());
  if (out.is_dry()) return out;
  const auto* src = static_cast<const char*>(m.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  int64_t o = 0;
  for (auto [a, e] : segments) {
    copy_rows(dst + o * es, width * es, src + a * es, cols * es, (e - a) * es, rows);
    o += e - a;
  }
  return out;
}

Tensor gather_cols(Communicator& comm, const Tensor& local, int64_t cols,
                   const std::function<std::vector<std::pair<int64_t, int64_t>>(int)>& segments_of, AllocTag tag) {
  const int P = comm.size();
  const int64_t rows = local.ndim() == 1 ? 1 : local.dim(0), width = local.dim(-1), es = dtype_size(local.dtype());
  const Tensor all = comm.all_gather(local, tag);  // [P][rows][width]
  Tensor out = Tensor::empty(local.ndim() == 1 ? Shape{cols} : Shape{rows, cols}, local.dtype(), tag);
  trace::Span copy("gather_cols reorder", "memory", 0, 2 * out.nbytes());
  if (out.is_dry()) return out;
  const auto* src = static_cast<const char*>(all.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int r = 0; r < P; ++r) {
    int64_t o = 0;
    for (auto [a, e] : segments_of(r)) {
      copy_rows(dst + a * es, cols * es, src + (r * rows * width + o) * es, width * es, (e - a) * es, rows);
      o += e - a;
    }
  }
  return out;
}

Tensor slice_rows(const Tensor& m, int64_t r0, int64_t n, AllocTag tag) {
  const int64_t cols = m.ndim() == 1 ? 1 : m.dim(1), es = dtype_size(m.dtype());
  Tensor out = Tensor::empty(m.ndim() == 1 ? Shape{n} : Shape{n, cols}, m.dtype(), tag);
  trace::Span copy("slice_rows", "memory", 0, 2 * out.nbytes());
  if (out.is_dry()) return out;
  copy_bytes(out.raw_data(), static_cast<const char*>(m.raw_data()) + r0 * cols * es, n * cols * es);
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

}  // namespace ringside
