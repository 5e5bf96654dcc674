#include "comm/tensor_comm.h"

#include "device/backend.h"
#include "trace/trace.h"

namespace ringside {

void all_reduce_packed(Communicator& comm, const std::vector<Tensor*>& tensors, AllocTag tag) {
  int64_t n = 0;
  for (const Tensor* t : tensors) n += t->numel();
  Tensor packed = Tensor::empty({n}, tensors.at(0)->dtype(), tag);
  auto* p = static_cast<char*>(packed.raw_data());
  {
    trace::Span copy("all_reduce pack", trace::Kind::memory, 0, 2 * packed.nbytes());
    if (!packed.is_dry())  // a dry run (what-if model) records the copy but moves nothing
      for (const Tensor* t : tensors) copy_bytes(p, t->raw_data(), t->nbytes()), p += t->nbytes();
  }
  comm.all_reduce(packed);
  trace::Span copy("all_reduce unpack", trace::Kind::memory, 0, 2 * packed.nbytes());
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
  trace::Span copy("slice_seq", trace::Kind::memory, 0, 2 * out.nbytes());
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
  trace::Span copy("gather_seq reorder", trace::Kind::memory, 0, 2 * out.nbytes());
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
    trace::Span copy("reduce_scatter_seq pack", trace::Kind::memory, 0, 2 * packed.nbytes());
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
  trace::Span copy("take_tokens", trace::Kind::memory, 0, 2 * out.nbytes());
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
  trace::Span copy("gather_tokens reorder", trace::Kind::memory, 0, 2 * out.nbytes());
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
  trace::Span copy("put_seq", trace::Kind::memory, 0, 2 * src.nbytes());
  if (dst.is_dry()) return;
  const int64_t b = src.dim(0), n = src.dim(1), row = src.numel() / (b * n) * dtype_size(src.dtype());
  copy_rows(static_cast<char*>(dst.raw_data()) + s0 * row, dst.dim(1) * row, src.raw_data(), n * row, n * row, b);
}

Tensor slice_cols(const Tensor& m, const std::vector<std::pair<int64_t, int64_t>>& segments, AllocTag tag) {
  const int64_t rows = m.ndim() == 1 ? 1 : m.dim(0), cols = m.dim(-1), es = dtype_size(m.dtype());
  int64_t width = 0;
  for (auto [a, e] : segments) width += e - a;
  Tensor out = Tensor::empty(m.ndim() == 1 ? Shape{width} : Shape{rows, width}, m.dtype(), tag);
  trace::Span copy("slice_cols", trace::Kind::memory, 0, 2 * out.nbytes());
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
  trace::Span copy("gather_cols reorder", trace::Kind::memory, 0, 2 * out.nbytes());
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
  trace::Span copy("slice_rows", trace::Kind::memory, 0, 2 * out.nbytes());
  if (out.is_dry()) return out;
  copy_bytes(out.raw_data(), static_cast<const char*>(m.raw_data()) + r0 * cols * es, n * cols * es);
  return out;
}

// Heads [from, from + count) of src [b, n, Hs, d] into heads [to, to + count) of dst [b, n, Hd, d]:
// one strided copy of b n rows. The callers own the dry-run check.
static void copy_heads(Tensor& dst, int64_t to, const Tensor& src, int64_t from, int64_t count) {
  const int64_t head = src.dim(3) * dtype_size(src.dtype());  // bytes per head
  copy_rows(static_cast<char*>(dst.raw_data()) + to * head, dst.dim(2) * head,
            static_cast<const char*>(src.raw_data()) + from * head, src.dim(2) * head, count * head,
            dst.dim(0) * dst.dim(1));
}

Tensor heads_of(const Tensor& t, int64_t first, int64_t count, AllocTag tag) {
  Tensor out = Tensor::empty({t.dim(0), t.dim(1), count, t.dim(3)}, t.dtype(), tag, t.device());
  if (!t.is_dry()) copy_heads(out, 0, t, first, count);
  return out;
}

void put_heads(Tensor& dst, const Tensor& src, int64_t first) {
  if (!dst.is_dry()) copy_heads(dst, first, src, 0, src.dim(2));
}

void add_into_heads(Backend& be, Tensor& dst, int64_t first, const Tensor& src) {
  Tensor sum = Tensor::empty(src.shape(), src.dtype(), src.tag(), src.device());
  if (!dst.is_dry()) copy_heads(sum, 0, dst, first, src.dim(2));
  be.add(sum, src, sum);
  put_heads(dst, sum, first);
}

// Where each rank's block starts in a buffer of the blocks in rank order: [0, c0, c0 + c1, ...].
static std::vector<int64_t> offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> off(counts.size() + 1, 0);
  for (size_t j = 0; j < counts.size(); ++j) off[j + 1] = off[j] + counts[j];
  return off;
}

namespace {
// The all-to-all's send and receive buffers: communication memory, freed when it returns, not
// the activations it produces.
AllocTag comm_buffers(AllocTag tag) {
  tag.category = MemCategory::comm;
  return tag;
}
}  // namespace

Tensor seq_to_heads(Communicator& comm, const Tensor& t, const HeadRanges& heads, AllocTag tag) {
  const int U = comm.size(), me = comm.rank();
  const int64_t b = t.dim(0), n = t.dim(1), X = t.dim(2), d = t.dim(3), cm = heads[me].second, es = dtype_size(t.dtype());
  std::vector<int64_t> send_counts, recv_counts(U, b * n * cm * d);
  for (const auto& [first, count] : heads) send_counts.push_back(b * n * count * d);
  const std::vector<int64_t> soff = offsets(send_counts), roff = offsets(recv_counts);
  const AllocTag buffers = comm_buffers(tag);
  Tensor send = Tensor::empty({soff[U]}, t.dtype(), buffers), recv = Tensor::empty({roff[U]}, t.dtype(), buffers);
  {
    trace::Span copy("all_to_all pack", trace::Kind::memory, 0, 2 * send.nbytes());
    for (int j = 0; j < U && !send.is_dry(); ++j)  // to rank j: its heads of our tokens
      copy_rows(static_cast<char*>(send.raw_data()) + soff[j] * es, heads[j].second * d * es,
                static_cast<const char*>(t.raw_data()) + heads[j].first * d * es, X * d * es, heads[j].second * d * es, b * n);
  }
  comm.all_to_all(send.raw_data(), send_counts, recv.raw_data(), recv_counts, t.dtype());
  Tensor out = Tensor::empty({b, n * U, cm, d}, t.dtype(), tag);
  trace::Span copy("all_to_all unpack", trace::Kind::memory, 0, 2 * out.nbytes());
  for (int j = 0; j < U && !out.is_dry(); ++j)  // from rank j: its tokens [j n, (j+1) n), our heads
    copy_rows(static_cast<char*>(out.raw_data()) + j * n * cm * d * es, n * U * cm * d * es,
              static_cast<const char*>(recv.raw_data()) + roff[j] * es, n * cm * d * es, n * cm * d * es, b);
  return out;
}

Tensor heads_to_seq(Communicator& comm, Backend& be, const Tensor& t, int64_t H, const HeadRanges& heads, AllocTag tag) {
  const int U = comm.size();
  const int64_t b = t.dim(0), n = t.dim(1) / U, cm = t.dim(2), d = t.dim(3), es = dtype_size(t.dtype());
  std::vector<int64_t> send_counts(U, b * n * cm * d), recv_counts;
  for (const auto& [first, count] : heads) recv_counts.push_back(b * n * count * d);
  const std::vector<int64_t> roff = offsets(recv_counts);
  const AllocTag buffers = comm_buffers(tag);
  Tensor send = Tensor::empty({U * b * n * cm * d}, t.dtype(), buffers), recv = Tensor::empty({roff[U]}, t.dtype(), buffers);
  {
    trace::Span copy("all_to_all pack", trace::Kind::memory, 0, 2 * send.nbytes());
    for (int j = 0; j < U && !send.is_dry(); ++j)  // to rank j: its tokens, our heads
      copy_rows(static_cast<char*>(send.raw_data()) + j * b * n * cm * d * es, n * cm * d * es,
                static_cast<const char*>(t.raw_data()) + j * n * cm * d * es, n * U * cm * d * es, n * cm * d * es, b);
  }
  comm.all_to_all(send.raw_data(), send_counts, recv.raw_data(), recv_counts, t.dtype());
  bool shared = false;
  for (int j = 1; j < U; ++j) shared |= heads[j].first < heads[j - 1].first + heads[j - 1].second;
  Tensor out = shared ? be.zeros({b, n, H, d}, t.dtype(), tag) : Tensor::empty({b, n, H, d}, t.dtype(), tag);
  trace::Span copy("all_to_all unpack", trace::Kind::memory, 0, 2 * out.nbytes());
  for (int j = 0; j < U && !out.is_dry(); ++j) {  // from rank j: its heads of our tokens
    const auto* block = static_cast<const char*>(recv.raw_data()) + roff[j] * es;
    if (!shared) {
      copy_rows(static_cast<char*>(out.raw_data()) + heads[j].first * d * es, H * d * es, block,
                heads[j].second * d * es, heads[j].second * d * es, b * n);
      continue;
    }
    Tensor part = Tensor::empty({b, n, heads[j].second, d}, t.dtype(), buffers);
    copy_bytes(part.raw_data(), block, part.nbytes());
    add_into_heads(be, out, heads[j].first, part);
  }
  return out;
}

Tensor repeat_kv_heads(const Tensor& t, const std::vector<int64_t>& kv_of, AllocTag tag) {
  const int64_t heads = static_cast<int64_t>(kv_of.size());
  Tensor out = Tensor::empty({t.dim(0), t.dim(1), heads, t.dim(3)}, t.dtype(), tag, t.device());
  trace::Span copy("repeat kv heads", trace::Kind::memory, 0, t.nbytes() + out.nbytes());
  for (int64_t i = 0; i < heads && !out.is_dry(); ++i) copy_heads(out, i, t, kv_of[i], 1);
  return out;
}

Tensor sum_kv_heads(Backend& be, const Tensor& dt, const std::vector<int64_t>& kv_of, int64_t Hkv, AllocTag tag) {
  Tensor out = be.zeros({dt.dim(0), dt.dim(1), Hkv, dt.dim(3)}, dt.dtype(), tag);
  for (size_t i = 0; i < kv_of.size(); ++i) add_into_heads(be, out, kv_of[i], heads_of(dt, int64_t(i), 1, tag));
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
