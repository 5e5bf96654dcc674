// Tensors over ranks: slicing a tensor by tokens, columns, rows or heads, and putting the slices
// back together across a communicator (all-gather, reduce-scatter, all-reduce, the all-to-all
// of heads), with the bytes each ring collective makes a rank send. Every strategy and the
// token-wise layer split and gather through these (as picotron's *_communications files do).
// Each helper owns the dry run: a tensor without data (Tensor::is_dry) is allocated, counted and
// traced as in a real run, but no bytes are copied.
#pragma once
#include <functional>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"

namespace ringside {

class Backend;

/// Sums the tensors over all ranks, in place, with one ring all-reduce of their concatenation
/// (one message stream, not one per tensor). The staging buffer is tagged `tag` (comm).
void all_reduce_packed(Communicator& comm, const std::vector<Tensor*>& tensors, AllocTag tag);

/// Tokens [s0, s0 + n) of every batch row of t [b, s, ...] -> [b, n, ...], tagged `tag`.
Tensor slice_seq(const Tensor& t, int64_t s0, int64_t n, AllocTag tag);
/// The inverse for a contiguous sequence split: every rank holds [b, s/P, ...] (its tokens
/// in rank order); returns [b, s, ...] on every rank.
Tensor gather_seq(Communicator& comm, const Tensor& shard, AllocTag tag);

/// The sum over ranks of t [b, s, ...], of which rank r keeps tokens [r s/P, (r+1) s/P):
/// a reduce-scatter along the sequence. Returns [b, s/P, ...].
Tensor reduce_scatter_seq(Communicator& comm, const Tensor& t, AllocTag tag);

/// The tokens at global positions `pos` (sorted) of every batch row of t [b, s, ...] -> [b, n, ...].
Tensor take_tokens(const Tensor& t, const std::vector<int64_t>& pos, AllocTag tag);
/// The inverse of take_tokens over all ranks: rank r holds the tokens positions_of(r); returns
/// the full [b, s, ...] on every rank.
Tensor gather_tokens(Communicator& comm, const Tensor& shard, const std::function<std::vector<int64_t>(int)>& positions_of,
                     int64_t s, AllocTag tag);
/// The sum over ranks of t [b, s, ...], of which rank r keeps the tokens positions_of(r): a
/// reduce-scatter by token positions. Returns [b, n, ...] (n = the rank's share, equal for all).
Tensor reduce_scatter_tokens(Communicator& comm, const Tensor& t,
                             const std::function<std::vector<int64_t>(int)>& positions_of, AllocTag tag);
/// Copies src [b, n, ...] into tokens [s0, s0 + n) of dst [b, s, ...].
void put_seq(Tensor& dst, const Tensor& src, int64_t s0);

/// Column segments [begin, end) of a matrix, concatenated -> [rows, sum of widths].
Tensor slice_cols(const Tensor& m, const std::vector<std::pair<int64_t, int64_t>>& segments, AllocTag tag);
/// Every rank holds slice_cols(full, segments_of(rank)); returns the full [rows, cols].
Tensor gather_cols(Communicator& comm, const Tensor& local, int64_t cols,
                   const std::function<std::vector<std::pair<int64_t, int64_t>>(int)>& segments_of, AllocTag tag);
/// Rows [r0, r0 + n) of m [rows, cols].
Tensor slice_rows(const Tensor& m, int64_t r0, int64_t n, AllocTag tag);

// Heads. Attention tensors are [b, n, H, d]: b batch rows, n tokens, H heads (Hkv for k and v)
// of d elements. The sequence layout holds a rank's n tokens and every head; the head layout,
// what DeepSpeed-Ulysses attends in, holds the U n tokens of a group of U ranks and a block of
// the heads.

/// Heads [first, first + count) of t [b, n, H, d] -> [b, n, count, d], tagged `tag`, on t's device.
Tensor heads_of(const Tensor& t, int64_t first, int64_t count, AllocTag tag);
/// Copies src [b, n, c, d] into heads [first, first + c) of dst [b, n, H, d].
void put_heads(Tensor& dst, const Tensor& src, int64_t first);
/// Adds src [b, n, c, d] into heads [first, first + c) of dst [b, n, H, d] (through a contiguous
/// copy tagged like src, so that the backend's add runs on any device).
void add_into_heads(Backend& be, Tensor& dst, int64_t first, const Tensor& src);

/// Per rank j of an all-to-all group, in rank order: the block of heads it holds in head
/// layout, (first head, count). Blocks may overlap (a kv head read by query heads on two ranks).
using HeadRanges = std::vector<std::pair<int64_t, int64_t>>;

/// The all-to-all from sequence to head layout over the U = comm.size() ranks of `comm`:
/// t [b, n, H, d] (our n tokens, all H heads) -> [b, U n, c, d] (the group's U n tokens in rank
/// order, our c = heads[comm.rank()].second heads), tagged `tag`. Rank j is sent heads[j] of our
/// tokens: b n heads[j].second d elements, times dtype_size bytes (our own block is copied, not
/// sent). The send and receive buffers are communication memory (MemCategory::comm), 2 b n H d
/// elements with even heads, freed on return. Throws CommError when the exchange fails
/// (communicator.h).
Tensor seq_to_heads(Communicator& comm, const Tensor& t, const HeadRanges& heads, AllocTag tag);
/// The inverse: t [b, U n, c, d] (the group's tokens, our heads) -> [b, n, H, d] (our tokens, all
/// H heads), tagged `tag`. Rank j is sent its n tokens of our heads, b n c d elements. A head
/// that several ranks hold (a shared kv head's gradient) gets the sum of their blocks. Throws
/// CommError when the exchange fails.
Tensor heads_to_seq(Communicator& comm, Backend& be, const Tensor& t, int64_t H, const HeadRanges& heads, AllocTag tag);

/// Grouped-query attention's repeat_kv: t [b, n, Hkv, d] -> [b, n, kv_of.size(), d], head i a
/// copy of kv head kv_of[i] (for a kernel that must read one kv head per query head), on t's device.
Tensor repeat_kv_heads(const Tensor& t, const std::vector<int64_t>& kv_of, AllocTag tag);
/// Its backward: dt [b, n, kv_of.size(), d] -> [b, n, Hkv, d], kv head j's gradient the sum of
/// the heads i with kv_of[i] = j (zero when none).
Tensor sum_kv_heads(Backend& be, const Tensor& dt, const std::vector<int64_t>& kv_of, int64_t Hkv, AllocTag tag);

/// Bytes a ring all_gather / reduce_scatter / all_reduce makes rank `rank` send when n elements
/// are split as even_counts(n, P) (communicator.h derives these): exact also for uneven splits.
int64_t ring_all_gather_bytes(int64_t n, int P, int rank, DType dt);
int64_t ring_reduce_scatter_bytes(int64_t n, int P, int rank, DType dt);
int64_t ring_all_reduce_bytes(int64_t n, int P, int rank, DType dt);

}  // namespace ringside
