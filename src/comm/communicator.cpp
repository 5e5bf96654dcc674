#include "comm/communicator.h"

#include <pthread.h>

#include <mutex>
#include <system_error>
#include <thread>

#include "core/cuda_module.h"
#include "core/gpu.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>

namespace ringside {

// NCCL lives in the CUDA module (core/cuda_module.h), loaded on the first call.
#if RINGSIDE_HAVE_NCCL
bool nccl_available() { return true; }
void run_nccl(int P, const std::function<void(Communicator&)>& fn, const LocalOptions& opts) {
  cuda_module::entry<void(int, const std::function<void(Communicator&)>&, const LocalOptions&)>("ringside_run_nccl")(P, fn, opts);
}
Communicator& nccl_world() { return *cuda_module::entry<Communicator*()>("ringside_nccl_world")(); }
#else
static const char* kNoNccl = "--backend nccl: this build has no NCCL (it needs CUDA and NCCL at configure time)";
bool nccl_available() { return false; }
void run_nccl(int, const std::function<void(Communicator&)>&, const LocalOptions&) { throw Error(kNoNccl); }
Communicator& nccl_world() { throw Error(kNoNccl); }
#endif

std::string RankFailures::record(int rank, const std::exception& e) {
  const bool echo = dynamic_cast<const AbortedError*>(&e) != nullptr;
  std::string msg = detail::concat("rank ", rank, " failed: ", e.what());
  std::lock_guard lock(mu_);
  std::string& slot = echo ? first_echo_ : first_error_;
  if (slot.empty()) slot = msg;
  return msg;
}

void RankFailures::rethrow() const {
  std::lock_guard lock(mu_);
  if (!first_error_.empty()) throw Error(first_error_);
  if (!first_echo_.empty()) throw Error(first_echo_);
}

void ensure_thread_stacks() {
  static std::once_flag once;
  std::call_once(once, [] {
    constexpr size_t kStack = size_t(8) << 20;
    pthread_attr_t attr;
    if (pthread_getattr_default_np(&attr) != 0) return;
    size_t size = 0;
    if (pthread_attr_getstacksize(&attr, &size) == 0 && size < kStack && pthread_attr_setstacksize(&attr, kStack) == 0)
      pthread_setattr_default_np(&attr);
    pthread_attr_destroy(&attr);
  });
}

void run_rank_threads(int P, const std::function<void(int)>& rank, const std::function<void(const std::string&)>& abort) {
  ensure_thread_stacks();
  std::vector<std::thread> threads;
  std::string failure;
  for (int r = 0; r < P && failure.empty(); ++r) {
    try {
      threads.emplace_back(rank, r);
    } catch (const std::system_error& e) {
      failure = detail::concat("could not start rank thread ", r, ": ", e.what());
      abort(failure);
    }
  }
  for (std::thread& t : threads) t.join();
  if (!failure.empty()) throw Error(failure + " (a limit on threads or address space: fewer ranks may fit)");
}

std::vector<int64_t> even_counts(int64_t n, int P) {
  std::vector<int64_t> c(P, n / P);
  for (int i = 0; i < n % P; ++i) ++c[i];
  return c;
}

bool CompletionRequest::wait_until(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  while (!done_) {
    check_abort();
    const auto slice = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(50));
    cv_.wait_until(lock, slice);
    if (!done_ && std::chrono::steady_clock::now() >= deadline) return false;
  }
  if (!error_.empty()) {
    if (echo_) throw AbortedError(error_);
    throw CommError(error_);
  }
  return true;
}

bool CompletionRequest::done() const {
  std::lock_guard lock(mu_);
  return done_;
}

void CompletionRequest::complete(int64_t at_ns) {
  completed_ns = at_ns ? at_ns : trace::Clock::steady_now_ns();
  {
    std::lock_guard lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

void CompletionRequest::fail(std::string message, bool echo) {
  {
    std::lock_guard lock(mu_);
    error_ = std::move(message);
    echo_ = echo;
    done_ = true;
  }
  cv_.notify_all();
}

namespace {

// The comm event of a transfer being posted, from the tracer's context: a collective's kind,
// call number and group size (the posting communicator's ranks: busbw's n), or a point-to-point
// message with its label and ring step. The peer is a world rank (a sub-communicator translates
// its own), which the writer pairs sends and receives by.
std::unique_ptr<trace::Event> comm_event(trace::Tracer& t, bool send, int64_t bytes, int peer, int tag, const char* label,
                                         int group_size) {
  auto e = std::make_unique<trace::Event>();
  e->direction = send ? trace::Direction::send : trace::Direction::recv;
  if (t.collective_kind) {
    e->kind = *t.collective_kind;
    e->name = trace::to_string(e->kind);
    e->collective = t.collective_id;
    e->group_size = group_size;
  } else {
    const char* dir = trace::to_string(e->direction);
    e->name = label ? std::string(dir) + " " + label : dir;
    e->kind = trace::Kind::p2p;
  }
  e->stream = trace::Stream::comm;
  e->phase = t.phase;
  e->sublayer = t.sublayer;
  e->step = t.step;
  e->peer = peer;
  e->bytes = bytes;
  e->tag = tag;
  e->seq = t.next_seq(peer, tag, send);
  e->order = e->end_order = t.tick();  // posted here, in the rank's program order
  return e;
}

}  // namespace

RequestPtr Communicator::isend(const void* buf, int64_t bytes, int peer, int tag, const char* label) {
  trace::Tracer* t = trace::current_tracer();
  const int64_t posted = trace::Clock::steady_now_ns();
  RequestPtr r = post_send(buf, bytes, peer, tag);
  r->posted_ns = posted;
  if (t) r->trace_event = comm_event(*t, true, bytes, world_rank(peer), tag, label, size());
  for (Communicator* c = this; c; c = c->parent_) c->bytes_sent_ += bytes, ++c->messages_sent_;
  return r;
}

RequestPtr Communicator::irecv(void* buf, int64_t bytes, int peer, int tag, const char* label) {
  trace::Tracer* t = trace::current_tracer();
  const int64_t posted = trace::Clock::steady_now_ns();
  RequestPtr r = post_recv(buf, bytes, peer, tag);
  r->posted_ns = posted;
  if (t) r->trace_event = comm_event(*t, false, bytes, world_rank(peer), tag, label, size());
  for (Communicator* c = this; c; c = c->parent_) c->bytes_received_ += bytes;
  return r;
}

void Communicator::wait(const RequestPtr& r) {
  trace::Tracer* t = trace::current_tracer();
  // Every wait is on the compute stream, those that do not block too (0 long): the schedule
  // says the rank needs this transfer here, which the what-if model replays. A wait that
  // blocks is idle time; the event shows what it waited for.
  std::optional<trace::Span> span;
  if (t) {
    span.emplace("wait", trace::Kind::wait);
    if (trace::Event* e = span->event()) {
      e->detail = r->what;
      if (const trace::Event* c = r->trace_event.get()) {
        e->name = "wait " + c->name, e->peer = c->peer;
        e->direction = c->direction, e->tag = c->tag, e->seq = c->seq;
      }
    }
  }
  if (!r->wait_until(deadline_in(timeout_s)))
    throw CommError(detail::concat("rank ", world_rank(rank()), ": ", collective ? std::string(collective) + ": " : "",
                                   r->what, " did not complete within ", timeout_s, " s",
                                   slow_link.empty() ? " (is a peer stuck or did the ranks call different ops?)"
                                                     : " (" + slow_link + " may be too slow for it: raise --timeout)"));
  span.reset();
  if (t && r->trace_event) {
    // The transfer itself, on the comm stream: from when its data began to move (the local
    // backend's comm thread says; under MPI, from posting) to completion.
    trace::Event e = std::move(*r->trace_event);
    r->trace_event.reset();
    const int64_t start = r->started_ns ? r->started_ns.load() : r->posted_ns;
    e.ts_ns = t->clock().to_shared(start);
    e.dur_ns = std::max<int64_t>(0, r->completed_ns - start);
    t->record(std::move(e));
  }
}

void Communicator::wait_all(const std::vector<RequestPtr>& rs) {
  for (const RequestPtr& r : rs) wait(r);
}

std::unique_ptr<Communicator> Communicator::split_by(const std::function<std::pair<int, int>(int)>& color_key) {
  const auto [color, key] = color_key(rank());
  std::unique_ptr<Communicator> sub = split(color, key);
  std::vector<std::pair<std::pair<int, int>, int>> members;  // ((key, rank), rank), as MPI_Comm_split orders them
  for (int r = 0; r < size(); ++r)
    if (const auto [c, k] = color_key(r); c == color) members.push_back({{k, r}, r});
  std::sort(members.begin(), members.end());
  sub->parent_ = this;
  sub->world_ranks_.clear();
  for (const auto& m : members) sub->world_ranks_.push_back(world_rank(m.second));
  return sub;
}

void Communicator::send(const void* buf, int64_t bytes, int peer, int tag) { wait(isend(buf, bytes, peer, tag)); }
void Communicator::recv(void* buf, int64_t bytes, int peer, int tag) { wait(irecv(buf, bytes, peer, tag)); }

namespace {

std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<int64_t> off(counts.size() + 1, 0);
  std::partial_sum(counts.begin(), counts.end(), off.begin() + 1);
  return off;
}

// dst = a + b, n elements (dst may be b).
template <class T> void add_n(T* dst, const T* a, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
}
void add(void* dst, const void* a, const void* b, int64_t n, DType dt, Device where) {
  if (where == Device::cuda) {  // a GPU rank's buffers: the add runs on its compute stream
    RS_CHECK(dt == DType::f32, "reduce_scatter: GPU buffers are f32");
    gpu::add(static_cast<const float*>(a), static_cast<const float*>(b), static_cast<float*>(dst), n);
  } else if (dt == DType::f32) add_n(static_cast<float*>(dst), static_cast<const float*>(a), static_cast<const float*>(b), n);
  else add_n(static_cast<double*>(dst), static_cast<const double*>(a), static_cast<const double*>(b), n);
}

void check_counts(const std::vector<int64_t>& counts, int P, const char* op) {
  RS_CHECK(static_cast<int>(counts.size()) == P, op, ": ", counts.size(), " counts for ", P, " ranks");
  for (int64_t c : counts) RS_CHECK(c >= 0, op, ": negative count");
}

}  // namespace

CollectiveSpan::CollectiveSpan(Communicator& c, trace::Kind kind)
    : comm_(c), span_(trace::to_string(kind), trace::Kind::collective), t_(trace::current_tracer()) {
  if (!c.collective) c.collective = trace::to_string(kind), names_it_ = true;
  if (!t_) return;
  sent0_ = c.stats().bytes_sent;
  nested_ = t_->collective_kind.has_value();
  if (!nested_) {
    t_->collective_kind = kind;
    t_->collective_id = t_->next_collective++;
  }
  span_.event()->collective = t_->collective_id;
}

CollectiveSpan::~CollectiveSpan() {
  if (names_it_) comm_.collective = nullptr;
  if (!t_) return;
  span_.event()->bytes = comm_.stats().bytes_sent - sent0_;
  if (!nested_) t_->collective_kind.reset(), t_->collective_id = -1;
}

void Communicator::all_gather(const void* send, void* recv, const std::vector<int64_t>& counts, DType dt) {
  CollectiveSpan span(*this, trace::Kind::all_gather);
  const int P = size(), r = rank();
  check_counts(counts, P, "all_gather");
  const int64_t es = dtype_size(dt);
  const auto off = offsets_of(counts);
  auto* out = static_cast<char*>(recv);
  // (A dry run, for the what-if model, moves no data: its buffers have none.)
  if (out + off[r] * es != send) copy_bytes(out + off[r] * es, send, counts[r] * es);
  // Ring: at step k, pass on the chunk received at step k-1 (first our own) to the right and
  // take the next one from the left. After P-1 steps every rank holds every chunk.
  const int right = (r + 1) % P, left = (r + P - 1) % P;
  for (int k = 0; k < P - 1; ++k) {
    const int s = (r - k + P) % P, g = (r - k - 1 + P) % P;
    RequestPtr rr = irecv(out + off[g] * es, counts[g] * es, left, kCollectiveTag);
    RequestPtr sr = isend(out + off[s] * es, counts[s] * es, right, kCollectiveTag);
    wait(rr);
    wait(sr);
  }
}

void Communicator::reduce_scatter(const void* send, void* recv, const std::vector<int64_t>& counts, DType dt) {
  CollectiveSpan span(*this, trace::Kind::reduce_scatter);
  const int P = size(), r = rank();
  check_counts(counts, P, "reduce_scatter");
  const int64_t es = dtype_size(dt);
  const auto off = offsets_of(counts);
  if (P == 1) {
    if (recv != send) copy_bytes(recv, send, counts[0] * es);
    return;
  }
  // Ring: chunk c starts as a partial sum on rank c+1 and gains one rank's contribution per
  // hop; after P-1 hops it arrives, complete, on rank c. A rank only ever holds the chunk in
  // flight: the one it received and added (sent on at the next step) and the next incoming.
  const AllocTag tag{world_rank(rank()), MemCategory::comm, tracker};  // communication buffers, tracked
  const int64_t most = *std::max_element(counts.begin(), counts.end());
  // On a GPU rank the buffers are where the data is (the strategies' are on the GPU).
  const Device where = gpu::bound() && gpu::is_device_pointer(send) ? Device::cuda : Device::cpu;
  Tensor incoming = Tensor::empty({most}, dt, tag, where),
         sums[2] = {Tensor::empty({most}, dt, tag, where), Tensor::empty({most}, dt, tag, where)};
  const auto* in = static_cast<const char*>(send);
  const char* outgoing = nullptr;
  const int right = (r + 1) % P, left = (r + P - 1) % P;
  for (int k = 0; k < P - 1; ++k) {
    const int s = (r - k - 1 + P) % P, g = (r - k - 2 + 2 * P) % P;
    if (k == 0) outgoing = in + off[s] * es;  // our own contribution to chunk s starts the ring
    RequestPtr rr = irecv(incoming.raw_data(), counts[g] * es, left, kCollectiveTag);
    RequestPtr sr = isend(outgoing, counts[s] * es, right, kCollectiveTag);
    wait(rr);
    // The last chunk to arrive is our own: sum it straight into recv.
    void* dst = k == P - 2 ? recv : sums[k % 2].raw_data();
    {
      trace::Span sum("reduce_scatter add", trace::Kind::elementwise, 0, 3 * counts[g] * es);
      if (!dry_run_active()) add(dst, incoming.raw_data(), in + off[g] * es, counts[g], dt, where);
    }
    wait(sr);
    outgoing = static_cast<const char*>(dst);
  }
}

void Communicator::all_reduce(void* buf, int64_t n, DType dt) {
  CollectiveSpan span(*this, trace::Kind::all_reduce);
  const auto counts = even_counts(n, size());
  const auto off = offsets_of(counts);
  char* b = static_cast<char*>(buf);
  const int64_t es = dtype_size(dt);
  reduce_scatter(b, b + off[rank()] * es, counts, dt);
  all_gather(b + off[rank()] * es, b, counts, dt);
}

void Communicator::all_to_all(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                              const std::vector<int64_t>& recv_counts, DType dt) {
  CollectiveSpan span(*this, trace::Kind::all_to_all);
  const int P = size(), r = rank();
  check_counts(send_counts, P, "all_to_all");
  check_counts(recv_counts, P, "all_to_all");
  const int64_t es = dtype_size(dt);
  const auto soff = offsets_of(send_counts), roff = offsets_of(recv_counts);
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  RS_CHECK(send_counts[r] == recv_counts[r], "all_to_all: rank ", r, " sends itself ", send_counts[r],
           " elements but expects ", recv_counts[r]);
  copy_bytes(out + roff[r] * es, in + soff[r] * es, send_counts[r] * es);
  // Pairwise exchange: at step k send to rank r+k and receive from rank r-k, so that each step
  // is a permutation and no link carries two messages at once.
  for (int k = 1; k < P; ++k) {
    const int to = (r + k) % P, from = (r - k + P) % P;
    RequestPtr rr = irecv(out + roff[from] * es, recv_counts[from] * es, from, kCollectiveTag + 1);
    RequestPtr sr = isend(in + soff[to] * es, send_counts[to] * es, to, kCollectiveTag + 1);
    wait(rr);
    wait(sr);
  }
}

Tensor Communicator::all_gather(const Tensor& t, AllocTag tag) {
  Tensor out = Tensor::empty({t.numel() * size()}, t.dtype(), tag);
  all_gather(t.raw_data(), out.raw_data(), std::vector<int64_t>(size(), t.numel()), t.dtype());
  return out;
}

Tensor Communicator::reduce_scatter(const Tensor& t, AllocTag tag) {
  RS_CHECK(t.numel() % size() == 0, "reduce_scatter: ", t.numel(), " elements do not split over ", size(), " ranks");
  Tensor out = Tensor::empty({t.numel() / size()}, t.dtype(), tag);
  reduce_scatter(t.raw_data(), out.raw_data(), std::vector<int64_t>(size(), t.numel() / size()), t.dtype());
  return out;
}

void Communicator::all_reduce(Tensor& t) { all_reduce(t.raw_data(), t.numel(), t.dtype()); }

}  // namespace ringside
