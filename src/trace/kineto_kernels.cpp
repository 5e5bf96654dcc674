// A profiler run's kernels as samples of the model's rates (what each sample is: kineto_kernels.h).
#include "trace/kineto_kernels.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/json_input.h"
#include "core/memory_limits.h"
#include "core/text_file.h"
#include "trace/event_reader.h"
#include "trace/kineto.h"
#include "trace/kineto_text.h"

namespace ringside::trace {

namespace {

// The model's name for an element type: fp8 for any Float8 variant, bf16 for BFloat16 (Half too:
// the same tensor-core rate), fp32 for float; "" for any other.
std::string model_dtype(std::string_view type) {
  const std::string t = lower(type);
  if (contains(t, "float8")) return "fp8";
  if (contains(t, "bfloat16") || contains(t, "half")) return "bf16";
  if (t == "float" || t == "c10::float") return "fp32";
  return "";
}

// A cpu_op with the args a sample reads.
struct CpuOp {
  const nlohmann::json* event = nullptr;
  std::string name;
  int64_t ts_ns = 0, end_ns = 0;
  size_t index = 0;
};

struct Launch {
  std::string thread;
  int64_t ts_ns = 0, end_ns = 0;
};

struct Kernel {
  std::string name;
  int64_t ts_ns = 0, end_ns = 0, correlation = -1;
  std::string stream;
  size_t index = 0;
  int op = -1;        // the innermost cpu_op around its launch (index into the file's ops), -1: none
  int64_t launch_end_ns = -1;
};

// More elements (or bytes) than any GPU's memory holds (2^50, a PiB): a shape no run had.
constexpr double kLargestReal = 1125899906842624.0;

// The dims of tensor argument `i` of an op ("Input Dims"[i]), empty if absent or not a tensor.
std::vector<int64_t> dims_of(const EventReader& rd, const nlohmann::json& args, size_t i) {
  const nlohmann::json* dims = rd.find(args, "Input Dims");
  if (!dims || !dims->is_array() || i >= dims->size() || !(*dims)[i].is_array()) return {};
  std::vector<int64_t> out;
  for (const nlohmann::json& d : (*dims)[i]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) return {};  // a TensorList, or not a shape
    out.push_back(d.get<int64_t>());
  }
  return out;
}
std::string type_of(const nlohmann::json& args, size_t i) {
  const auto it = args.find("Input type");
  if (it == args.end() || !it->is_array() || i >= it->size() || !(*it)[i].is_string()) return "";
  return (*it)[i].get<std::string>();
}
std::string concrete(const nlohmann::json& args, size_t i) {
  const auto it = args.find("Concrete Inputs");
  if (it == args.end() || !it->is_array() || i >= it->size()) return "";
  const nlohmann::json& v = (*it)[i];
  return v.is_string() ? v.get<std::string>() : v.is_boolean() ? (v.get<bool>() ? "True" : "False") : "";
}
double product(const std::vector<int64_t>& d) {
  double p = 1;
  for (int64_t x : d) p *= double(x);
  return p;
}

// The fused attention ops: where their tensors and is_causal are. `bhsd`: dims [b, H, s, d]
// (SDPA's), else [b, s, H, d] (FlashAttention's). Backward ops start with dout.
struct AttentionOp {
  const char* name;
  bool backward, bhsd;
  size_t q, k, causal;
};
constexpr AttentionOp kAttentionOps[] = {
    {"aten::_scaled_dot_product_flash_attention", false, true, 0, 1, 4},
    {"aten::_scaled_dot_product_flash_attention_backward", true, true, 1, 2, 11},
    {"aten::_scaled_dot_product_cudnn_attention", false, true, 0, 1, 6},
    {"aten::_scaled_dot_product_cudnn_attention_backward", true, true, 1, 2, 14},
    {"aten::_flash_attention_forward", false, false, 0, 1, 8},
    {"aten::_flash_attention_backward", true, false, 1, 2, 11},
    {"flash_attn::_flash_attn_forward", false, false, 0, 1, 5},
    {"flash_attn::_flash_attn_backward", true, false, 1, 2, 11},
};

// The kernel family of an attention kernel's name; "" for one the model has no rates for.
std::string attention_family(std::string_view kernel) {
  const std::string n = lower(kernel);
  if (contains(n, "sm100") && (contains(n, "flash") || contains(n, "fmha"))) return "fa4";
  if (contains(n, "flash") && contains(n, "sm90")) return "fa3";
  if (contains(n, "cudnn") || contains(n, "sdpa")) return "cudnn";
  if (contains(n, "flash_fwd") || contains(n, "flash_bwd") || contains(n, "pytorch_flash")) return "fa2";
  return "";
}

// One-kernel memory-bound ops the sample reads, and how many times its tensors' bytes pass
// through memory: elementwise ops read their inputs and write an output as large as the largest;
// an in-place op (name_) writes over its first input; copy_ reads src and writes self; a norm
// reads its input and weights and writes an output of the input's size.
enum class Traffic { elementwise, in_place, copy, norm };
bool memory_op(const std::string& name, Traffic& traffic) {
  static const std::set<std::string> elementwise = {"aten::add", "aten::sub", "aten::mul", "aten::div", "aten::silu", "aten::gelu",
                                                    "aten::neg", "aten::exp", "aten::sigmoid", "aten::tanh", "aten::relu",
                                                    "aten::silu_backward", "aten::gelu_backward", "aten::threshold_backward"};
  static const std::set<std::string> in_place = {"aten::add_", "aten::sub_", "aten::mul_", "aten::div_"};
  if (elementwise.count(name)) return traffic = Traffic::elementwise, true;
  if (in_place.count(name)) return traffic = Traffic::in_place, true;
  if (name == "aten::copy_") return traffic = Traffic::copy, true;
  if (name == "aten::native_layer_norm" || name == "aten::_fused_rms_norm") return traffic = Traffic::norm, true;
  return false;
}

// What a NCCL kernel's name (or its record_param_comms' "Collective name") says it runs, by the
// reader's rule (comm_kind); none for what the model has no form for (broadcast, a batched send
// and receive, ...).
std::optional<NcclCall> collective_of(std::string_view text) {
  const auto [kind, direction] = comm_kind(text);
  switch (kind) {
    case Kind::all_gather: return NcclCall::all_gather;
    case Kind::reduce_scatter: return NcclCall::reduce_scatter;
    case Kind::all_reduce: return NcclCall::all_reduce;
    case Kind::all_to_all: return NcclCall::all_to_all;
    case Kind::p2p:
      if (direction == Direction::send) return NcclCall::send;
      if (direction == Direction::recv) return NcclCall::recv;
      return std::nullopt;
    default: return std::nullopt;
  }
}

// "[0, 1, 2]" (as torch writes "Process Group Ranks") or a JSON list -> the ranks, each a rank of
// the world and none twice; empty when absent. Anything else is an error naming the event.
std::vector<int> ranks_of(const EventReader& rd, const nlohmann::json* v, int world) {
  std::vector<int> out;
  if (!v) return out;
  nlohmann::json list = *v;
  if (v->is_string()) list = nlohmann::json::parse(v->get<std::string>(), nullptr, false);
  if (list.is_discarded() || !list.is_array() || list.empty())
    rd.fail("'args.Process Group Ranks' must be a list of ranks, as \"[0, 1]\", got " + v->dump().substr(0, 40));
  for (const nlohmann::json& r : list) {
    if (!r.is_number_integer() || r.get<int64_t>() < 0 || (world > 0 && r.get<int64_t>() >= world))
      rd.fail(detail::concat("'args.Process Group Ranks' holds ", r.dump().substr(0, 20), ", not a rank of the world (0 to ", world - 1, ")"));
    if (std::find(out.begin(), out.end(), int(r.get<int64_t>())) != out.end())
      rd.fail("'args.Process Group Ranks' holds rank " + r.dump() + " twice");
    out.push_back(int(r.get<int64_t>()));
  }
  return out;
}

// One file's events, tied together, and its samples added to `run`.
class FileReader {
 public:
  FileReader(const nlohmann::json& doc, std::string source, size_t position, int run_index, ProfiledRun& run)
      : doc_(doc), source_(std::move(source)), run_(run), run_index_(run_index) {
    EventReader top(doc_, source_);
    rank_ = int(position);
    if (const nlohmann::json* info = top.find(doc_, "distributedInfo"); info && info->is_object()) {
      rank_ = int(top.integer_in(*info, "rank", false, 0, INT32_MAX, rank_, "distributedInfo."));
      world_ = int(top.integer_in(*info, "world_size", false, 0, INT32_MAX, 0, "distributedInfo."));
      if (world_ > 0 && rank_ >= world_)
        throw Error(detail::concat(source_, ": distributedInfo.rank ", rank_, " is not a rank of its world_size ", world_));
      run_.world_size = std::max(run_.world_size, world_);
    }
    for (const char* key : {"host_name", "hostname"})
      if (const nlohmann::json* h = top.find(doc_, key); h && h->is_string()) run_.host[rank_] = h->get<std::string>();
    if (const nlohmann::json* props = top.find(doc_, "deviceProperties"); props && props->is_array() && !props->empty() &&
                                                                            (*props)[0].is_object()) {
      const nlohmann::json& gpu = (*props)[0];
      if (gpu.contains("name") && gpu["name"].is_string()) device_ = gpu["name"].get<std::string>();
      sms_ = int(top.integer_in(gpu, "numSms", false, 0, 1 << 20, 0, "deviceProperties[0]."));
      run_.host_gpus = std::max(run_.host_gpus, int(props->size()));
    }
  }

  int rank() const { return rank_; }
  int world() const { return world_; }
  const std::string& device() const { return device_; }
  int sms() const { return sms_; }

  void read() {
    const nlohmann::json& events = doc_["traceEvents"];
    if (!events.is_array()) throw Error(source_ + ": traceEvents must be a list");
    for (size_t i = 0; i < events.size(); ++i) read_event(events[i], i);
    tie_launches();
    samples();
  }

 private:
  void read_event(const nlohmann::json& ev, size_t i) {
    EventReader rd(ev, detail::concat(source_, ": traceEvents[", i, "]"));
    if (!ev.is_object()) rd.fail(detail::concat("an event must be an object, got ", ev.type_name()));
    if (rd.str("ph", false) != "X") return;
    const std::string cat = rd.str("cat", false);
    if (cat != "cpu_op" && cat != "user_annotation" && cat != "cuda_runtime" && cat != "cuda_driver" && cat != "kernel") return;
    const nlohmann::json* pid = rd.find(ev, "pid");
    if (!pid || pid->is_string()) return;  // the profiler's own events
    const std::string name = rd.str("name", true);
    const int64_t ts = rd.epoch_time_ns("ts"), end = ts + rd.time_ns("dur", true, 0);
    const nlohmann::json& args = rd.args();
    const std::string thread = detail::concat(pid->dump(), "/", rd.find(ev, "tid") ? rd.find(ev, "tid")->dump() : "");
    if (cat == "kernel") {
      Kernel k;
      k.name = name, k.ts_ns = ts, k.end_ns = end, k.index = i;
      k.correlation = rd.integer_in(args, "correlation", true, 0, INT64_MAX, -1, "args.");
      if (!kernel_correlations_.insert(k.correlation).second)
        rd.fail(detail::concat("'args.correlation' ", k.correlation, " is another kernel's too: a kernel's launch would be ambiguous"));
      k.stream = thread;
      kernels_.push_back(std::move(k));
    } else if (cat == "cuda_runtime" || cat == "cuda_driver") {
      if (contains(name, "Launch") && !contains(name, "Graph") && args.contains("correlation")) {
        const int64_t c = rd.integer_in(args, "correlation", true, 0, INT64_MAX, -1, "args.");
        if (!launches_.emplace(c, Launch{thread, ts, end}).second)
          rd.fail(detail::concat("'args.correlation' ", c, " is another launch's too: its kernel's op would be ambiguous"));
      }
    } else {
      if (args.contains("Input Dims")) run_.shapes = true;
      ops_by_thread_[thread].push_back(int(ops_.size()));
      ops_.push_back(CpuOp{&ev, name, ts, end, i});
    }
  }

  // Each kernel's launch, and the innermost cpu_op around it on the launching thread.
  void tie_launches() {
    parent_.assign(ops_.size(), -1);
    for (auto& [thread, ops] : ops_by_thread_) {
      std::stable_sort(ops.begin(), ops.end(), [&](int a, int b) {
        return ops_[a].ts_ns != ops_[b].ts_ns ? ops_[a].ts_ns < ops_[b].ts_ns : ops_[a].end_ns > ops_[b].end_ns;
      });
      // Each op's caller: the innermost op still open when it begins that holds it.
      std::vector<int> open;
      for (int op : ops) {
        while (!open.empty() && ops_[open.back()].end_ns < ops_[op].end_ns) open.pop_back();
        parent_[op] = open.empty() ? -1 : open.back();
        open.push_back(op);
      }
    }
    // Each op's nearest op of each kind around it, itself included: a parent comes before its
    // children in each thread's order, so one pass (linear however deep the nesting).
    owner_.assign(ops_.size(), -1), call_.assign(ops_.size(), -1), nccl_range_.assign(ops_.size(), -1);
    for (const auto& [thread, ops] : ops_by_thread_)
      for (int op : ops) {
        const int up = parent_[op];
        const std::string& name = ops_[op].name;
        owner_[op] = readable(name) ? op : up >= 0 ? owner_[up] : -1;
        call_[op] = name == "record_param_comms" ? op : up >= 0 ? call_[up] : -1;
        nccl_range_[op] = name.starts_with("nccl:") ? op : up >= 0 ? nccl_range_[up] : -1;
      }
    for (Kernel& k : kernels_) {
      const auto l = launches_.find(k.correlation);
      if (l == launches_.end()) continue;
      k.launch_end_ns = l->second.end_ns;
      const auto ops = ops_by_thread_.find(l->second.thread);
      if (ops == ops_by_thread_.end()) continue;
      // The last op to begin at or before the launch, or the first of its callers that holds it.
      const std::vector<int>& list = ops->second;
      const auto it = std::upper_bound(list.begin(), list.end(), l->second.ts_ns, [&](int64_t t, int op) { return t < ops_[op].ts_ns; });
      if (it == list.begin()) continue;
      for (int op = *std::prev(it); op >= 0; op = parent_[op])
        if (ops_[op].end_ns >= l->second.end_ns) {
          k.op = op;
          break;
        }
    }
  }

  void skip(const std::string& why, int64_t kernels = 1) { run_.skipped[why] += kernels; }

  void samples() {
    run_.kernels += int64_t(kernels_.size());
    // Kernels by the op that launched them; the op's own sample takes all of them.
    std::map<int, std::vector<const Kernel*>> by_op;
    for (const Kernel& k : kernels_) {
      if (lower(k.name).starts_with("nccl")) {
        comm(k);
        continue;
      }
      if (k.op < 0) {
        skip("no CPU op launched it: no cudaLaunchKernel has its correlation");
        continue;
      }
      by_op[k.op].push_back(&k);
    }
    // An op's kernels go to the innermost op around them that a sample reads (aten::linear's
    // kernels are aten::addmm's, which is inside it).
    std::map<int, std::vector<const Kernel*>> sampled;
    for (const auto& [op, ks] : by_op) {
      const int owner = owner_[op];
      if (owner < 0) {
        skip("an op the model has no rate for (" + ops_[op].name + ")", int64_t(ks.size()));
        continue;
      }
      sampled[owner].insert(sampled[owner].end(), ks.begin(), ks.end());
    }
    for (const auto& [op, ks] : sampled) sample(op, ks);
    gaps();
  }

  static bool readable(const std::string& name) {
    Traffic t;
    if (memory_op(name, t)) return true;
    for (const AttentionOp& a : kAttentionOps)
      if (name == a.name) return true;
    return name == "aten::mm" || name == "aten::addmm" || name == "aten::linear" || name == "aten::matmul" || name == "aten::_scaled_mm";
  }

  void sample(int op, const std::vector<const Kernel*>& ks) {
    const CpuOp& o = ops_[op];
    EventReader rd(*o.event, detail::concat(source_, ": traceEvents[", o.index, "]"));
    const nlohmann::json& args = rd.args();
    double seconds = 0;
    const Kernel* longest = ks.front();
    for (const Kernel* k : ks) {
      seconds += double(k->end_ns - k->ts_ns) * 1e-9;
      if (k->end_ns - k->ts_ns > longest->end_ns - longest->ts_ns) longest = k;
    }
    const int64_t count = int64_t(ks.size());
    if (!args.contains("Input Dims")) return skip("no shapes (profile with record_shapes=True)", count);
    for (const AttentionOp& a : kAttentionOps)
      if (o.name == a.name) return attention(rd, args, a, *longest, seconds, count);
    Traffic traffic;
    if (memory_op(o.name, traffic)) return memory(rd, args, o.name, traffic, seconds, count);
    gemm(rd, args, o.name, *longest, seconds, count);
  }

  void gemm(const EventReader& rd, const nlohmann::json& args, const std::string& op, const Kernel& kernel, double seconds, int64_t count) {
    // Where a and b are: mm(a, b), matmul(a, b), _scaled_mm(a, b, ...); addmm(bias, a, b);
    // linear(x, W[, bias]) computes x W^T.
    const bool addmm = op == "aten::addmm", linear = op == "aten::linear";
    const size_t ia = addmm ? 1 : 0, ib = addmm ? 2 : 1;
    const std::vector<int64_t> a = dims_of(rd, args, ia), b = dims_of(rd, args, ib);
    if (product(a) > kLargestReal || product(b) > kLargestReal) return skip("a GEMM whose shapes are too large to be real (" + op + ")", count);
    GemmSample s;
    s.rank = rank_, s.op = op, s.kernel = kernel.name, s.seconds = seconds;
    s.dtype = model_dtype(type_of(args, ia));
    if (linear && a.size() >= 2 && b.size() == 2 && a.back() == b[1]) {
      s.m = int64_t(product(a) / double(a.back())), s.k = a.back(), s.n = b[0];
    } else if (!linear && a.size() == 2 && b.size() == 2 && a[1] == b[0]) {
      s.m = a[0], s.k = a[1], s.n = b[1];
    } else {
      return skip("a GEMM whose shapes are not one m x k by k x n product (" + op + ")", count);
    }
    if (s.dtype.empty()) return skip("a GEMM of an element type the model has no rate for (" + type_of(args, ia) + ")", count);
    if (s.m == 0 || s.n == 0 || s.k == 0) return skip("an empty GEMM", count);
    run_.gemms.push_back(s);
  }

  void attention(const EventReader& rd, const nlohmann::json& args, const AttentionOp& a, const Kernel& kernel, double seconds,
                 int64_t count) {
    const std::vector<int64_t> q = dims_of(rd, args, a.q), k = dims_of(rd, args, a.k);
    if (q.size() != 4 || k.size() != 4) return skip("attention without 4-D q and k dims (" + std::string(a.name) + ")", count);
    AttentionSample s;
    s.rank = rank_, s.op = a.name, s.kernel = kernel.name, s.seconds = seconds, s.backward = a.backward;
    s.family = attention_family(kernel.name);
    if (s.family.empty()) return skip("an attention kernel of a family the model has no rates for (" + kernel.name.substr(0, 60) + ")", count);
    s.b = q[0], s.d = q[3];
    s.H = a.bhsd ? q[1] : q[2], s.sq = a.bhsd ? q[2] : q[1];
    s.Hkv = a.bhsd ? k[1] : k[2], s.sk = a.bhsd ? k[2] : k[1];
    const std::string causal = lower(concrete(args, a.causal));
    if (causal == "true" || causal == "1") s.causal = true;
    else if (causal == "false" || causal == "0") s.causal = false;
    else return skip("attention whose mask is not recorded (its is_causal in 'Concrete Inputs')", count);
    if (s.b <= 0 || s.sq <= 0 || s.sk <= 0 || s.H <= 0 || s.d <= 0) return skip("an empty attention call", count);
    if (product(q) > kLargestReal || product(k) > kLargestReal)
      return skip("attention whose tensors are too large to be real (" + std::string(a.name) + ")", count);
    run_.attention.push_back(s);
  }

  void memory(const EventReader& rd, const nlohmann::json& args, const std::string& op, Traffic traffic, double seconds, int64_t count) {
    if (count != 1) return skip("a memory-bound op of several kernels", count);
    const auto dims = args.find("Input Dims");
    double sum = 0, largest = 0, first = -1;
    for (size_t i = 0; dims->is_array() && i < dims->size(); ++i) {
      const std::vector<int64_t> d = dims_of(rd, args, i);
      const int bytes = dtype_bytes(type_of(args, i));
      if (bytes == 0 || (d.empty() && !(*dims)[i].is_array())) continue;  // a scalar or an optional
      const double b = product(d) * bytes;
      if (first < 0) first = b;
      sum += b, largest = std::max(largest, b);
    }
    if (sum <= 0) return skip("a memory-bound op without tensor sizes", count);
    if (sum > kLargestReal) return skip("a memory-bound op whose tensors are too large to be real (" + op + ")", count);
    MemoryBoundSample s;
    s.rank = rank_, s.op = op, s.seconds = seconds;
    s.bytes = traffic == Traffic::elementwise ? sum + largest : traffic == Traffic::in_place ? sum + first
              : traffic == Traffic::copy                     ? sum
                                                              : sum + first;  // a norm: its input again, as output
    run_.memory.push_back(s);
  }

  // A NCCL kernel with the record_param_comms around its launch (or the c10d op's input).
  void comm(const Kernel& k) {
    CommSample s;
    s.run = run_index_, s.rank = rank_, s.seconds = double(k.end_ns - k.ts_ns) * 1e-9;
    const CpuOp* call = k.op >= 0 && call_[k.op] >= 0 ? &ops_[call_[k.op]] : nullptr;
    if (!call) return skip("a NCCL kernel without its record_param_comms");
    EventReader rd(*call->event, detail::concat(source_, ": traceEvents[", call->index, "]"));
    const nlohmann::json& args = rd.args();
    std::string name = rd.str_in(args, "Collective name", false, "args.");
    const int bytes = dtype_bytes(rd.str_in(args, "dtype", false, "args."));
    const double in = double(rd.integer_in(args, "In msg nelems", false, 0, int64_t(kMaxBytes), -1, "args."));
    const double out = double(rd.integer_in(args, "Out msg nelems", false, 0, int64_t(kMaxBytes), -1, "args."));
    std::optional<NcclCall> kind;
    if (bytes > 0 && in >= 0 && out >= 0) {
      kind = collective_of(name.empty() ? k.name : name);
      // nccl-tests' size S: the whole buffer of a collective, the message of a send or receive.
      s.bytes = bytes * (kind == NcclCall::all_gather || kind == NcclCall::recv ? out : in);
    } else {
      // Before torch 2.1: the sizes are on the "nccl:<collective>" range the launch is in, its one tensor.
      if (const int c = nccl_range_[k.op]; c >= 0) {
        EventReader range(*ops_[c].event, detail::concat(source_, ": traceEvents[", ops_[c].index, "]"));
        const std::vector<int64_t> d = dims_of(range, range.args(), 0);
        const int size = dtype_bytes(type_of(range.args(), 0));
        if (!d.empty() && size > 0) name = ops_[c].name.substr(5), kind = collective_of(name), s.bytes = product(d) * size;
      }
      if (s.bytes <= 0)
        return skip(bytes == 0 && args.contains("dtype") ? "a NCCL kernel of an element type ringside does not know (" +
                                                               rd.str_in(args, "dtype", false, "args.") + ")"
                                                         : "a NCCL kernel whose record_param_comms has no sizes (torch 2.1 on records them)");
    }
    if (!kind) return skip("a NCCL kernel of a collective the model has no form for (" + (name.empty() ? k.name.substr(0, 40) : name) + ")");
    if (s.bytes > kLargestReal) return skip("a NCCL kernel whose message is too large to be real");
    s.collective = *kind;
    s.ranks = ranks_of(rd, rd.find(args, "Process Group Ranks"), world_);
    const int64_t size = rd.integer_in(args, "Group size", false, 0, INT32_MAX, 0, "args.");
    if (s.ranks.empty() && size > 0 && size == run_.world_size)
      for (int r = 0; r < size; ++r) s.ranks.push_back(r);
    for (const char* key : {"Dst Rank", "Src Rank", "Peer"})
      if (args.contains(key)) {
        s.peer = int(rd.integer_in(args, key, true, 0, world_ > 0 ? world_ - 1 : INT32_MAX, -1, "args."));
        if (s.peer == rank_) rd.fail(detail::concat("'args.", key, "' is the file's own rank ", rank_, ": a send or receive goes to another"));
      }
    if ((s.collective == NcclCall::send || s.collective == NcclCall::recv) && s.peer < 0)
      return skip("a send or receive whose peer is not recorded");
    s.group = rd.str_in(args, "Process Group Name", false, "args.");
    s.call = rd.integer_in(args, "Seq", false, 0, INT64_MAX, -1, "args.");
    if (s.call < 0) s.call = calls_[s.group + "/" + nccl_call_name(s.collective)]++;
    run_.comms.push_back(s);
  }

  // Back-to-back kernels on each stream (kineto_kernels.h's "gap": queued, host, or left out).
  void gaps() {
    std::map<std::string, std::vector<const Kernel*>> streams;
    std::vector<int64_t> ends;
    for (const Kernel& k : kernels_) streams[k.stream].push_back(&k), ends.push_back(k.end_ns);
    std::sort(ends.begin(), ends.end());
    for (auto& [stream, list] : streams) {
      std::sort(list.begin(), list.end(), [](const Kernel* a, const Kernel* b) { return a->ts_ns < b->ts_ns; });
      for (size_t i = 1; i < list.size(); ++i) {
        const Kernel &prev = *list[i - 1], &next = *list[i];
        const int64_t gap = next.ts_ns - prev.end_ns;
        if (gap < 0 || gap > 1'000'000 || next.launch_end_ns < 0) continue;  // overlapping, or idle for a ms
        // Another stream's kernel ending in the gap: the next may have waited on it.
        const auto other = std::upper_bound(ends.begin(), ends.end(), prev.end_ns);
        if (other != ends.end() && *other <= next.ts_ns) continue;
        (next.launch_end_ns <= prev.end_ns ? run_.queued_gaps : run_.host_gaps).push_back(double(gap) * 1e-9);
      }
    }
  }

  const nlohmann::json& doc_;
  std::string source_;
  ProfiledRun& run_;
  int run_index_ = 0;
  int rank_ = 0, world_ = 0;
  std::vector<int> owner_, call_, nccl_range_;  // per op: the nearest op around it (itself too) of each kind, -1: none
  std::vector<CpuOp> ops_;
  std::map<std::string, std::vector<int>> ops_by_thread_;
  std::map<int64_t, Launch> launches_;
  std::set<int64_t> kernel_correlations_;
  std::vector<int> parent_;  // each op's caller, -1 for none
  std::string device_;
  int sms_ = 0;
  std::vector<Kernel> kernels_;
  std::map<std::string, int64_t> calls_;
};

}  // namespace

const char* nccl_call_name(NcclCall c) {
  switch (c) {
    case NcclCall::all_gather: return "all_gather";
    case NcclCall::reduce_scatter: return "reduce_scatter";
    case NcclCall::all_reduce: return "all_reduce";
    case NcclCall::all_to_all: return "all_to_all";
    case NcclCall::send: return "send";
    case NcclCall::recv: return "recv";
  }
  return "?";
}

ProfiledRun read_profiled_run(const std::vector<std::string>& paths) {
  ProfiledRun run;
  std::vector<int> run_of;  // each file's run: a folder is one run, files given apart one together
  for (size_t i = 0; i < paths.size(); ++i) {
    if (std::filesystem::is_directory(paths[i])) {
      for (const std::string& f : kineto_files(paths[i])) run.files.push_back(f), run_of.push_back(int(i));
    } else {
      run.files.push_back(paths[i]), run_of.push_back(-1);
    }
  }
  RS_CHECK(!run.files.empty(), "no profiler trace to read");
  run.runs = int(std::set<int>(run_of.begin(), run_of.end()).size());
  // One file once; one rank a file in each run; one GPU model throughout.
  std::map<std::filesystem::path, std::string> seen;
  for (const std::string& path : run.files) {
    std::error_code ec;
    const std::filesystem::path id = std::filesystem::weakly_canonical(path, ec);
    const auto [at, fresh] = seen.emplace(ec ? std::filesystem::path(path) : id, path);
    RS_CHECK(fresh, path, " is given twice (also as ", at->second, "): each file is read once");
  }
  std::map<std::pair<int, int>, std::string> rank_file;
  std::map<int, std::pair<int, std::string>> world_file;  // each run's world_size, and the file that said it first
  std::string device_file;
  for (size_t i = 0; i < run.files.size(); ++i) {
    const std::string& path = run.files[i];
    try {
      const nlohmann::json doc = parse_json(read_input_file(path, "trace", 14.0), path);
      if (!is_kineto(doc))
        throw Error(path + ": not a PyTorch profiler (Kineto) trace: no traceEvents with schemaVersion, deviceProperties or "
                           "distributedInfo beside them");
      FileReader file(doc, path, i, run_of[i], run);
      if (file.world() > 0) {
        const auto [w, first] = world_file.emplace(run_of[i], std::make_pair(file.world(), path));
        RS_CHECK(first || w->second.first == file.world(), path, " says world_size ", file.world(), ", ", w->second.second, " ",
                 w->second.first, ": the files of one run have one world");
      }
      const auto [at, fresh] = rank_file.emplace(std::make_pair(run_of[i], file.rank()), path);
      RS_CHECK(fresh, path, " and ", at->second, " are both rank ", file.rank(), " of one run");
      if (file.sms() > 0 || !file.device().empty()) {
        RS_CHECK(device_file.empty() || (file.device() == run.device && file.sms() == run.sms), path, " ran on ", file.device(), " (",
                 file.sms(), " SMs), ", device_file, " on ", run.device, " (", run.sms, " SMs): one calibration is of one GPU");
        run.device = file.device(), run.sms = file.sms(), device_file = path;
      }
      file.read();
    } catch (const std::bad_alloc&) {
      throw Error("trace " + path + ": out of memory parsing it");
    }
  }
  if (run.world_size == 0) run.world_size = int(run.files.size());
  return run;
}

}  // namespace ringside::trace
