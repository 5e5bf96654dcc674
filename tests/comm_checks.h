// Collective checks that run on any Communicator (local threads or MPI processes): each op
// against the same result computed serially from every rank's known input.
#pragma once
#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

#include "comm/communicator.h"

namespace comm_checks {

using ringside::Communicator;
using ringside::DType;

// Rank r's i-th input element: distinct per rank and position, exact in float.
inline double value(int r, int64_t i) { return double(r * 1000 + i % 997) * 0.5; }

// Uneven shares, with a zero for rank 1 when P >= 3.
inline std::vector<int64_t> uneven(int P) {
  std::vector<int64_t> c(P);
  for (int i = 0; i < P; ++i) c[i] = (P >= 3 && i == 1) ? 0 : 3 + 2 * i;
  return c;
}

template <class T> void all_gather(Communicator& c, const std::vector<int64_t>& counts) {
  const int P = c.size(), r = c.rank();
  std::vector<T> send(counts[r]), recv(std::accumulate(counts.begin(), counts.end(), int64_t{0}));
  for (int64_t i = 0; i < counts[r]; ++i) send[i] = T(value(r, i));
  const auto before = c.stats();
  c.all_gather(send.data(), recv.data(), counts, ringside::dtype_of<T>());
  int64_t k = 0;
  for (int j = 0; j < P; ++j)
    for (int64_t i = 0; i < counts[j]; ++i) REQUIRE(recv[k++] == T(value(j, i)));
  // Ring all-gather: rank r forwards every chunk but the one its right neighbour owns.
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  REQUIRE(c.stats().bytes_sent - before.bytes_sent == int64_t(sizeof(T)) * (P > 1 ? total - counts[(r + 1) % P] : 0));
}

template <class T> void reduce_scatter(Communicator& c, const std::vector<int64_t>& counts) {
  const int P = c.size(), r = c.rank();
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  std::vector<T> send(total), recv(counts[r]);
  for (int64_t i = 0; i < total; ++i) send[i] = T(value(r, i));
  const auto before = c.stats();
  c.reduce_scatter(send.data(), recv.data(), counts, ringside::dtype_of<T>());
  const int64_t off = std::accumulate(counts.begin(), counts.begin() + r, int64_t{0});
  for (int64_t i = 0; i < counts[r]; ++i) {
    double expect = 0;
    for (int j = 0; j < P; ++j) expect += value(j, off + i);
    REQUIRE(recv[i] == T(expect));
  }
  // Ring reduce-scatter: rank r sends every chunk but its own.
  REQUIRE(c.stats().bytes_sent - before.bytes_sent == int64_t(sizeof(T)) * (P > 1 ? total - counts[r] : 0));
}

template <class T> void all_reduce(Communicator& c, int64_t n) {
  const int P = c.size(), r = c.rank();
  std::vector<T> buf(n);
  for (int64_t i = 0; i < n; ++i) buf[i] = T(value(r, i));
  c.all_reduce(buf.data(), n, ringside::dtype_of<T>());
  for (int64_t i = 0; i < n; ++i) {
    double expect = 0;
    for (int j = 0; j < P; ++j) expect += value(j, i);
    REQUIRE(buf[i] == T(expect));
  }
}

template <class T> void all_to_all(Communicator& c) {
  const int P = c.size(), r = c.rank();
  // Block (from j to k) holds j + 2k + 1 elements: uneven in both directions.
  auto block = [](int j, int k) { return int64_t(j + 2 * k + 1); };
  std::vector<int64_t> sc(P), rc(P);
  for (int k = 0; k < P; ++k) sc[k] = block(r, k), rc[k] = block(k, r);
  std::vector<T> send(std::accumulate(sc.begin(), sc.end(), int64_t{0})),
      recv(std::accumulate(rc.begin(), rc.end(), int64_t{0}));
  int64_t o = 0;
  for (int k = 0; k < P; ++k)
    for (int64_t i = 0; i < sc[k]; ++i) send[o++] = T(value(r, 100 * k + i));
  c.all_to_all(send.data(), sc, recv.data(), rc, ringside::dtype_of<T>());
  o = 0;
  for (int j = 0; j < P; ++j)
    for (int64_t i = 0; i < rc[j]; ++i) REQUIRE(recv[o++] == T(value(j, 100 * r + i)));
}

// Every collective, f32 and f64, even and uneven shares.
inline void all(Communicator& c) {
  const int P = c.size();
  for (const auto& counts : {std::vector<int64_t>(P, 5), uneven(P)}) {
    all_gather<float>(c, counts);
    all_gather<double>(c, counts);
    reduce_scatter<float>(c, counts);
    reduce_scatter<double>(c, counts);
  }
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{1000}}) {
    all_reduce<float>(c, n);
    all_reduce<double>(c, n);
  }
  all_to_all<float>(c);
  all_to_all<double>(c);
  c.barrier();
}

// Point-to-point around a ring, and split into even and odd ranks.
inline void p2p_and_split(Communicator& c) {
  const int P = c.size(), r = c.rank();
  std::vector<double> out(16, r), in(16, -1);
  auto rr = c.irecv(in.data(), 16 * 8, (r + P - 1) % P, 3);
  auto sr = c.isend(out.data(), 16 * 8, (r + 1) % P, 3);
  c.wait(rr);
  c.wait(sr);
  for (double v : in) REQUIRE(v == double((r + P - 1) % P));

  auto sub = c.split(r % 2, -r);  // key -r: reversed order inside each group
  const int n = (P - r % 2 + 1) / 2;
  REQUIRE(sub->size() == n);
  // Members of color r%2 sorted by key -rank: the highest parent rank is sub-rank 0.
  REQUIRE(sub->rank() == (P - 1 - r - ((P - 1 - r) % 2 == 0 ? 0 : 1)) / 2);
  double x = r;
  sub->all_reduce(&x, 1, DType::f64);
  double expect = 0;
  for (int j = r % 2; j < P; j += 2) expect += j;
  REQUIRE(x == expect);
}

}  // namespace comm_checks
