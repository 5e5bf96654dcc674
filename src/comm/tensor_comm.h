// Tensors over ranks: slicing a tensor by tokens, columns or rows, and putting the slices back
// together across a communicator (all-gather, reduce-scatter, all-reduce), with the bytes each
// ring collective makes a rank send. Every strategy and the token-wise layer split and gather
// through these (as picotron's *_communications files do).
#pragma once
#include <functional>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"

namespace ringside {

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

/// Bytes a ring all_gather / reduce_scatter / all_reduce makes rank `rank` send when n elements
/// are split as even_counts(n, P) (communicator.h derives these): exact also for uneven splits.
int64_t ring_all_gather_bytes(int64_t n, int P, int rank, DType dt);
int64_t ring_reduce_scatter_bytes(int64_t n, int P, int rank, DType dt);
int64_t ring_all_reduce_bytes(int64_t n, int P, int rank, DType dt);

}  // namespace ringside
