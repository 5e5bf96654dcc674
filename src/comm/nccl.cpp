// The NCCL backend: GPU ranks (one per GPU) talking through NCCL, on each rank's comm stream.
//
// Point-to-point: isend/irecv queue the transfer; start() (or the first wait) issues the
// rank's queued sends and receives as one ncclGroupStart/End group, after an event on the
// compute stream (the data is written). NCCL has no tags: messages between two ranks match in
// the order they are issued, which every strategy keeps (both sides post in the same order).
// Collectives with equal shares are NCCL's own (ncclAllGather, ncclReduceScatter,
// ncclAllReduce); all-to-all is one group of sends and receives; uneven shares fall back to
// the ring algorithms of communicator.cpp over grouped send/recv.
//
// The communicators are non-blocking (ncclConfig_t.blocking = 0): every NCCL call returns at
// once, and what is still in progress (connecting to a peer, which needs the peer to make its
// matching call) is polled with ncclCommGetAsyncError, as NCCL's fault-tolerance guide
// describes. So every wait (for a connection, or for a group's completion event) gives up at
// its deadline with CommError. A failing rank marks the job aborted; every other rank's wait
// sees the mark and throws, and each rank aborts its own communicator as it unwinds
// (ncclCommAbort: NCCL forbids touching a communicator from two threads at once), so no rank
// hangs on a peer that is gone.
//
// Part of the CUDA module (core/cuda_module.h): run_nccl and nccl_world reach it through
// ringside_run_nccl and ringside_nccl_world.
#include <atomic>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include <nccl.h>

#include "comm/communicator.h"
#include "core/gpu.h"

namespace ringside {

namespace {

void check_nccl(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) throw CommError(detail::concat("NCCL: ", call, " failed: ", ncclGetErrorString(r)));
}
#define RS_NCCL(call) check_nccl((call), #call)

ncclDataType_t nccl_type(DType dt) { return dt == DType::f32 ? ncclFloat32 : ncclFloat64; }

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// Waits until NCCL's work on `comm` issued so far on the host is done (a non-blocking call
// returned ncclInProgress): polls its async error, giving up when `aborted` says the job is
// over or at the deadline.
template <class Aborted>
void await_nccl(ncclComm_t comm, const char* what, std::chrono::steady_clock::time_point deadline, Aborted&& aborted) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    check_nccl(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError");
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) check_nccl(state, what);
    aborted();
    if (std::chrono::steady_clock::now() > deadline)
      throw CommError(detail::concat("NCCL: ", what, " did not complete in time (is a peer gone?)"));
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// A non-blocking call's result: in progress is fine (await_nccl finishes it).
void check_started(ncclResult_t r, const char* call) {
  if (r != ncclInProgress) check_nccl(r, call);
}
#define RS_NCCL_ISSUE(call) check_started((call), #call)

// What the ranks of one job share, so that a failure ends it everywhere.
struct Job {
  std::atomic<bool> aborted{false};
  std::mutex mu;
  std::string message;
  void abort(const std::string& why) {
    std::lock_guard lock(mu);
    if (aborted) return;
    message = why;
    aborted = true;
  }
  std::string why() {
    std::lock_guard lock(mu);
    return message;
  }
};

class NcclCommunicator;

class NcclRequest final : public Request {
 public:
  NcclRequest(NcclCommunicator* owner, Job* job) : owner_(owner), job_(job) {}
  bool wait_until(std::chrono::steady_clock::time_point deadline) override;
  bool done() const override { return start_ && end_ && end_->done(); }
  std::shared_ptr<gpu::Event> start_, end_;  // around its group on the comm stream, once issued

 private:
  NcclCommunicator* owner_;
  Job* job_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, Job* job) : comm_(comm), rank_(rank), size_(size), job_(job) {}
  ~NcclCommunicator() override {
    // Destroy waits for issued operations, which a failed peer will never match: abort then.
    if (job_->aborted || std::uncaught_exceptions() > 0) ncclCommAbort(comm_);
    else ncclCommDestroy(comm_);
  }
  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::reduce_scatter;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  void start() override {
    if (pending_.empty()) return;
    std::vector<Pending> group = std::move(pending_);
    pending_.clear();
    run_group("ncclSend/ncclRecv group", [&](cudaStream_t st) {
      for (const Pending& p : group) {
        if (p.send) RS_NCCL_ISSUE(ncclSend(p.buf, static_cast<size_t>(p.bytes), ncclInt8, p.peer, comm_, st));
        else RS_NCCL_ISSUE(ncclRecv(p.buf, static_cast<size_t>(p.bytes), ncclInt8, p.peer, comm_, st));
      }
    }, group);
  }

  void barrier() override {
    // An all-reduce of one float on the device, waited for: every rank has arrived.
    const gpu::RankStreams& s = gpu::require_bound("barrier");
    void* one = gpu::allocate(sizeof(float), s);
    struct Free {
      void* p;
      const gpu::RankStreams& s;
      ~Free() { gpu::release(p, s); }
    } release{one, s};
    gpu::zero(one, sizeof(float));
    native("barrier", trace::Kind::all_reduce, 0, [&](cudaStream_t st) { RS_NCCL_ISSUE(ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, comm_, st)); });
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    ncclComm_t sub = nullptr;
    ncclConfig_t config = nonblocking_config();
    check_started(ncclCommSplit(comm_, color, key, &sub, &config), "ncclCommSplit");
    await(comm_, "ncclCommSplit");
    await(sub, "ncclCommSplit");
    int r = 0, n = 0;
    RS_NCCL(ncclCommUserRank(sub, &r));
    RS_NCCL(ncclCommCount(sub, &n));
    auto c = std::make_unique<NcclCommunicator>(sub, r, n, job_);
    c->timeout_s = timeout_s;
    c->tracker = tracker;
    return c;
  }

  void all_gather(const void* send, void* recv, const std::vector<int64_t>& counts, DType dt) override {
    if (!equal(counts)) return Communicator::all_gather(send, recv, counts, dt);
    CollectiveSpan span(*this, trace::Kind::all_gather);
    const int64_t bytes = counts[0] * dtype_size(dt);
    count_bytes((size_ - 1) * bytes, (size_ - 1) * bytes);  // the ring's volume: NCCL's busbw convention
    native("all_gather", trace::Kind::all_gather, (size_ - 1) * bytes, [&](cudaStream_t st) {
      RS_NCCL_ISSUE(ncclAllGather(send, recv, static_cast<size_t>(counts[0]), nccl_type(dt), comm_, st));
    });
  }

  void reduce_scatter(const void* send, void* recv, const std::vector<int64_t>& counts, DType dt) override {
    if (!equal(counts)) return Communicator::reduce_scatter(send, recv, counts, dt);
    CollectiveSpan span(*this, trace::Kind::reduce_scatter);
    const int64_t bytes = counts[0] * dtype_size(dt);
    count_bytes((size_ - 1) * bytes, (size_ - 1) * bytes);
    native("reduce_scatter", trace::Kind::reduce_scatter, (size_ - 1) * bytes, [&](cudaStream_t st) {
      RS_NCCL_ISSUE(ncclReduceScatter(send, recv, static_cast<size_t>(counts[0]), nccl_type(dt), ncclSum, comm_, st));
    });
  }

  void all_reduce(void* buf, int64_t n, DType dt) override {
    CollectiveSpan span(*this, trace::Kind::all_reduce);
    int64_t sent = 0;  // a ring all-reduce: reduce-scatter then all-gather of the even shares
    const auto counts = even_counts(n, size_);
    for (int r = 0; r < size_; ++r)
      if (r != rank_) sent += counts[r] * dtype_size(dt);
    if (size_ > 1) sent += (n - counts[(rank_ + 1) % size_]) * dtype_size(dt);
    count_bytes(sent, sent);
    native("all_reduce", trace::Kind::all_reduce, sent, [&](cudaStream_t st) {
      RS_NCCL_ISSUE(ncclAllReduce(buf, buf, static_cast<size_t>(n), nccl_type(dt), ncclSum, comm_, st));
    });
  }

  void all_to_all(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                  const std::vector<int64_t>& recv_counts, DType dt) override {
    CollectiveSpan span(*this, trace::Kind::all_to_all);
    const int64_t es = dtype_size(dt);
    int64_t sent = 0, received = 0;
    for (int j = 0; j < size_; ++j)
      if (j != rank_) sent += send_counts[j] * es, received += recv_counts[j] * es;
    count_bytes(sent, received);
    native("all_to_all", trace::Kind::all_to_all, sent, [&](cudaStream_t st) {
      int64_t so = 0, ro = 0;
      for (int j = 0; j < size_; ++j) {  // one group: NCCL runs the P exchanges together
        RS_NCCL_ISSUE(ncclSend(static_cast<const char*>(send) + so * es, static_cast<size_t>(send_counts[j] * es), ncclInt8, j,
                         comm_, st));
        RS_NCCL_ISSUE(ncclRecv(static_cast<char*>(recv) + ro * es, static_cast<size_t>(recv_counts[j] * es), ncclInt8, j,
                         comm_, st));
        so += send_counts[j], ro += recv_counts[j];
      }
    });
  }

 protected:
  RequestPtr post_send(const void* buf, int64_t bytes, int peer, int tag) override {
    return post(true, const_cast<void*>(buf), bytes, peer, tag);
  }
  RequestPtr post_recv(void* buf, int64_t bytes, int peer, int tag) override { return post(false, buf, bytes, peer, tag); }

 private:
  struct Pending {
    bool send;
    void* buf;
    int64_t bytes;
    int peer;
    std::shared_ptr<NcclRequest> req;
  };

  // Waits for a non-blocking NCCL call on c, within this communicator's timeout.
  void await(ncclComm_t c, const char* what) {
    await_nccl(c, what, deadline_in(timeout_s), [&] {
      if (job_->aborted) throw AbortedError("aborted (" + std::string(what) + "): " + job_->why());
    });
  }

  static bool equal(const std::vector<int64_t>& c) {
    for (int64_t x : c)
      if (x != c.at(0)) return false;
    return true;
  }

  RequestPtr post(bool send, void* buf, int64_t bytes, int peer, int tag) {
    RS_CHECK(peer >= 0 && peer < size_, "rank ", rank_, ": ", send ? "send to" : "recv from", " rank ", peer,
             " of a communicator of size ", size_);
    if (job_->aborted) throw AbortedError("aborted: " + job_->why());
    auto r = std::make_shared<NcclRequest>(this, job_);
    r->what = detail::concat(send ? "send to" : "recv from", " rank ", world_rank(peer), " (tag ", tag, ", ", bytes, " bytes)");
    pending_.push_back({send, buf, bytes, peer, r});
    return r;
  }

  // Issues NCCL calls on the comm stream, after the compute stream's work so far, between two
  // events; the requests of `group` complete with them.
  template <class F> void run_group(const char* what, F&& issue, const std::vector<Pending>& group) {
    if (job_->aborted) throw AbortedError("aborted (" + std::string(what) + "): " + job_->why());
    const cudaStream_t comm_stream = static_cast<cudaStream_t>(gpu::require_bound(what).comm);
    gpu::comm_wait(*gpu::Event::record());
    auto start = gpu::Event::record(true);
    RS_NCCL(ncclGroupStart());
    try {
      issue(comm_stream);
    } catch (const std::exception& e) {
      // A call that failed inside a group makes ncclGroupEnd launch nothing; the ranks are out
      // of step all the same: end the job (this communicator is aborted as the rank unwinds).
      ncclGroupEnd();
      job_->abort(detail::concat("rank ", world_rank(rank_), ": ", what, ": ", e.what()));
      throw;
    }
    check_started(ncclGroupEnd(), what);
    await(comm_, what);  // the group is issued (peers connected); its kernels run on the stream
    auto end = gpu::Event::record(true);
    for (const Pending& p : group) p.req->start_ = start, p.req->end_ = end;
  }

  // A native collective: issued as a group, waited for like a transfer, and recorded on the
  // comm stream of the timeline.
  // `name` says it in errors and on the timeline ("barrier" is an all_reduce of one float).
  template <class F> void native(const char* name, trace::Kind kind, int64_t bytes, F&& issue) {
    start();  // point-to-point posted before it goes first, in order
    auto r = std::make_shared<NcclRequest>(this, job_);
    r->what = detail::concat(name, " (", bytes, " bytes sent)");
    run_group(name, issue, {Pending{true, nullptr, bytes, -1, r}});
    if (trace::Tracer* t = trace::current_tracer()) {
      auto e = std::make_unique<trace::Event>();
      e->name = name;
      e->kind = kind;
      e->stream = trace::Stream::comm;
      e->direction = trace::Direction::send;
      e->bytes = bytes;
      e->collective = t->collective_id;
      e->group_size = size_;
      e->order = e->end_order = t->tick();
      r->trace_event = std::move(e);
    }
    wait(r);
  }

  ncclComm_t comm_;
  int rank_, size_;
  Job* job_;
  std::vector<Pending> pending_;
  friend class NcclRequest;
};

bool NcclRequest::wait_until(std::chrono::steady_clock::time_point deadline) {
  if (!end_) owner_->start();  // still queued: issue this rank's group now
  if (!end_) throw AbortedError("aborted (" + what + "): it was never issued: " + job_->why());
  while (!end_->done()) {
    if (job_->aborted) throw AbortedError("aborted (" + what + "): " + job_->why());
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  started_ns = start_->steady_ns();
  completed_ns = end_->steady_ns();
  return true;
}

// run_nccl of comm/communicator.h.
void run_ranks(int P, const std::function<void(Communicator&)>& fn, const LocalOptions& opts) {
  RS_CHECK(P >= 1, "run_nccl: need at least one rank, got ", P);
  const int gpus = gpu::device_count();
  if (P > gpus)
    throw ConfigError(detail::concat("--backend nccl runs one rank per GPU: ", P, " ranks but ", gpus,
                                     " GPU", gpus == 1 ? "" : "s", " visible (use --backend local for virtual ranks)"));
  // One process: every communicator at once, before any rank starts (so no rank can be left
  // waiting for one that failed before joining), non-blocking, as ncclCommInitAll makes them
  // but with a config.
  std::vector<ncclComm_t> comms(P, nullptr);
  {
    ncclUniqueId id;
    RS_NCCL(ncclGetUniqueId(&id));
    ncclConfig_t config = nonblocking_config();
    int previous = 0;
    cudaGetDevice(&previous);
    RS_NCCL(ncclGroupStart());
    for (int r = 0; r < P; ++r) {
      cudaSetDevice(r);
      check_started(ncclCommInitRankConfig(&comms[r], P, id, r, &config), "ncclCommInitRankConfig");
    }
    check_started(ncclGroupEnd(), "ncclCommInitRankConfig");
    cudaSetDevice(previous);
    const auto deadline = deadline_in(opts.timeout_s);
    try {
      for (ncclComm_t c : comms) await_nccl(c, "ncclCommInitRankConfig", deadline, [] {});
    } catch (...) {
      for (ncclComm_t c : comms)
        if (c) ncclCommAbort(c);
      throw;
    }
  }
  Job job;
  RankFailures failures;
  run_rank_threads(
      P,
      [&](int r) {
        try {
          NcclCommunicator comm(comms[r], r, P, &job);  // owns comms[r] from here
          gpu::Bind bind(r, 0);
          comm.timeout_s = opts.timeout_s;
          fn(comm);
          gpu::synchronize();
        } catch (const std::exception& e) {
          job.abort(failures.record(r, e));
        }
      },
      [&](const std::string& why) { job.abort(why); });
  failures.rethrow();
}

// nccl_world of comm/communicator.h.
Communicator& mpi_process_world() {
#if RINGSIDE_HAVE_MPI
  static Job job;
  // Never destroyed: at exit the CUDA runtime may already be gone, and the process ends anyway.
  static NcclCommunicator* world = [] {
    Communicator& mpi = mpi_world();
    const int gpus = gpu::device_count();
    RS_CHECK(gpus > 0, "--backend nccl: rank ", mpi.rank(), " sees no GPU");
    // One process per GPU: ranks on one node take GPUs in turn (rank % GPUs, as a node's local
    // ranks are consecutive under mpirun's default mapping).
    gpu::Bind bind(mpi.rank() % gpus, 0);  // for the setup; each run binds the same GPU again
    ncclUniqueId id;
    if (mpi.rank() == 0) RS_NCCL(ncclGetUniqueId(&id));
    std::vector<double> words((sizeof id + sizeof(double) - 1) / sizeof(double));
    if (mpi.rank() == 0) std::memcpy(words.data(), &id, sizeof id);
    // The id to everyone: an all-gather where only rank 0's contribution is read.
    std::vector<double> all(words.size() * mpi.size());
    mpi.all_gather(words.data(), all.data(), std::vector<int64_t>(mpi.size(), int64_t(words.size())), DType::f64);
    std::memcpy(&id, all.data(), sizeof id);
    ncclComm_t c = nullptr;
    ncclConfig_t config = nonblocking_config();
    check_started(ncclCommInitRankConfig(&c, mpi.size(), id, mpi.rank(), &config), "ncclCommInitRankConfig");
    await_nccl(c, "ncclCommInitRankConfig", deadline_in(mpi.timeout_s), [] {});
    return new NcclCommunicator(c, mpi.rank(), mpi.size(), &job);
  }();
  return *world;
#else
  throw Error("--backend nccl under mpirun: this build has no MPI (it bootstraps NCCL); use one process with --ranks P");
#endif
}

}  // namespace
}  // namespace ringside

/// The module's entry points for comm/communicator.h (core/cuda_module.h).
extern "C" void ringside_run_nccl(int P, const std::function<void(ringside::Communicator&)>& fn,
                                  const ringside::LocalOptions& opts) {
  ringside::run_ranks(P, fn, opts);
}
extern "C" ringside::Communicator* ringside_nccl_world() { return &ringside::mpi_process_world(); }
