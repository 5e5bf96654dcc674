// The Kineto reader: PyTorch profiler traces, one file per rank, into one TraceData (what it
// takes from each file, and how: trace/kineto.h).
#include "trace/kineto.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "core/error.h"
#include "core/json_input.h"
#include "core/memory_limits.h"
#include "core/text_file.h"
#include "trace/event_reader.h"
#include "trace/kineto_text.h"

namespace ringside::trace {

namespace {

// The allocator's total has no categories: it is drawn and counted as one series.
constexpr int kAllocatedCategory = int(MemCategory::activations);


// A compute op's or kernel's kind, for colours: by the words its name uses.
Kind compute_kind(std::string_view name) {
  const std::string n = lower(name);
  if (contains(n, "attention") || contains(n, "flash") || contains(n, "fmha") || contains(n, "sdpa")) return Kind::attention;
  if (contains(n, "gemm") || contains(n, "::mm") || contains(n, "bmm") || contains(n, "matmul") || contains(n, "addmm") ||
      contains(n, "linear") || contains(n, "cutlass") || contains(n, "xmma"))
    return Kind::gemm;
  if (contains(n, "norm")) return Kind::norm;
  if (contains(n, "copy") || contains(n, "memcpy") || contains(n, "memset") || contains(n, "::empty") ||
      contains(n, "::cat") || contains(n, "::clone") || contains(n, "::zeros") || contains(n, "::fill_"))
    return Kind::memory;
  return Kind::elementwise;
}

bool is_profiler_step(std::string_view name) {
  if (!name.starts_with("ProfilerStep#") || name.size() == 13) return false;
  return std::all_of(name.begin() + 13, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// One X event (or a paired async b/e) of a Kineto file, with the args the reader uses.
struct Raw {
  std::string name, cat;
  int64_t pid = 0;
  std::string tid;  // an integer or a string ("stream 7") in the file
  int64_t ts_ns = 0, dur_ns = 0;
  int64_t external_id = -1, correlation = -1;
  int peer = -1, tag = -1, group_size = 0;
  size_t index = 0;        // in the file's traceEvents, for errors
  std::string peer_field;  // the arg that names `peer` ("'args.Dst Rank'"), for errors
  int64_t bytes = 0;  // a transfer's size (nccl-tests' "size"); 0 when the trace does not say
  std::string collective_name;
  std::string group;  // "Process Group Name" (and Description): the group a collective ran in
  double flops = 0;
  int64_t end_ns() const { return ts_ns + dur_ns; }
};

// The elements of "Input Dims"' first entry: a shape [a, b, ...] (a tensor) or a list of
// shapes (a TensorList), its elements summed. Non-negative integers only.
int64_t elements(const EventReader& rd, const nlohmann::json& dims) {
  if (!dims.is_array()) rd.fail("'args.Input Dims' must hold arrays of integers");
  if (!dims.empty() && dims[0].is_array()) {
    int64_t sum = 0;
    for (const nlohmann::json& d : dims) {
      sum += elements(rd, d);  // each at most 2^53: no overflow before the check
      if (double(sum) > kMaxBytes) rd.fail("'args.Input Dims' holds too many elements");
    }
    return sum;
  }
  double product = 1;
  for (const nlohmann::json& d : dims) {
    if (!d.is_number_integer() || (!d.is_number_unsigned() && d.get<int64_t>() < 0))
      rd.fail("'args.Input Dims' must hold arrays of non-negative integers, got " + d.dump());
    product *= d.is_number_unsigned() ? double(d.get<uint64_t>()) : double(d.get<int64_t>());
    if (product > kMaxBytes) rd.fail("'args.Input Dims' holds too many elements");
  }
  return int64_t(product);
}

// The rank or tag a c10d call's "Concrete Inputs" entry `i` spells ("3"); -1 when the profiler
// left it empty (""). Anything else ("abc", "-1", 2.5) is not a rank or a tag: an error naming it.
int concrete_int(const EventReader& rd, const nlohmann::json& inputs, size_t i, const char* what) {
  const nlohmann::json& v = inputs[i];
  if (v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t(INT32_MAX)) return int(v.get<uint64_t>());
  if (v.is_string() && v.get<std::string>().empty()) return -1;
  const std::string s = v.is_string() ? v.get<std::string>() : "";
  if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    rd.fail(detail::concat("'args.Concrete Inputs'[", i, "] = ", v.dump().substr(0, 40), " is not a ", what,
                           " (an integer from 0 to 999999999)"));
  return std::stoi(s);
}

// The args of an X event the reader uses, checked.
void read_args(const EventReader& rd, Raw& r) {
  const nlohmann::json& a = rd.args();
  r.external_id = rd.integer_in(a, "External id", false, 0, INT64_MAX / 4, -1, "args.");
  r.correlation = rd.integer_in(a, "correlation", false, 0, INT64_MAX / 4, -1, "args.");
  r.flops = rd.number_in(a, "flops", false, 0, kMaxFlops, "args.");
  r.collective_name = rd.str_in(a, "Collective name", false, "args.");
  r.group = rd.str_in(a, "Process Group Name", false, "args.");
  if (const std::string desc = rd.str_in(a, "Process Group Description", false, "args."); !desc.empty())
    r.group += " (" + desc + ")";
  r.group_size = int(rd.integer_in(a, "Group size", false, 1, INT32_MAX, 0, "args."));
  // A collective's size: NCCL's args (nelems and dtype), else the tensor the op was given.
  const std::string dtype = rd.str_in(a, "dtype", false, "args.");
  const int64_t in = rd.integer_in(a, "In msg nelems", false, 0, int64_t(kMaxBytes), -1, "args.");
  const int64_t out = rd.integer_in(a, "Out msg nelems", false, 0, int64_t(kMaxBytes), -1, "args.");
  if (in >= 0 || out >= 0) {
    const Kind k = comm_kind(r.collective_name.empty() ? r.name : r.collective_name).first;
    const int64_t nelems = k == Kind::all_gather && out >= 0 ? out : in >= 0 ? in : out;
    r.bytes = int64_t(std::min(kMaxBytes, double(nelems) * double(dtype_bytes(dtype))));
  }
  const nlohmann::json* dims = rd.find(a, "Input Dims");
  const nlohmann::json* types = rd.find(a, "Input type");
  if (types && !types->is_array()) rd.fail("'args.Input type' must be an array");
  if (dims && !dims->is_array()) rd.fail("'args.Input Dims' must be an array");
  if (types)
    for (const nlohmann::json& t : *types)
      if (!t.is_string()) rd.fail("'args.Input type' must hold strings, got " + t.dump());
  if (r.bytes == 0 && dims && types && !dims->empty() && !types->empty()) {
    const std::string t0 = (*types)[0].get<std::string>();
    r.bytes = int64_t(std::min(kMaxBytes, double(elements(rd, (*dims)[0])) * double(dtype_bytes(t0))));
  }
  // A c10d send or receive names its peer and tag: Concrete Inputs [tensors, group, peer, tag];
  // a receive from any source its tag alone: [tensors, group, tag].
  if (const nlohmann::json* ci = rd.find(a, "Concrete Inputs")) {
    if (!ci->is_array()) rd.fail("'args.Concrete Inputs' must be an array");
    if (r.name == "c10d::send" || r.name == "c10d::recv_") {
      if (ci->size() > 2) r.peer = concrete_int(rd, *ci, 2, "rank"), r.peer_field = "'args.Concrete Inputs'[2]";
      if (ci->size() > 3) r.tag = concrete_int(rd, *ci, 3, "tag");
    } else if (r.name == "c10d::recv_any_source_" && ci->size() > 2) {
      r.tag = concrete_int(rd, *ci, 2, "tag");
    }
  }
  // record_param_comms of a send or receive: its peer.
  for (const char* key : {"Dst Rank", "Src Rank", "dst", "src", "peer"})
    if (r.peer < 0 && (r.peer = int(rd.integer_in(a, key, false, 0, INT32_MAX, -1, "args."))) >= 0)
      r.peer_field = detail::concat("'args.", key, "'");
}

// One [memory] instant: when, on which device type, and the allocator's total after it.
struct MemoryEvent {
  int64_t ts_ns = 0, allocated = 0;
  int device_type = 0;
};

// One rank's file, converted.
struct RankFile {
  std::string source, host;
  int rank = -1, world_size = 0;
  int64_t base_ns = 0, cpu_pid = -1;
  std::string backend;
  bool gpu = false;
  RankTrace trace;
  // p2p transfers: index into trace.events, and when they were posted (their call's start), in
  // posting order.
  std::vector<std::pair<size_t, int64_t>> p2p;
  // Every rank the file names as a peer, and where it first does ("traceEvents[24]: 'args.Dst
  // Rank'"): assemble checks them against the run's ranks where no world_size says them.
  std::map<int, std::string> peers;
};

// Reads one parsed document into a RankFile (its events still on the file's own clock).
class FileReader {
 public:
  FileReader(const nlohmann::json& doc, std::string source, size_t position) : doc_(doc), position_(position) {
    out_.source = std::move(source);
  }

  RankFile read() {
    read_header();
    const nlohmann::json& list = doc_.at("traceEvents");
    if (!list.is_array()) throw Error(out_.source + ": 'traceEvents' must be an array, got " + std::string(list.type_name()));
    for (size_t i = 0; i < list.size(); ++i) read_event(list[i], i);
    for (const auto& [key, begin] : async_open_)
      throw Error(detail::concat(out_.source, ": async event '", begin.first.name, "' (id ", key.second,
                                 ") begins at traceEvents[", begin.second, "] and never ends"));
    convert();
    return std::move(out_);
  }

 private:
  void read_header() {
    EventReader top(doc_, out_.source);
    if (const nlohmann::json* d = top.find(doc_, "distributedInfo")) {
      if (!d->is_object()) top.fail("'distributedInfo' must be an object");
      EventReader rd(*d, out_.source + ": distributedInfo");
      out_.rank = int(rd.integer_in(*d, "rank", false, 0, INT32_MAX, -1));
      out_.world_size = int(rd.integer_in(*d, "world_size", false, 1, INT32_MAX, 0));
      out_.backend = rd.str("backend", false);
      if (out_.rank >= 0 && out_.world_size > 0 && out_.rank >= out_.world_size)
        rd.fail(detail::concat("rank ", out_.rank, " is not below world_size ", out_.world_size));
      if (const nlohmann::json* pgs = rd.find(*d, "pg_config")) {
        if (!pgs->is_array()) rd.fail("'pg_config' must be an array");
        for (const nlohmann::json& pg : *pgs) {
          if (!pg.is_object()) rd.fail("'pg_config' must hold objects");
          EventReader pr(pg, out_.source + ": distributedInfo.pg_config");
          const int size = int(pr.integer_in(pg, "pg_size", false, 1, INT32_MAX, 0));
          if (out_.world_size > 0 && size > out_.world_size)
            pr.fail(detail::concat("pg_size ", size, " is more than world_size ", out_.world_size));
          if (pr.str_in(pg, "pg_desc", false, "") == "default_pg" && size > 0)
            default_group_ = size, default_group_name_ = pr.str_in(pg, "pg_name", false, "") + " (default_pg)";
        }
      }
    }
    out_.base_ns = top.integer_in(doc_, "baseTimeNanoseconds", false, 0, INT64_MAX / 2, 0);
    out_.host = top.str("host_name", false);
    if (out_.rank < 0) out_.rank = rank_from_name();
    if (default_group_ == 0) default_group_ = out_.world_size;
  }

  // "rank3.pt.trace.json" -> 3; else the file's place in the list.
  int rank_from_name() const {
    const std::string name = std::filesystem::path(out_.source).filename().string();
    if (name.starts_with("rank")) {
      size_t i = 4;
      while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
      if (i > 4 && i - 4 <= 9) return std::stoi(name.substr(4, i - 4));
    }
    return int(position_);
  }

  void read_event(const nlohmann::json& ev, size_t i) {
    EventReader rd(ev, detail::concat(out_.source, ": traceEvents[", i, "]"));
    if (!ev.is_object()) rd.fail(detail::concat("an event must be an object, got ", ev.type_name()));
    const std::string ph = rd.str("ph", true);
    if (ph == "M" || ph == "C") return;  // names and sort order; Kineto writes no counters
    if (ph == "s" || ph == "f" || ph == "t") {  // a launch's link to its kernel: checked, not used
      if (!rd.find(ev, "id")) rd.fail("a flow event needs an 'id'");
      rd.epoch_time_ns("ts");
      return;
    }
    // The profiler's own events name their process with a string ("Spans", "Traces", "").
    const nlohmann::json* pid = rd.find(ev, "pid");
    if (!pid) rd.fail("missing 'pid'");
    if (pid->is_string()) return;
    const int64_t p = rd.integer_in(ev, "pid", true, 0, INT32_MAX, 0);
    if (ph == "i" || ph == "I") return read_instant(rd);
    if (ph != "X" && ph != "b" && ph != "e")
      rd.fail("phase '" + ph + "' is not one PyTorch's profiler writes (X, i, M, s, f, b, e)");
    Raw r;
    r.index = i;
    r.name = rd.str("name", true);
    r.cat = rd.str("cat", false);
    r.pid = p;
    if (const nlohmann::json* tid = rd.find(ev, "tid")) {
      if (tid->is_string()) r.tid = tid->get<std::string>();
      else r.tid = std::to_string(rd.integer_in(ev, "tid", true, INT32_MIN, INT64_MAX / 4, 0));
    }
    r.ts_ns = rd.epoch_time_ns("ts");
    if (ph == "X") {
      r.dur_ns = rd.time_ns("dur", true, 0);
      read_args(rd, r);
      check_peer(rd, r);
      raws_.push_back(std::move(r));
      return;
    }
    // Async spans: a begin and an end of one (cat, id, name), read as one X event.
    const nlohmann::json* id = rd.find(ev, "id");
    if (!id || !(id->is_string() || id->is_number_integer())) rd.fail("an async event needs an 'id' (a string or an integer)");
    const std::pair<std::string, std::string> key{r.cat + "\n" + r.name, id->dump()};
    if (ph == "b") {
      read_args(rd, r);
      check_peer(rd, r);
      if (!async_open_.emplace(key, std::make_pair(r, i)).second) rd.fail("async id " + id->dump() + " begins twice");
      return;
    }
    auto open = async_open_.find(key);
    if (open == async_open_.end()) rd.fail("async end of '" + r.name + "' (id " + id->dump() + ") without its begin");
    Raw span = std::move(open->second.first);
    async_open_.erase(open);
    if (r.ts_ns < span.ts_ns) rd.fail("async span '" + r.name + "' ends before it begins");
    span.dur_ns = r.ts_ns - span.ts_ns;
    raws_.push_back(std::move(span));
  }

  // A peer is a rank of the world (distributedInfo.world_size, where the file says it; else
  // among the run's files, checked in assemble), and a send's or receive's another than this
  // rank: a message to nobody, or to itself, pairs with nothing, or with the wrong one.
  void check_peer(const EventReader& rd, const Raw& r) {
    if (r.peer < 0) return;
    const auto [kind, direction] = comm_kind(r.collective_name.empty() ? r.name : r.collective_name);
    if (kind == Kind::p2p && direction != Direction::none && r.peer == out_.rank)
      rd.fail(detail::concat(r.peer_field, " = ", r.peer, " is this file's own rank: a ", to_string(direction),
                             "'s peer is another rank"));
    if (out_.world_size > 0 && r.peer >= out_.world_size)
      rd.fail(detail::concat(r.peer_field, " = ", r.peer, " is not a rank of the world (distributedInfo.world_size = ",
                             out_.world_size, ")"));
    out_.peers.try_emplace(r.peer, detail::concat("traceEvents[", r.index, "]: ", r.peer_field));
  }

  void read_instant(const EventReader& rd) {
    if (rd.str("name", false) != "[memory]") return;
    const nlohmann::json& a = rd.args();
    MemoryEvent m;
    m.ts_ns = rd.epoch_time_ns("ts");
    m.allocated = int64_t(rd.number_in(a, "Total Allocated", true, 0, kMaxBytes, "args."));
    m.device_type = int(rd.integer_in(a, "Device Type", false, 0, 1 << 16, 0, "args."));
    memory_.push_back(m);
  }

  // The file's events into the rank's timeline.
  void convert() {
    for (const Raw& r : raws_)
      if (r.cat == "kernel" || r.cat == "gpu_memcpy" || r.cat == "gpu_memset") out_.gpu = true;
    // The CPU process: one per rank.
    for (const Raw& r : raws_)
      if (r.cat == "cpu_op" || r.cat == "user_annotation" || r.cat == "cuda_runtime") {
        if (out_.cpu_pid < 0) out_.cpu_pid = r.pid;
        else if (r.pid != out_.cpu_pid)
          throw Error(detail::concat(out_.source, ": CPU events of two processes (pids ", out_.cpu_pid, " and ", r.pid,
                                     ") in one rank's file; give each rank its own file"));
      }
    for (const Raw& r : raws_)
      if (r.cat == "cpu_op" && r.name == "record_param_comms") calls_.push_back(&r);
    std::sort(calls_.begin(), calls_.end(), [](const Raw* a, const Raw* b) { return a->ts_ns < b->ts_ns; });
    std::map<int64_t, const Raw*> launch_of, c10d_of;  // correlation -> launch; External id -> c10d op
    for (const Raw& r : raws_) {
      if ((r.cat == "cuda_runtime" || r.cat == "cuda_driver") && r.correlation >= 0) launch_of[r.correlation] = &r;
      if (r.cat == "cpu_op" && r.name.starts_with("c10d::") && r.external_id >= 0) c10d_of[r.external_id] = &r;
    }
    // Where each event happened on the CPU: its own start, or for a GPU event its launch's.
    auto anchor = [&](const Raw& r) {
      if (auto it = launch_of.find(r.correlation); r.correlation >= 0 && it != launch_of.end()) return it->second->ts_ns;
      return r.ts_ns;
    };
    // The ranges that name phases and sublayers, and the autograd ops that mark the backward.
    std::vector<const Raw*> ranges;
    for (const Raw& r : raws_)
      if ((r.cat == "user_annotation" && !is_comm_annotation(r.name)) ||
          (r.cat == "cpu_op" && r.name.starts_with("autograd::engine::evaluate_function")))
        ranges.push_back(&r);
    std::sort(ranges.begin(), ranges.end(), [](const Raw* a, const Raw* b) { return a->ts_ns < b->ts_ns; });

    std::vector<std::pair<Event, int64_t>> events;  // with their anchors
    auto add = [&](const Raw& r, Kind kind, Stream stream) {
      Event e;
      e.name = r.name, e.kind = kind, e.stream = stream, e.ts_ns = r.ts_ns, e.dur_ns = r.dur_ns, e.flops = r.flops;
      events.emplace_back(std::move(e), anchor(r));
      return &events.back().first;
    };
    std::vector<std::pair<size_t, int64_t>> p2p;  // event index, posting time
    int64_t next_collective = 0;
    auto add_transfer = [&](const Raw& r, int64_t posted) {
      const auto [kind, direction] = comm_kind(r.collective_name.empty() ? r.name : r.collective_name);
      Event* e = add(r, kind, Stream::comm);
      e->bytes = r.bytes, e->direction = direction, e->peer = r.peer, e->tag = r.tag;
      e->group_size = r.group_size > 0 ? r.group_size : default_group_;
      const std::string group = r.group.empty() ? default_group_name_ : r.group;
      if (!group.empty()) e->detail = "process group " + group;
      if (kind == Kind::p2p) {
        e->group_size = 0;
        if (direction != Direction::none) p2p.emplace_back(events.size() - 1, posted);
      } else {
        e->collective = next_collective++;
      }
    };
    const std::vector<bool> in_comm_op = inside_comm_ops();
    const bool gpu_ranges = out_.gpu && std::any_of(raws_.begin(), raws_.end(), [](const Raw& r) {
      return r.cat == "gpu_user_annotation" && !is_profiler_step(r.name);
    });
    std::vector<size_t> order(raws_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return raws_[a].ts_ns < raws_[b].ts_ns; });
    for (size_t i : order) {
      const Raw& r = raws_[i];
      if (r.cat == "user_annotation") {
        if (is_profiler_step(r.name)) add(r, Kind::phase, Stream::compute);
        else if (is_comm_annotation(r.name)) {
          // A Work in flight; a send's or receive's peer is its c10d call's (External id - 1).
          Raw t = r;
          int64_t posted = r.ts_ns;
          if (auto c = c10d_of.find(r.external_id - 1); r.external_id > 0 && c != c10d_of.end())
            t.peer = c->second->peer, t.tag = c->second->tag, posted = c->second->ts_ns;
          if (!out_.gpu || r.name.starts_with("gloo:")) add_transfer(t, posted);  // nccl: ones are kernels' twins
        } else if (!gpu_ranges) {
          add(r, Kind::sublayer, Stream::compute);
        }
      } else if (r.cat == "gpu_user_annotation" && gpu_ranges && !is_profiler_step(r.name)) {
        // A GPU rank draws its ranges where the GPU ran them (phases still come from the CPU's).
        add(r, Kind::sublayer, Stream::compute);
      } else if (r.cat == "kernel") {
        // Posted when the GPU reached it: rounds are told apart by the kernels' own times.
        if (lower(r.name).starts_with("nccl")) add_transfer(with_call_facts(r, anchor(r)), r.ts_ns);
        else add(r, compute_kind(r.name), Stream::compute);
      } else if (r.cat == "gpu_memcpy" || r.cat == "gpu_memset") {
        add(r, Kind::memory, Stream::compute);
      } else if (r.cat == "cpu_op" && !out_.gpu) {
        if (is_comm_op(r.name)) {
          // The call (a collective's span, not a transfer: its bytes are its Work's or kernel's).
          Event* e = add(r, Kind::collective, Stream::comm);
          e->peer = r.peer, e->tag = r.tag, e->detail = "the call; its transfer is the Work's span";
        } else if (in_comm_op[i]) {
          add(r, compute_kind(r.name), Stream::comm)->detail = "inside a communication call";
        } else {
          add(r, compute_kind(r.name), Stream::compute);
        }
      }
    }
    widen_steps_to_gpu(events);
    name_phases(events, ranges);
    for (auto& [e, a] : events) out_.trace.events.push_back(std::move(e));
    std::stable_sort(p2p.begin(), p2p.end(), [](auto& a, auto& b) { return a.second < b.second; });
    out_.p2p = std::move(p2p);
    const int device_type = out_.gpu ? 1 : 0;
    for (const MemoryEvent& m : memory_)
      if (m.device_type == device_type) {
        MemorySample s{m.ts_ns, {}};
        s.bytes[kAllocatedCategory] = m.allocated;
        out_.trace.memory.push_back(s);
      }
    std::stable_sort(out_.trace.memory.begin(), out_.trace.memory.end(),
                     [](const MemorySample& a, const MemorySample& b) { return a.ts_ns < b.ts_ns; });
  }

  static bool is_comm_annotation(std::string_view n) { return n.starts_with("gloo:") || n.starts_with("nccl:"); }
  static bool is_comm_op(std::string_view n) { return n.starts_with("c10d::") || n == "record_param_comms"; }

  // Per raw event: whether it is a cpu_op inside a top-level communication cpu_op of its thread.
  std::vector<bool> inside_comm_ops() const {
    std::map<std::pair<int64_t, std::string>, std::vector<size_t>> by_thread;
    for (size_t i = 0; i < raws_.size(); ++i)
      if (raws_[i].cat == "cpu_op") by_thread[{raws_[i].pid, raws_[i].tid}].push_back(i);
    std::vector<bool> inside(raws_.size(), false);
    for (auto& [thread, ops] : by_thread) {
      std::sort(ops.begin(), ops.end(), [&](size_t a, size_t b) {
        return raws_[a].ts_ns != raws_[b].ts_ns ? raws_[a].ts_ns < raws_[b].ts_ns : raws_[a].end_ns() > raws_[b].end_ns();
      });
      int64_t top_end = std::numeric_limits<int64_t>::min();
      bool top_comm = false;
      for (size_t i : ops) {
        if (raws_[i].end_ns() <= top_end) {
          inside[i] = top_comm;
          continue;
        }
        top_end = raws_[i].end_ns(), top_comm = is_comm_op(raws_[i].name);
      }
    }
    return inside;
  }

  // An NCCL kernel's collective facts: its own args, else the record_param_comms its launch
  // ran inside.
  Raw with_call_facts(const Raw& kernel, int64_t launched) const {
    Raw k = kernel;
    if (k.bytes > 0 && !k.collective_name.empty()) return k;
    // The last call to start at or before the launch (calls do not nest), if it holds it.
    auto after = std::upper_bound(calls_.begin(), calls_.end(), launched, [](int64_t t, const Raw* r) { return t < r->ts_ns; });
    if (after == calls_.begin() || launched >= (*std::prev(after))->end_ns()) return k;
    const Raw& r = **std::prev(after);
    if (k.bytes == 0) k.bytes = r.bytes;
    if (k.collective_name.empty()) k.collective_name = r.collective_name;
    if (k.peer < 0) k.peer = r.peer;
    if (k.group_size == 0) k.group_size = r.group_size;
    if (k.group.empty()) k.group = r.group;
    return k;
  }

  // On a GPU rank a ProfilerStep's kernels run after the CPU launched them: the step's window
  // widens to the GPU work launched inside it.
  void widen_steps_to_gpu(std::vector<std::pair<Event, int64_t>>& events) const {
    if (!out_.gpu) return;
    for (auto& [step, a] : events) {
      if (step.kind != Kind::phase) continue;
      int64_t lo = step.ts_ns, hi = step.end_ns();
      for (const auto& [e, launched] : events)
        if (e.kind != Kind::phase && e.kind != Kind::sublayer && launched >= step.ts_ns && launched < step.end_ns())
          lo = std::min(lo, e.ts_ns), hi = std::max(hi, e.end_ns());
      step.ts_ns = lo, step.dur_ns = hi - lo;
    }
  }

  // Each event's phase and sublayer from the ranges around its anchor: "backward" inside a
  // range or autograd op that says so, "forward" inside one named forward, else the outermost
  // range's name; the sublayer is the innermost range's name.
  static void name_phases(std::vector<std::pair<Event, int64_t>>& events, const std::vector<const Raw*>& ranges) {
    std::vector<size_t> by_anchor(events.size());
    for (size_t i = 0; i < by_anchor.size(); ++i) by_anchor[i] = i;
    std::sort(by_anchor.begin(), by_anchor.end(), [&](size_t a, size_t b) { return events[a].second < events[b].second; });
    // The ranges open at the anchor, kept sorted (a trace may nest thousands deep): by end, to
    // close them; the user's own by (start, place), for the outermost and the innermost; and
    // how many say backward and forward.
    std::vector<std::pair<bool, bool>> says(ranges.size());  // backward, forward
    for (size_t k = 0; k < ranges.size(); ++k) {
      const std::string n = lower(ranges[k]->name);
      says[k] = {contains(n, "backward") || contains(n, "bwd"), contains(n, "forward") || contains(n, "fwd")};
    }
    auto is_user = [&](size_t k) { return ranges[k]->cat == "user_annotation" && !is_profiler_step(ranges[k]->name); };
    std::multimap<int64_t, size_t> open_by_end;
    std::set<std::pair<int64_t, size_t>> user_open;
    int backward = 0, forward = 0;
    size_t next = 0;
    for (size_t i : by_anchor) {
      Event& e = events[i].first;
      const int64_t t = events[i].second;
      for (; next < ranges.size() && ranges[next]->ts_ns <= t; ++next) {
        open_by_end.emplace(ranges[next]->end_ns(), next);
        if (is_user(next)) user_open.emplace(ranges[next]->ts_ns, next);
        backward += says[next].first, forward += says[next].second;
      }
      while (!open_by_end.empty() && open_by_end.begin()->first <= t) {
        const size_t k = open_by_end.begin()->second;
        open_by_end.erase(open_by_end.begin());
        user_open.erase({ranges[k]->ts_ns, k});
        backward -= says[k].first, forward -= says[k].second;
      }
      if (e.kind == Kind::phase) continue;
      // The outermost and innermost of the user's ranges around it, not counting itself.
      auto itself = [&](size_t k) { return ranges[k]->name == e.name && ranges[k]->ts_ns == e.ts_ns && ranges[k]->dur_ns == e.dur_ns; };
      const Raw *outer = nullptr, *inner = nullptr;
      for (auto it = user_open.begin(); it != user_open.end() && !outer; ++it)
        if (!itself(it->second)) outer = ranges[it->second];
      for (auto it = user_open.rbegin(); it != user_open.rend() && !inner; ++it)
        if (!itself(it->second)) inner = ranges[it->second];
      // A top-level range is its own phase ("grad_all_reduce").
      const std::string own = e.kind == Kind::sublayer ? e.name : "";
      e.phase = backward > 0 ? "backward" : forward > 0 ? "forward" : outer ? outer->name : own;
      e.sublayer = inner ? inner->name : "";
    }
  }

  const nlohmann::json& doc_;
  size_t position_ = 0;
  int default_group_ = 0;
  std::string default_group_name_;  // the default group's, from distributedInfo.pg_config
  RankFile out_;
  std::vector<Raw> raws_;
  std::vector<const Raw*> calls_;  // the record_param_comms ops, by start
  std::vector<MemoryEvent> memory_;
  std::map<std::pair<std::string, std::string>, std::pair<Raw, size_t>> async_open_;
};

// Moves a rank's timeline by `by` ns: its events, memory samples and posting times.
void shift(RankFile& f, int64_t by) {
  for (Event& e : f.trace.events) e.ts_ns += by;
  for (MemorySample& m : f.trace.memory) m.ts_ns += by;
  for (auto& [index, posted] : f.p2p) posted += by;
}

// Whether the ranks' sends and receives form one ring: every rank sends to one peer and
// receives from one, and following the sends from the first rank visits every rank.
bool is_ring(const std::vector<RankFile>& files) {
  if (files.size() < 2) return false;
  std::map<int, int> next, prev;
  for (const RankFile& f : files) {
    std::set<int> to, from;
    for (const auto& [index, posted] : f.p2p) {
      const Event& e = f.trace.events[index];
      (e.direction == Direction::send ? to : from).insert(e.peer);
    }
    if (to.size() != 1 || from.size() != 1 || *to.begin() < 0) return false;
    next[f.rank] = *to.begin(), prev[f.rank] = *from.begin();
  }
  // One cycle through every rank: each hop to a rank not yet visited, the last back home.
  std::set<int> visited;
  int at = files.front().rank;
  for (size_t hops = 0; hops < files.size(); ++hops) {
    auto n = next.find(at);
    if (n == next.end() || n->second == at || prev.count(n->second) == 0 || prev[n->second] != at) return false;
    if (!visited.insert(at).second) return false;
    at = n->second;
  }
  return at == files.front().rank && visited.size() == files.size();
}

// A ring rank's steps: each round of posts (sends and receives with no compute op starting
// between them, in the forward or the backward) opens a step that lasts until the next round
// of its phase, the last until the phase's last event ends. Consecutive rounds inside one
// record_function range below the phase's own are one step, which opens where that range does. Adds the `ring step` spans and
// stamps every event of the phase inside one with its step.
void add_ring_steps(RankFile& f) {
  std::vector<Event>& evs = f.trace.events;
  std::vector<int64_t> compute_starts;
  for (const Event& e : evs)
    if (e.stream == Stream::compute && is_work(e.kind)) compute_starts.push_back(e.ts_ns);
  std::sort(compute_starts.begin(), compute_starts.end());
  // The user's ranges by name, each name's by start (for the range a round's posts lie in).
  std::map<std::string, std::vector<const Event*>> ranges;
  for (const Event& r : evs)
    if (r.kind == Kind::sublayer) ranges[r.name].push_back(&r);
  for (auto& [name, v] : ranges) std::sort(v.begin(), v.end(), [](const Event* a, const Event* b) { return a->ts_ns < b->ts_ns; });
  std::vector<std::pair<std::string, int64_t>> rounds;  // phase, start
  int64_t last = std::numeric_limits<int64_t>::min();
  std::string last_range;
  for (const auto& [index, posted] : f.p2p) {
    const std::string& phase = evs[index].phase;
    if (phase != "forward" && phase != "backward") continue;
    const bool computed = std::upper_bound(compute_starts.begin(), compute_starts.end(), last) !=
                          std::upper_bound(compute_starts.begin(), compute_starts.end(), posted);
    // Rounds inside one record_function range of the user's own, below the phase's (a ring
    // step's range, whose backward posts K/V and then dK/dV), are one step.
    const std::string& range = evs[index].sublayer;
    const bool same_range = !range.empty() && range == last_range && lower(range).find(phase) == std::string::npos;
    if (rounds.empty() || rounds.back().first != phase || (computed && !same_range)) {
      // A step's range opens the step where it starts (its compute may come before its posts).
      int64_t begin = posted;
      if (auto named = ranges.find(range); named != ranges.end() && lower(range).find(phase) == std::string::npos) {
        const auto& v = named->second;  // the last of that name to start by the post, if it holds it
        auto after = std::upper_bound(v.begin(), v.end(), posted, [](int64_t t, const Event* r) { return t < r->ts_ns; });
        if (after != v.begin()) {
          const Event* r = *std::prev(after);
          if (posted < r->end_ns() && (rounds.empty() || r->ts_ns > rounds.back().second)) begin = r->ts_ns;
        }
      }
      rounds.emplace_back(phase, begin);
    }
    last = posted, last_range = range;
  }
  std::map<std::string, int64_t> phase_end;
  for (const Event& e : evs)
    if (!e.phase.empty()) phase_end[e.phase] = std::max(phase_end[e.phase], e.end_ns());
  std::map<std::string, int> count;
  std::vector<Event> steps;
  for (size_t i = 0; i < rounds.size(); ++i) {
    const auto& [phase, begin] = rounds[i];
    const int64_t end = i + 1 < rounds.size() && rounds[i + 1].first == phase ? rounds[i + 1].second : phase_end[phase];
    Event s;
    s.name = "ring step", s.kind = Kind::ring_step, s.phase = phase, s.step = count[phase]++;
    s.ts_ns = begin, s.dur_ns = std::max<int64_t>(0, end - begin);
    steps.push_back(s);
  }
  // Each phase's steps follow one another: the one holding a time is the last to start by it.
  std::map<std::string, std::vector<const Event*>> steps_of;
  for (const Event& st : steps) steps_of[st.phase].push_back(&st);  // in time order: rounds are
  auto step_at = [&](const std::string& phase, int64_t t) -> int {
    auto it = steps_of.find(phase);
    if (it == steps_of.end()) return -1;
    const auto& v = it->second;
    auto after = std::upper_bound(v.begin(), v.end(), t, [](int64_t x, const Event* st) { return x < st->ts_ns; });
    if (after == v.begin() || t >= (*std::prev(after))->end_ns()) return -1;
    return (*std::prev(after))->step;
  };
  for (Event& e : evs)
    if ((e.phase == "forward" || e.phase == "backward") && e.kind != Kind::phase)
      if (const int step = step_at(e.phase, e.ts_ns); step >= 0) e.step = step;
  // A transfer posted in a step belongs to it even when it starts a little later.
  for (const auto& [index, posted] : f.p2p)
    if (const int step = step_at(evs[index].phase, posted); step >= 0) evs[index].step = step;
  evs.insert(evs.end(), steps.begin(), steps.end());
}

// The k-th message on each (sender, receiver, tag) gets seq k on both sides; the flows from
// each send to its receive, indexing `files`.
std::vector<Flow> pair_messages(std::vector<RankFile>& files) {
  std::map<std::tuple<int, int, int, int64_t>, std::pair<size_t, const Event*>> sends;  // (from, to, tag, seq)
  std::vector<std::tuple<int, int, int, int64_t, size_t, const Event*>> recvs;
  for (size_t fi = 0; fi < files.size(); ++fi) {
    RankFile& f = files[fi];
    std::map<std::tuple<int, int, bool>, int64_t> next;
    for (const auto& [index, posted] : f.p2p) {
      Event& e = f.trace.events[index];
      if (e.peer < 0) continue;
      const bool send = e.direction == Direction::send;
      e.seq = next[{e.peer, e.tag, send}]++;
      if (send) sends[{f.rank, e.peer, e.tag, e.seq}] = {fi, &e};
      else recvs.emplace_back(e.peer, f.rank, e.tag, e.seq, fi, &e);
    }
  }
  std::vector<Flow> flows;
  for (const auto& [from, to, tag, seq, fi, recv] : recvs) {
    auto s = sends.find({from, to, tag, seq});
    if (s == sends.end()) continue;
    Flow fl;
    fl.id = int64_t(flows.size()), fl.from = s->second.first, fl.to = fi;
    fl.from_ts_ns = s->second.second->ts_ns, fl.to_ts_ns = recv->end_ns();
    flows.push_back(fl);
  }
  return flows;
}

std::string us_text(int64_t ns) { return detail::concat(double(ns) / 1000.0, " us"); }

// Puts the ranks on one clock (ClockAlign) and says how in RunInfo::clock.
void align_clocks(std::vector<RankFile>& files, ClockAlign align, RunInfo& run) {
  int64_t base = std::numeric_limits<int64_t>::max();
  for (const RankFile& f : files) base = std::min(base, f.base_ns);
  bool one_clock = true;
  for (RankFile& f : files) {
    shift(f, f.base_ns - base);
    one_clock = one_clock && !f.host.empty() && f.host == files[0].host;  // base + ts: the host's clock
  }
  if (align == ClockAlign::none || files.size() == 1) {
    run.clock = files.size() == 1 ? "one rank's file" : "each file's own clock (not aligned: --align none)";
    return;
  }
  if (align == ClockAlign::automatic && one_clock) {
    run.clock = "one host (" + files[0].host + "), one clock: not shifted";
    return;
  }
  // The collectives every rank ran, in order, while their kinds agree.
  std::vector<std::vector<const Event*>> ends(files.size());
  for (size_t i = 0; i < files.size(); ++i)
    for (const Event& e : files[i].trace.events)
      if (e.collective >= 0) ends[i].push_back(&e);
  for (auto& v : ends) std::sort(v.begin(), v.end(), [](const Event* a, const Event* b) { return a->collective < b->collective; });
  // The k-th collective of every rank is one call only when all ran the same ones.
  size_t common = ends[0].size();
  for (size_t i = 0; i < ends.size(); ++i)
    if (ends[i].size() != ends[0].size()) {
      run.clock = detail::concat("not aligned: the ranks ran different numbers of collectives (rank ", files[0].rank, ": ",
                                 ends[0].size(), ", rank ", files[i].rank, ": ", ends[i].size(), "; each file's own clock)");
      return;
    }
  for (size_t k = 0; k < common; ++k)
    for (const auto& v : ends)
      if (v[k]->kind != ends[0][k]->kind) {
        run.clock = detail::concat("not aligned: the ranks' collective ", k, " differs in kind (each file's own clock)");
        return;
      }
  if (common == 0) {
    run.clock = "not aligned: the ranks share no collective to align by (each file's own clock)";
    return;
  }
  int64_t worst = 0;
  for (size_t i = 1; i < files.size(); ++i) {
    std::vector<int64_t> d;
    for (size_t k = 0; k < common; ++k) d.push_back(ends[0][k]->end_ns() - ends[i][k]->end_ns());
    std::vector<int64_t> sorted = d;
    std::sort(sorted.begin(), sorted.end());
    const int64_t offset = sorted.size() % 2 ? sorted[sorted.size() / 2]
                                             : sorted[sorted.size() / 2 - 1] + (sorted[sorted.size() / 2] - sorted[sorted.size() / 2 - 1]) / 2;
    int64_t spread = 0;
    for (int64_t x : d) spread = std::max(spread, x > offset ? x - offset : offset - x);
    files[i].trace.clock_offset_ns = offset, files[i].trace.clock_uncertainty_ns = spread;
    worst = std::max(worst, spread);
  }
  for (size_t i = 1; i < files.size(); ++i) shift(files[i], files[i].trace.clock_offset_ns);
  run.clock = detail::concat("aligned by the ends of ", common, common == 1 ? " collective" : " collectives",
                             " (each rank's median difference from rank ", files[0].rank, "'s); uncertainty ",
                             common == 1 ? std::string("unknown (one collective)") : "up to " + us_text(worst));
}

// After alignment a receive cannot end before its send began: how many do.
int64_t receives_before_sends(const TraceData& t) {
  int64_t n = 0;
  for (const Flow& f : t.flows)
    if (f.to_ts_ns < f.from_ts_ns) ++n;
  return n;
}

// "0, 1, 3": ranks for a message.
std::string listed(const std::set<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

TraceData assemble(std::vector<RankFile> files, ClockAlign align) {
  // One file per rank, one process per file, every rank of world_size present.
  std::stable_sort(files.begin(), files.end(), [](const RankFile& a, const RankFile& b) { return a.rank < b.rank; });
  for (size_t i = 0; i + 1 < files.size(); ++i) {
    const RankFile &a = files[i], &b = files[i + 1];
    RS_CHECK(a.rank != b.rank, "rank ", a.rank, " is in two files: ", a.source, " and ", b.source);
  }
  std::map<std::pair<std::string, int64_t>, const RankFile*> process;
  for (const RankFile& f : files) {
    if (f.cpu_pid < 0) continue;
    auto [it, fresh] = process.try_emplace({f.host, f.cpu_pid}, &f);
    RS_CHECK(fresh, f.source, " and ", it->second->source, " are one process (host '", f.host, "', pid ", f.cpu_pid,
             "): a file given twice?");
  }
  int world = 0;
  for (const RankFile& f : files) {
    RS_CHECK(world == 0 || f.world_size == 0 || f.world_size == world, f.source, " says world_size ", f.world_size,
             " where ", files[0].source, " says ", world);
    if (f.world_size > 0) world = f.world_size;
  }
  if (world > 0) {
    std::set<int> have;
    for (const RankFile& f : files) have.insert(f.rank);
    for (int r = 0; r < world; ++r)
      if (!have.count(r) && files.size() > 1)
        throw Error(detail::concat("rank ", r, " of ", world, " is missing: the files are of ranks ", listed(have),
                                   " (distributedInfo.world_size = ", world, ")"));
  }
  if (world == 0 && files.size() > 1) {  // no world_size: the run's ranks are its files'
    std::set<int> have;
    for (const RankFile& f : files) have.insert(f.rank);
    for (const RankFile& f : files)
      for (const auto& [peer, where] : f.peers)
        RS_CHECK(have.count(peer), f.source, ": ", where, " = ", peer, " is not a rank of the run (its files are of ranks ",
                 listed(have), ")");
  }
  TraceData out;
  out.run.producer = kKinetoProducer;
  out.run.ranks = world > 0 ? world : int(files.size());
  out.run.backend = files[0].backend;
  out.run.device = files[0].gpu ? "cuda" : "cpu";
  if (is_ring(files))  // on each file's own clock, which its posting times (RankFile::p2p) are on
    for (RankFile& f : files) add_ring_steps(f);
  align_clocks(files, align, out.run);
  // Times from the earliest window (or event) start.
  int64_t origin = std::numeric_limits<int64_t>::max(), any = origin;
  const RankFile *origin_file = &files[0], *any_file = &files[0];
  for (const RankFile& f : files)
    for (const Event& e : f.trace.events) {
      if (e.ts_ns < any) any = e.ts_ns, any_file = &f;
      if (e.kind == Kind::phase && e.ts_ns < origin) origin = e.ts_ns, origin_file = &f;
    }
  if (origin == std::numeric_limits<int64_t>::max())
    origin = any == std::numeric_limits<int64_t>::max() ? 0 : any, origin_file = any_file;
  nlohmann::json sources = nlohmann::json::array();
  for (RankFile& f : files) {
    shift(f, -origin);
    for (const Event& e : f.trace.events)
      RS_CHECK(e.ts_ns > -kMaxTimeNs && e.end_ns() < kMaxTimeNs, f.source, ": event '", e.name, "' lies more than 104 days from ",
               &f == origin_file ? "the file's first step" : "the first step of " + origin_file->source,
               " (clocks that far apart are not one run's)");
    f.trace.strategy = kKinetoStrategy, f.trace.rank = f.rank;
    sources.push_back(f.source);
  }
  out.flows = pair_messages(files);  // before the sort below: p2p holds indices into the events
  for (RankFile& f : files) {
    std::stable_sort(f.trace.events.begin(), f.trace.events.end(), [](const Event& a, const Event& b) {
      return a.ts_ns != b.ts_ns ? a.ts_ns < b.ts_ns : a.dur_ns > b.dur_ns;
    });
    out.ranks.push_back(std::move(f.trace));  // in the files' order, which the flows index
  }
  if (const int64_t n = receives_before_sends(out); n > 0)
    out.run.clock += detail::concat("; ", n, " of ", out.flows.size(), " receives end before their send starts");
  out.other["kineto_files"] = sources;
  return out;
}

RankFile read_file(const nlohmann::json& doc, const std::string& source, size_t position) {
  if (!is_kineto(doc)) throw Error(source + ": not a PyTorch profiler (Kineto) trace");
  return FileReader(doc, source, position).read();
}

}  // namespace

std::vector<std::string> trace_input_files(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      try {
        for (const std::string& f : kineto_files(p)) out.push_back(f);
        continue;
      } catch (const Error&) {  // no traces in it: reading it will say so
      }
    }
    out.push_back(p);
  }
  return out;
}

std::string clock_shift_text(const RunInfo& run, const RankTrace& rank) {
  char b[96];
  std::snprintf(b, sizeof b, "shifted by %+.3f us (", double(rank.clock_offset_ns) / 1000.0);
  if (run.clock.find("one collective") != std::string::npos) return b + std::string("uncertainty unknown: one collective)");
  return detail::concat(b, "+- ", double(rank.clock_uncertainty_ns) / 1000.0, " us)");
}

bool is_kineto(const nlohmann::json& doc) {
  if (!doc.is_object() || !doc.contains("traceEvents")) return false;
  for (const char* key : {"schemaVersion", "deviceProperties", "distributedInfo", "baseTimeNanoseconds", "traceName"})
    if (doc.contains(key)) return true;
  return false;
}

std::vector<std::string> kineto_files(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> out;
  fs::directory_iterator it(dir, ec);
  RS_CHECK(!ec, "cannot list ", dir, ": ", ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    RS_CHECK(!ec, "cannot list ", dir, ": ", ec.message());
    std::string name = it->path().filename().string();
    if (name.ends_with(".gz")) name.resize(name.size() - 3);
    if ((name.starts_with("rank") && name.ends_with(".json")) || name.ends_with(".pt.trace.json"))
      out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  RS_CHECK(!out.empty(), "no PyTorch profiler traces in ", dir, ": it holds no rank*.json or *.pt.trace.json (or .gz)");
  return out;
}

TraceData kineto_trace(const nlohmann::json& doc, const std::string& source) {
  std::vector<RankFile> files;
  files.push_back(read_file(doc, source, 0));
  return assemble(std::move(files), ClockAlign::none);
}

TraceData parse_kineto(const std::vector<KinetoText>& texts, ClockAlign align) {
  RS_CHECK(!texts.empty(), "no Kineto trace to read");
  std::vector<RankFile> files;
  for (size_t i = 0; i < texts.size(); ++i) files.push_back(read_file(parse_json(texts[i].text, texts[i].source), texts[i].source, i));
  return assemble(std::move(files), align);
}

TraceData read_kineto(const std::vector<std::string>& paths, ClockAlign align) {
  RS_CHECK(!paths.empty(), "no Kineto trace to read");
  // One file's JSON at a time (about 13 bytes of memory per byte of it), plus the events kept.
  double total = 0, largest = 0;
  for (const std::string& p : paths) {
    const double size = double(input_size(p, "trace"));  // refuses one over the limit
    total += size, largest = std::max(largest, size);
  }
  require_memory(14.0 * largest + 2.0 * total, detail::concat("reading ", paths.size(), paths.size() == 1 ? " trace" : " traces"), "trace", 1);
  std::vector<RankFile> files;
  // The try holds the document's whole life: nlohmann allocates to destroy a large one too.
  for (size_t i = 0; i < paths.size(); ++i) try {
      const nlohmann::json doc = parse_json(read_input_file(paths[i], "trace", 14.0), paths[i]);
      files.push_back(read_file(doc, paths[i], i));
    } catch (const std::bad_alloc&) {  // a file of many tiny values takes more than the estimate
      throw Error("trace " + paths[i] + ": out of memory parsing it (the machine's, or a limit on this process)");
    }
  return assemble(std::move(files), align);
}

}  // namespace ringside::trace
