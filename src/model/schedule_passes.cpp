// The schedule passes of schedule_passes.h: one kernel a ring step, TP's collectives under their
// GEMMs, FP8's quantization before TP's all-gather, torchtitan's selective recomputation.
#include "model/schedule_passes.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "core/error.h"

namespace ringside::model {

namespace {

// The shape in an attention op's detail ("b=1 sq=4096 sk=4096 H=5 Hkv=5 d=128 causal
// q_offset=12288 k_offset=..."); false when the trace does not give it.
struct CallShape {
  long long b = 0, sq = 0, sk = 0, H = 0, d = 0, q_offset = 0, k_offset = 0;
};
bool call_shape(const trace::Event& e, CallShape& c) {
  long long Hkv = 0;
  if (std::sscanf(e.detail.c_str(), "b=%lld sq=%lld sk=%lld H=%lld Hkv=%lld d=%lld", &c.b, &c.sq, &c.sk, &c.H, &Hkv, &c.d) != 6 ||
      c.b <= 0 || c.H <= 0 || c.d <= 0)
    return false;
  const char* q = std::strstr(e.detail.c_str(), "q_offset=");
  const char* k = std::strstr(e.detail.c_str(), "k_offset=");
  c.q_offset = q ? std::atoll(q + 9) : 0;
  c.k_offset = k ? std::atoll(k + 9) : 0;
  return true;
}

}  // namespace

void join_step_calls(trace::TraceData& schedule) {
  for (trace::RankTrace& r : schedule.ranks) {
    std::vector<trace::Event>& ev = r.events;
    std::vector<size_t> steps;  // (the loop below appends to details only: indices stay valid)
    for (size_t i = 0; i < ev.size(); ++i)
      if (ev[i].kind == trace::Kind::ring_step && ev[i].order >= 0) steps.push_back(i);
    for (size_t at : steps) {
      const trace::Event& step = ev[at];
      for (const char* name : {"attention_forward", "attention_backward"}) {
        std::vector<size_t> calls;
        for (size_t i = 0; i < ev.size(); ++i)
          if (ev[i].kind == trace::Kind::attention && ev[i].name == name && ev[i].order > step.order && ev[i].end_order < step.end_order)
            calls.push_back(i);
        if (calls.size() < 2) continue;
        // The one call: every query run against every key run of the step, as many pairs as
        // the runs' own (the mask's), queries and keys each counted once.
        std::set<std::pair<long long, long long>> q_runs, k_runs;
        double pairs = 0;
        CallShape c;
        bool shaped = true;
        for (size_t i : calls) {
          shaped &= call_shape(ev[i], c);
          if (!shaped) break;
          q_runs.insert({c.q_offset, c.sq}), k_runs.insert({c.k_offset, c.sk});
          pairs += ev[i].flops / (std::string(name) == "attention_backward" ? 2.5 : 1.0) / (4.0 * double(c.d) * double(c.b) * double(c.H));
        }
        if (!shaped) continue;
        long long sq = 0, sk = 0;
        for (const auto& [offset, len] : q_runs) sq += len;
        for (const auto& [offset, len] : k_runs) sk += len;
        char tail[96];
        std::snprintf(tail, sizeof tail, " step_call sq=%lld sk=%lld kpq=%.1f", sq, sk, pairs / double(sq));
        std::sort(calls.begin(), calls.end(), [&](size_t a, size_t b) { return ev[a].order < ev[b].order; });
        for (size_t j = 0; j < calls.size(); ++j) ev[calls[j]].detail += std::string(tail) + (j ? " launch_shared" : "");
      }
      // One merge a step (the first of its query runs' merges launches it).
      bool first = true;
      std::vector<size_t> merges;
      for (size_t i = 0; i < ev.size(); ++i)
        if (ev[i].name == "lse_merge" && ev[i].order > step.order && ev[i].end_order < step.end_order) merges.push_back(i);
      std::sort(merges.begin(), merges.end(), [&](size_t a, size_t b) { return ev[a].order < ev[b].order; });
      for (size_t i : merges) {
        if (!first) ev[i].detail += " launch_shared";
        first = false;
      }
    }
  }
}

namespace {

constexpr int64_t kGap = 8;  // orders are spread by this, leaving room for the chunks between

// The GEMM `g` cut into `parts` chunks, chunk `j` of them: its rows (m), or for a weight
// gradient (a^T, whose k is the tokens gathered or scattered) its k.
trace::Event chunk_of(const trace::Event& g, int parts, int j, int sms) {
  trace::Event c = g;
  long long m = 0, n = 0, k = 0;
  const bool weight_grad = g.detail.find("a^T") != std::string::npos;
  if (std::sscanf(g.detail.c_str(), "m=%lld n=%lld k=%lld", &m, &n, &k) == 3) {
    long long& split = weight_grad ? k : m;
    split = (split + parts - 1) / parts;
    const size_t rest = g.detail.find(' ', g.detail.find("k="));
    c.detail = "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
               (rest == std::string::npos ? "" : g.detail.substr(rest));
  }
  c.flops = g.flops / parts;
  c.bytes = g.bytes / parts;
  c.name = g.name + " chunk " + std::to_string(j + 1) + "/" + std::to_string(parts);
  // An input quantized before the gather (quantize_before_gather) is the own chunk's alone.
  const size_t fp8 = c.detail.find(" fp8_input=");
  if (fp8 != std::string::npos && j > 0) {
    const size_t end = c.detail.find(' ', fp8 + 1);
    c.detail = c.detail.substr(0, fp8) + " fp8_input=0" + (end == std::string::npos ? "" : c.detail.substr(end));
  }
  if (sms > 0) c.detail += " sms_taken=" + std::to_string(sms);
  return c;
}

bool tp_sublayer(const std::string& s) { return s == "qkv" || s == "out_proj" || s == "mlp"; }

// The events' indices in program order.
std::vector<size_t> in_order(const std::vector<trace::Event>& ev) {
  std::vector<size_t> by_order(ev.size());
  for (size_t i = 0; i < ev.size(); ++i) by_order[i] = i;
  std::sort(by_order.begin(), by_order.end(), [&](size_t a, size_t b) { return ev[a].order < ev[b].order; });
  return by_order;
}

// Spreads the events' program order by kGap, leaving room for the events a pass inserts, and
// returns their indices in that order.
std::vector<size_t> spread_in_order(std::vector<trace::Event>& ev) {
  for (trace::Event& e : ev)
    if (e.order >= 0) e.order *= kGap, e.end_order *= kGap;
  return in_order(ev);
}

// The GEMM a collective container (at `pos` of `by_order`) feeds: the first compute op after it
// of its sublayer, with only memory ops between; nothing otherwise.
std::optional<size_t> gemm_fed_by(const std::vector<trace::Event>& ev, const std::vector<size_t>& by_order, size_t pos) {
  const trace::Event& coll = ev[by_order[pos]];
  for (size_t p = pos + 1; p < by_order.size(); ++p) {
    const trace::Event& e = ev[by_order[p]];
    if (e.order <= coll.end_order || e.stream != trace::Stream::compute) continue;
    if (e.kind == trace::Kind::gemm && e.sublayer == coll.sublayer) return by_order[p];
    if (e.kind != trace::Kind::memory) return std::nullopt;
  }
  return std::nullopt;
}

// A ring collective's steps: the waits inside `coll` for what arrives, in program order (T - 1
// of them, T the group's size).
std::vector<size_t> recv_waits(const std::vector<trace::Event>& ev, const std::vector<size_t>& by_order, const trace::Event& coll) {
  std::vector<size_t> waits;
  for (size_t i : by_order)
    if (ev[i].kind == trace::Kind::wait && ev[i].direction == trace::Direction::recv && ev[i].order > coll.order &&
        ev[i].end_order < coll.end_order)
      waits.push_back(i);
  return waits;
}

}  // namespace

void overlap_tp_comm(trace::TraceData& schedule, int reduce_scatter_sms) {
  for (trace::RankTrace& r : schedule.ranks) {
    std::vector<trace::Event>& ev = r.events;
    const std::vector<size_t> by_order = spread_in_order(ev);
    std::vector<trace::Event> added;
    for (size_t pos = 0; pos < by_order.size(); ++pos) {
      const trace::Event& coll = ev[by_order[pos]];
      if (coll.kind != trace::Kind::collective || !tp_sublayer(coll.sublayer) || coll.order < 0) continue;
      const bool gather = coll.name == "all_gather", scatter = coll.name == "reduce_scatter";
      if (!gather && !scatter) continue;
      const std::vector<size_t> waits = recv_waits(ev, by_order, coll);
      if (waits.empty()) continue;
      const int parts = int(waits.size()) + 1;  // T chunks for T - 1 steps
      // The GEMM it feeds (the first after it) or is fed by (the last before it), with only
      // memory ops (the gather's reorder, the scatter's pack) between, in the same sublayer.
      std::optional<size_t> gemm;
      if (gather) {
        gemm = gemm_fed_by(ev, by_order, pos);
      } else {
        for (size_t p = pos; p-- > 0;) {
          const trace::Event& e = ev[by_order[p]];
          if (e.stream != trace::Stream::compute || trace::is_container(e.kind)) continue;
          if (e.kind == trace::Kind::gemm && e.sublayer == coll.sublayer) gemm = by_order[p];
          if (e.kind != trace::Kind::memory) break;
        }
      }
      if (!gemm) continue;
      const trace::Event whole = ev[*gemm];
      if (gather) {
        // Chunk j (0 .. T-2) runs before wait j + 1 (the next step's transfer is posted by
        // then); the last, the GEMM's own event, after the last wait.
        for (int j = 0; j + 1 < parts; ++j) {
          trace::Event c = chunk_of(whole, parts, j, 0);
          c.order = ev[waits[size_t(j)]].order - 2, c.end_order = c.order + 1;
          added.push_back(c);
        }
        ev[*gemm] = chunk_of(whole, parts, parts - 1, 0);
      } else {
        // Chunk 0 where the GEMM was (the first step sends it); chunk j (1 .. T-1) once step
        // j's transfer is posted, before its wait: it runs while that transfer moves.
        trace::Event first = chunk_of(whole, parts, 0, 0);
        first.order = whole.order, first.end_order = whole.end_order;
        for (int j = 1; j < parts; ++j) {
          trace::Event c = chunk_of(whole, parts, j, reduce_scatter_sms);
          c.order = ev[waits[size_t(j - 1)]].order - 2, c.end_order = c.order + 1;
          added.push_back(c);
        }
        ev[*gemm] = first;
      }
    }
    ev.insert(ev.end(), added.begin(), added.end());
  }
}

void quantize_before_gather(trace::TraceData& schedule) {
  for (trace::RankTrace& r : schedule.ranks) {
    std::vector<trace::Event>& ev = r.events;
    const std::vector<size_t> by_order = in_order(ev);
    for (size_t pos = 0; pos < by_order.size(); ++pos) {
      const trace::Event& coll = ev[by_order[pos]];
      if (coll.kind != trace::Kind::collective || coll.name != "all_gather" || !tp_sublayer(coll.sublayer) || coll.order < 0) continue;
      const std::optional<size_t> gemm = gemm_fed_by(ev, by_order, pos);
      if (!gemm) continue;
      const size_t steps = recv_waits(ev, by_order, coll).size();  // T - 1
      long long m = 0, n = 0, k = 0;
      trace::Event& g = ev[*gemm];
      if (g.detail.find("a^T") != std::string::npos || std::sscanf(g.detail.c_str(), "m=%lld n=%lld k=%lld", &m, &n, &k) != 3) continue;
      g.detail += " fp8_input=" + std::to_string(double(m) * double(k) / double(steps + 1));
      for (trace::Event& e : ev)
        if (e.stream == trace::Stream::comm && e.order > coll.order && e.order < coll.end_order) e.bytes /= 2;
    }
  }
}

void recompute_every_second_gemm(trace::TraceData& schedule) {
  for (trace::RankTrace& r : schedule.ranks) {
    std::vector<trace::Event>& ev = r.events;
    const std::vector<size_t> by_order = spread_in_order(ev);
    std::vector<trace::Event> added;
    std::map<size_t, int64_t> placed;  // per backward sublayer: the recomputes put at its start
    int count = 0;
    for (size_t i : by_order) {
      const trace::Event& g = ev[i];
      if (g.kind != trace::Kind::gemm || g.phase != "forward" || g.order < 0 || ++count % 2 != 0) continue;
      // Again at the start of its sublayer's backward (at most 3 a sublayer in the gap).
      for (size_t j : by_order) {
        const trace::Event& b = ev[j];
        if (b.kind != trace::Kind::sublayer || b.phase != "backward" || b.name != g.sublayer || b.order <= g.order) continue;
        const int64_t at = placed[j]++;
        if (2 * at + 2 >= kGap) break;
        trace::Event c = g;
        c.phase = "recompute";
        c.name = g.name + " (recomputed)";
        c.order = b.order + 1 + 2 * at, c.end_order = c.order + 1;
        added.push_back(c);
        break;
      }
    }
    ev.insert(ev.end(), added.begin(), added.end());
  }
}

}  // namespace ringside::model
