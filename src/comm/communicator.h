// Communicator: how ranks talk. Point-to-point (isend/irecv returning requests) is what each
// backend implements; the collectives are written once, here, as the ring algorithms that
// NCCL and MPI use for large messages, so that their cost is the textbook cost on any backend:
//
//   all_gather       P-1 steps; rank r sends every chunk but one:      S (P-1)/P bytes
//   reduce_scatter   P-1 steps of send + add:                          S (P-1)/P bytes
//   all_reduce       reduce_scatter then all_gather:                   2 S (P-1)/P bytes
//   all_to_all       P-1 pairwise exchanges:                           S (P-1)/P bytes
//
// (S the full buffer; nccl-tests' PERFORMANCE.md derives busbw from exactly these factors.)
// Every transfer is counted: bytes sent and received per rank. A wait that does not finish
// within timeout_s throws CommError naming the rank, the op and the peer: nothing hangs silently.
#pragma once
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <functional>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "trace/trace.h"

namespace ringside {

/// A communication failure: timeout, peer failure, or misuse. The message names the rank,
/// the op and the peer.
class CommError : public Error {
 public:
  using Error::Error;
};

/// A communication that ended because another rank failed first (an echo, not the cause).
class AbortedError : public CommError {
 public:
  using CommError::CommError;
};

/// The steady-clock instant `seconds` (a --timeout) from now: what a wait_until takes.
inline std::chrono::steady_clock::time_point deadline_in(double seconds) {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
}

/// An outstanding non-blocking transfer. Complete it with Communicator::wait.
class Request {
 public:
  virtual ~Request() = default;
  /// Waits until the transfer completes or `deadline` passes; returns false on timeout.
  /// Throws CommError when the job is aborting (another rank failed).
  virtual bool wait_until(std::chrono::steady_clock::time_point deadline) = 0;
  /// Whether it has completed, without blocking.
  virtual bool done() const = 0;
  std::string what;  ///< "send to rank 2 (tag 5, 4096 bytes)", for error messages

  // Timeline (steady-clock ns of the process): set by whoever moves the data, read by the
  // posting rank after its wait, which records the transfer on its comm stream.
  int64_t posted_ns = 0;
  std::atomic<int64_t> started_ns{0};    ///< when the data began to move (0: unknown, use posted_ns)
  std::atomic<int64_t> completed_ns{0};  ///< when it finished
  void mark_started() { started_ns = trace::Clock::steady_now_ns(); }
  /// The comm event to record once complete (prefilled at posting), when tracing.
  std::unique_ptr<trace::Event> trace_event;
};
using RequestPtr = std::shared_ptr<Request>;

/// A request completed (or failed) by another thread: a comm thread or a progress thread.
class CompletionRequest : public Request {
 public:
  /// Waits in slices of at most 50 ms, calling check_abort() between them; throws CommError
  /// with the failure message if the request failed.
  bool wait_until(std::chrono::steady_clock::time_point deadline) override;
  bool done() const override;
  /// Completes it; at_ns is when the transfer finished (steady ns), if not now (0).
  void complete(int64_t at_ns = 0);
  /// Completes with an error: the wait throws CommError, or AbortedError when `echo` (the
  /// transfer ended because its peer failed).
  void fail(std::string message, bool echo = false);
  void wake() { cv_.notify_all(); }

 protected:
  /// Throws to end a wait early (the local backend: another rank failed).
  virtual void check_abort() const {}

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false, echo_ = false;
  std::string error_;
};

/// Bytes moved by one rank since construction (or since reset).
struct CommStats {
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t messages_sent = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "local" or "mpi".
  virtual std::string backend() const = 0;

  /// Starts sending `bytes` bytes from `buf` to `peer`; the buffer must stay valid until the
  /// request completes. Messages between a pair of ranks with the same tag arrive in order.
  /// `label` names the payload on the timeline ("k" -> "send k"); nullptr for none.
  RequestPtr isend(const void* buf, int64_t bytes, int peer, int tag, const char* label = nullptr);
  /// Starts receiving exactly `bytes` bytes from `peer` into `buf`.
  RequestPtr irecv(void* buf, int64_t bytes, int peer, int tag, const char* label = nullptr);
  /// Starts the transfers posted so far. The local and MPI backends start each one as it is
  /// posted (this is a no-op there); NCCL must issue a rank's sends and receives together, as
  /// one group, or two ranks that both send first would wait on each other. Strategies call
  /// it after posting a step's transfers, before computing under them (ring-flash-attention's
  /// commit); wait() starts whatever is still pending.
  virtual void start() {}
  /// Blocks until every rank of this communicator has entered the barrier.
  virtual void barrier() = 0;
  /// A sub-communicator of the ranks that pass the same color, ordered by key (then rank),
  /// like MPI_Comm_split. Collective over this communicator.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  /// split, when every rank can say every member's (color, key): color_key(r) for each rank r
  /// of this communicator. The local backend builds the group without a message (so that it
  /// works in a dry run, whose transfers carry no data); the others call split. Either way the
  /// new communicator knows its members' world ranks (world_rank).
  virtual std::unique_ptr<Communicator> split_by(const std::function<std::pair<int, int>(int)>& color_key);
  /// The world rank of this communicator's rank `peer`: what the timeline and the model name
  /// peers by. The identity on a world communicator.
  int world_rank(int peer) const { return world_ranks_.empty() ? peer : world_ranks_[size_t(peer)]; }

  /// The collective in progress on this communicator, if any ("all_gather"): errors name it.
  const char* collective = nullptr;

  /// Waits for a request; throws CommError "rank R: [collective: ]<what> did not complete within
  /// T s", R and the peer in <what> by world rank.
  /// When tracing, a wait that blocks is a `wait` event on the compute stream, and the
  /// completed transfer is recorded on the comm stream.
  void wait(const RequestPtr& r);
  void wait_all(const std::vector<RequestPtr>& rs);
  /// Blocking send and receive.
  void send(const void* buf, int64_t bytes, int peer, int tag);
  void recv(void* buf, int64_t bytes, int peer, int tag);

  // ---- collectives (ring algorithms over isend/irecv; every rank must call them in the same
  // order with matching arguments). counts[i] is rank i's share in elements; uneven shares
  // are allowed. Element type: f32 or f64.

  // (Virtual: NCCL runs its own kernels for them. The versions here are the ring algorithms.)

  /// recv = concatenation of every rank's `send` (rank order); send holds counts[rank()]
  /// elements, recv sum(counts).
  virtual void all_gather(const void* send, void* recv, const std::vector<int64_t>& counts, DType dt);
  /// recv (counts[rank()] elements) = sum over ranks of their `send` chunk `rank()`, where
  /// send holds sum(counts) elements split by counts.
  virtual void reduce_scatter(const void* send, void* recv, const std::vector<int64_t>& counts, DType dt);
  /// buf (n elements) = sum over ranks, in place, by reduce_scatter + all_gather.
  virtual void all_reduce(void* buf, int64_t n, DType dt);
  /// Rank r's send holds P blocks, block j (send_counts[j] elements) going to rank j; recv
  /// receives block r of every rank j (recv_counts[j] elements), in rank order.
  virtual void all_to_all(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                          const std::vector<int64_t>& recv_counts, DType dt);

  // Tensor conveniences with even shares: all_gather of t ([n] per rank -> [P n] flat),
  // reduce_scatter (numel divisible by P), all_reduce in place.
  Tensor all_gather(const Tensor& t, AllocTag tag);
  Tensor reduce_scatter(const Tensor& t, AllocTag tag);
  void all_reduce(Tensor& t);

  /// Bytes this rank has sent and received so far, on this communicator and every group split
  /// from it.
  CommStats stats() const {
    return {bytes_sent_.load(), bytes_received_.load(), messages_sent_.load()};
  }
  /// Seconds a wait may take before it fails (default 60).
  double timeout_s = 60.0;
  /// A link slowed on purpose (the local backend's latency and bandwidth), named when a wait
  /// times out: then the likely cause is the link, not a stuck peer. Empty: a real link.
  std::string slow_link;
  /// Where the collectives' temporary buffers are counted (category comm, this rank).
  MemoryTracker* tracker = &default_memory_tracker();

 protected:
  /// The backend's point-to-point: post the transfer, return its request.
  virtual RequestPtr post_send(const void* buf, int64_t bytes, int peer, int tag) = 0;
  virtual RequestPtr post_recv(void* buf, int64_t bytes, int peer, int tag) = 0;
  /// Tags the collectives use: above every point-to-point tag a strategy uses.
  static constexpr int kCollectiveTag = 1 << 20;
  /// The world ranks of this communicator's ranks (empty: it is the world); set by split_by.
  std::vector<int> world_ranks_;
  /// For backends whose collectives bypass isend/irecv: counts the bytes they move.
  void count_bytes(int64_t sent, int64_t received) {
    for (Communicator* c = this; c; c = c->parent_) {  // a group's bytes are its parents' too
      c->bytes_sent_ += sent, c->bytes_received_ += received;
      if (sent) ++c->messages_sent_;
    }
  }
  /// The communicator this one was split from (split_by sets it): it counts our bytes too, so
  /// that a rank's stats on the world include every group's traffic.
  Communicator* parent_ = nullptr;

 private:
  std::atomic<int64_t> bytes_sent_{0}, bytes_received_{0}, messages_sent_{0};
};

/// A collective call on the compute stream's timeline, with the bytes this rank sent in it.
/// Transfers posted inside carry its kind and call number. A collective inside another
/// (all_reduce is a reduce_scatter then an all_gather) shows as a nested span and keeps the
/// outer identity. No-op when tracing is off.
class CollectiveSpan {
 public:
  CollectiveSpan(Communicator& c, trace::Kind kind);
  ~CollectiveSpan();
  CollectiveSpan(const CollectiveSpan&) = delete;
  CollectiveSpan& operator=(const CollectiveSpan&) = delete;

 private:
  Communicator& comm_;
  trace::Span span_;
  trace::Tracer* t_;
  int64_t sent0_ = 0;
  bool nested_ = false;
  bool names_it_ = false;  // the outermost collective on comm_: its name goes in comm_'s errors
};

/// Rank r's chunk of n elements split into P nearly equal parts (the first n % P get one more).
std::vector<int64_t> even_counts(int64_t n, int P);

/// The failures of a job whose ranks are threads. Its cause is the first failure that is not an
/// echo of another (an AbortedError): a rank whose peer failed may notice before the peer
/// reports. Thread-safe.
class RankFailures {
 public:
  /// Records rank r's exception; returns "rank r failed: <what>", to abort the job with.
  std::string record(int rank, const std::exception& e);
  /// Throws ringside::Error with the cause, if any rank failed.
  void rethrow() const;

 private:
  mutable std::mutex mu_;
  std::string first_error_, first_echo_;
};

// ---- the local backend: P ranks as threads of this process.

struct LocalOptions {
  double timeout_s = 60.0;
  /// Device::cuda: every rank thread is a GPU rank (core/gpu.h), all on GPU 0 (virtual ranks
  /// sharing one GPU, each with its own compute and comm streams).
  Device device = Device::cpu;
  /// With Device::cuda: one GPU per rank through NCCL (run_nccl) instead of the local backend.
  bool nccl = false;
  /// Artificial link: each transfer takes latency_us + bytes / bandwidth on the sender's comm
  /// thread (0 = as fast as memcpy). For showing overlap on one machine.
  double latency_us = 0.0;
  double bandwidth_gbps = 0.0;  ///< GB/s; 0 = unlimited
  /// The dry run of the what-if model: transfers complete without moving data (the ranks'
  /// buffers hold none; see DryRun in core/tensor.h).
  bool dry_run = false;
};

/// Gives the threads this process starts from now on at least 8 MiB of stack (glibc's
/// default), whatever `ulimit -s` says: glibc sizes new threads by it, and a 64 KiB stack
/// overflows inside the kernels. Called before any rank or comm thread starts.
void ensure_thread_stacks();

/// Runs rank(r) on a thread of its own for every r in [0, P) and joins them all. A thread that
/// cannot be started (a limit on processes or address space) calls abort(message), so that the
/// ranks already running fail their waits and return, and then throws ringside::Error "could
/// not start rank thread r: <reason>" once they are joined: never std::terminate.
void run_rank_threads(int P, const std::function<void(int)>& rank, const std::function<void(const std::string&)>& abort);

/// Runs fn(comm) on P threads, one rank each, with a comm thread per rank that moves the data
/// of posted sends while the rank computes. If any rank throws, every other rank's pending and
/// future waits fail at once ("aborted: rank R failed: ..."), all threads are joined, and the
/// first failure is rethrown as ringside::Error naming the rank. Returns when all ranks return.
/// A thread that cannot start is an Error too (run_rank_threads).
void run_local(int P, const std::function<void(Communicator&)>& fn, const LocalOptions& opts = {});

// ---- the NCCL backend (in builds with CUDA and NCCL).

/// Whether this build has the NCCL backend.
bool nccl_available();
/// Runs fn(comm) on P threads, one GPU each (rank r on GPU r), with an NCCL communicator:
/// ncclSend/ncclRecv in groups for point-to-point, ncclAllGather, ncclReduceScatter and
/// ncclAllReduce for the collectives, on each rank's comm stream. Failures as run_local (a
/// failing rank aborts every NCCL communicator, so no rank hangs). opts.timeout_s bounds each
/// wait. Throws ConfigError when P exceeds the GPUs visible, Error in a build without NCCL.
void run_nccl(int P, const std::function<void(Communicator&)>& fn, const LocalOptions& opts = {});
/// Under mpirun, one process per GPU: an NCCL communicator over the MPI world on GPU
/// (MPI rank % GPUs), MPI only exchanging the ncclUniqueId. The threads that use it must be
/// bound to that GPU (gpu::Bind). Throws in a build without MPI or NCCL.
Communicator& nccl_world();

// ---- the MPI backend (in builds with MPI).

/// True when this process was started by mpirun/mpiexec (Open MPI, MPICH or PMIx variables).
bool launched_by_mpirun();
/// The rank mpirun gave this process (OMPI_COMM_WORLD_RANK, PMI_RANK or PMIX_RANK), readable
/// before MPI_Init; -1 when it was not started by mpirun or none of them says.
int mpirun_rank();
/// Whether this build has the MPI backend.
bool mpi_available();
/// Initialises MPI (MPI_THREAD_MULTIPLE) once and returns the world communicator; its comms
/// are progressed by a background thread so that non-blocking transfers overlap compute.
/// MPI_Init, MPI_Comm_split and MPI_Finalize wait for every process of the job: when one has
/// not arrived within `timeout_s` seconds (the first call's), this process prints one line
/// naming the rank(s) that never joined and exits 1 (at least 10 s: MPI_Init itself takes a
/// while). Throws ringside::Error in a build without MPI.
Communicator& mpi_world(double timeout_s = 60);
/// Ends the job from a failing rank: prints "ringside: rank R failed: <message>" on stderr and
/// calls MPI_Abort, which brings every other rank down.
[[noreturn]] void mpi_abort(const std::string& message);
/// Whether mpi_world() has been called in this process (so MPI is in use).
bool mpi_active();
/// MPI_Finalize, once, if MPI was initialised.
void mpi_finalize();

}  // namespace ringside
