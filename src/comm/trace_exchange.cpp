#include "comm/trace_exchange.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

namespace ringside::trace {

Clock align_clocks(Communicator& comm, int rounds) {
  const int P = comm.size(), r = comm.rank();
  constexpr int kTag = (1 << 20) + 100;  // above the strategies' and collectives' tags
  Clock c;
  if (comm.backend() == "local") {
    // One process, one steady clock: no offset to estimate; share rank 0's zero.
    int64_t origin = Clock::steady_now_ns();
    if (r == 0) {
      for (int p = 1; p < P; ++p) comm.send(&origin, sizeof origin, p, kTag);
    } else {
      comm.recv(&origin, sizeof origin, 0, kTag);
    }
    c.origin_ns = origin;
    return c;
  }
  // Rank 0 answers each other rank in turn; each ping carries nothing, each pong rank 0's time.
  if (r == 0) {
    for (int p = 1; p < P; ++p)
      for (int i = 0; i < rounds; ++i) {
        char ping = 0;
        comm.recv(&ping, 1, p, kTag);
        const int64_t now = Clock::steady_now_ns();
        comm.send(&now, sizeof now, p, kTag);
      }
  } else {
    int64_t best_rtt = std::numeric_limits<int64_t>::max();
    for (int i = 0; i < rounds; ++i) {
      const char ping = 0;
      const int64_t t_send = Clock::steady_now_ns();
      comm.send(&ping, 1, 0, kTag);
      int64_t t_root = 0;
      comm.recv(&t_root, sizeof t_root, 0, kTag);
      const int64_t t_recv = Clock::steady_now_ns();
      if (t_recv - t_send < best_rtt) {
        best_rtt = t_recv - t_send;
        c.offset_ns = t_root - (t_send + t_recv) / 2;  // rank 0's clock minus ours
        c.uncertainty_ns = best_rtt / 2;
      }
    }
  }
  // The zero: rank 0's clock once everyone is synchronised.
  int64_t origin = Clock::steady_now_ns();
  if (r == 0) {
    for (int p = 1; p < P; ++p) comm.send(&origin, sizeof origin, p, kTag + 1);
  } else {
    comm.recv(&origin, sizeof origin, 0, kTag + 1);
  }
  c.origin_ns = origin;
  return c;
}

// ---- RankTrace to bytes and back, for gathering over MPI (CBOR: compact, exact integers).
namespace {

nlohmann::json to_json(const RankTrace& t) {
  nlohmann::json j;
  j["strategy"] = t.strategy, j["rank"] = t.rank, j["tile_map"] = t.tile_map;
  j["offset"] = t.clock_offset_ns, j["uncertainty"] = t.clock_uncertainty_ns;
  auto& ev = j["events"] = nlohmann::json::array();
  for (const Event& e : t.events) {
    nlohmann::json tiles = nlohmann::json::array();
    for (const TilePair& p : e.tiles)
      tiles.push_back({p.q_first, p.q_len, p.q_stride, p.k_first, p.k_len, p.k_stride, p.partial});
    ev.push_back({e.name, int(e.kind), e.ts_ns, e.dur_ns, int(e.stream), e.phase, e.step, e.peer, e.bytes, e.flops,
                  e.collective, int(e.direction), e.tag, e.seq, e.detail, e.sublayer, e.order, e.end_order,
                  std::move(tiles), e.tiles_complete});
  }
  auto& mem = j["memory"] = nlohmann::json::array();
  for (const MemorySample& m : t.memory) mem.push_back({m.ts_ns, m.bytes});
  return j;
}

RankTrace from_json(const nlohmann::json& j) {
  RankTrace t;
  t.strategy = j.at("strategy"), t.rank = j.at("rank"), t.tile_map = j.at("tile_map");
  t.clock_offset_ns = j.at("offset"), t.clock_uncertainty_ns = j.at("uncertainty");
  for (const auto& a : j.at("events")) {
    Event e;
    e.name = a[0], e.kind = Kind(a[1].get<int>()), e.ts_ns = a[2], e.dur_ns = a[3], e.stream = Stream(a[4].get<int>());
    e.phase = a[5], e.step = a[6], e.peer = a[7], e.bytes = a[8], e.flops = a[9];
    e.collective = a[10], e.direction = Direction(a[11].get<int>()), e.tag = a[12], e.seq = a[13], e.detail = a[14];
    e.sublayer = a[15], e.order = a[16], e.end_order = a[17];
    for (const auto& p : a[18]) e.tiles.push_back({p[0], p[1], p[2], p[3], p[4], p[5], p[6].get<bool>()});
    e.tiles_complete = a[19];
    t.events.push_back(std::move(e));
  }
  for (const auto& a : j.at("memory")) t.memory.push_back(MemorySample{a[0], a[1]});
  return t;
}

}  // namespace

std::vector<RankTrace> gather_to_root(Communicator& comm, RankTrace mine) {
  constexpr int kTag = (1 << 20) + 102;
  const int P = comm.size();
  std::vector<RankTrace> all;
  if (comm.rank() != 0) {
    const std::vector<uint8_t> bytes = nlohmann::json::to_cbor(to_json(mine));
    const int64_t n = static_cast<int64_t>(bytes.size());
    comm.send(&n, sizeof n, 0, kTag);
    comm.send(bytes.data(), n, 0, kTag);
    return all;
  }
  all.push_back(std::move(mine));
  for (int p = 1; p < P; ++p) {
    int64_t n = 0;
    comm.recv(&n, sizeof n, p, kTag);
    std::vector<uint8_t> bytes(static_cast<size_t>(n));
    comm.recv(bytes.data(), n, p, kTag);
    all.push_back(from_json(nlohmann::json::from_cbor(bytes)));
  }
  return all;
}

}  // namespace ringside::trace
