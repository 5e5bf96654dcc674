// The MPI backend: one process per rank under mpirun (Open MPI), across nodes unchanged.
//
// Point-to-point maps to MPI_Isend/MPI_Irecv. MPI moves a large message only while some
// thread is inside the library, so a progress thread polls the outstanding requests
// (MPI_THREAD_MULTIPLE): a posted transfer advances while the rank computes, as on the local
// backend. Waits block on the request's own condition variable, with the same timeout.
#include <mpi.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"

namespace ringside {

namespace {

class MpiRequest final : public CompletionRequest {
 public:
  int64_t expected_bytes = -1;  ///< for receives: the size the caller asked for
  int owner = -1;               ///< the rank that posted it, for messages
};

// Polls every outstanding MPI request; completes ours when MPI's completes.
class Progress {
 public:
  Progress() : thread_((ensure_thread_stacks(), [this] { loop(); })) {}
  ~Progress() { stop(); }
  void stop() {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void add(MPI_Request r, std::shared_ptr<MpiRequest> ours) {
    {
      std::lock_guard lock(mu_);
      active_.emplace_back(r, std::move(ours));
    }
    cv_.notify_all();
  }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !active_.empty(); });
      if (stopping_ && active_.empty()) return;
      bool progressed = false;
      for (auto it = active_.begin(); it != active_.end();) {
        int flag = 0;
        MPI_Status st;
        const int rc = MPI_Test(&it->first, &flag, &st);
        if (rc != MPI_SUCCESS || flag) {
          // A receive of the wrong size (ranks that disagree on shapes) is an error, never a
          // silent truncation.
          int got = -1;
          if (rc == MPI_SUCCESS && it->second->expected_bytes >= 0) MPI_Get_count(&st, MPI_BYTE, &got);
          if (rc != MPI_SUCCESS) {
            char msg[MPI_MAX_ERROR_STRING];
            int len = 0;
            MPI_Error_string(rc, msg, &len);
            it->second->fail(detail::concat("rank ", it->second->owner, ": ", it->second->what, " failed: ",
                                            std::string(msg, len), " (do all ranks run the same configuration?)"));
          } else if (it->second->expected_bytes >= 0 && got != it->second->expected_bytes) {
            it->second->fail(detail::concat("rank ", it->second->owner, ": ", it->second->what, ": received ", got,
                                            " bytes (do all ranks run the same configuration?)"));
          } else {
            it->second->complete();
          }
          it = active_.erase(it);
          progressed = true;
        } else {
          ++it;
        }
      }
      // Nothing finished: yield the core for a moment (ranks may share cores), then poll again.
      if (!progressed) cv_.wait_for(lock, std::chrono::microseconds(50));
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::list<std::pair<MPI_Request, std::shared_ptr<MpiRequest>>> active_;
  bool stopping_ = false;
  std::thread thread_;
};

Progress* g_progress = nullptr;
double g_timeout_s = 60;  // bounds the blocking calls below; mpi_world's argument, at least:
constexpr double kMinStartupTimeout = 10;

// This process's rank and the world's size as mpirun gave them, readable before MPI_Init.
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// "rank 1" when the world has one other rank; "one or more of ranks 0, 2, 3" otherwise.
std::string other_ranks(int rank, int size) {
  if (size == 2 && (rank == 0 || rank == 1)) return detail::concat("rank ", 1 - rank);
  std::string list;
  int listed = 0;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    if (listed == 8) {
      list.append(", ...");
      break;
    }
    if (listed++ > 0) list.append(", ");
    list.append(std::to_string(r));
  }
  return "one or more of ranks " + list;
}

// Runs a blocking MPI call that completes only when every process of the job arrives
// (MPI_Init exchanges the processes' addresses, MPI_Comm_split and MPI_Finalize synchronise):
// a process that never arrives (it exited, it is not ringside, it runs --backend local) would
// hold it for ever. After g_timeout_s this process says so on one line and exits 1 (mpirun
// then ends the others).
template <class Call>
void within_timeout(const char* op, Call&& call) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&, op] {
    std::unique_lock lock(mu);
    if (cv.wait_for(lock, std::chrono::duration<double>(g_timeout_s), [&] { return done; })) return;
    const int rank = env_int("OMPI_COMM_WORLD_RANK", env_int("PMI_RANK", -1));
    const int size = env_int("OMPI_COMM_WORLD_SIZE", env_int("PMI_SIZE", 0));
    std::fprintf(stderr,
                 "ringside: rank %d of %d: %s did not finish within %g s (--timeout): %s never joined the job "
                 "(it exited or runs something other than ringside under MPI; every process must)\n",
                 rank, size, op, g_timeout_s, other_ranks(rank, size).c_str());
    std::fflush(stderr);
    std::_Exit(1);
  });
  call();
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
}

void check_mpi(int rc, const char* op, int rank) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw CommError(detail::concat("rank ", rank, ": ", op, " failed: ", std::string(msg, len)));
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm c) : comm_(c) {
    MPI_Comm_rank(c, &rank_);
    MPI_Comm_size(c, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  RequestPtr post_send(const void* buf, int64_t bytes, int peer, int tag) override {
    auto req = make(detail::concat("send to rank ", world_rank(peer), " (tag ", tag, ", ", bytes, " bytes)"), bytes, peer);
    MPI_Request r;
    check_mpi(MPI_Isend(buf, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, &r), "MPI_Isend", world_rank(rank_));
    g_progress->add(r, req);
    return req;
  }

  RequestPtr post_recv(void* buf, int64_t bytes, int peer, int tag) override {
    auto req = make(detail::concat("recv from rank ", world_rank(peer), " (tag ", tag, ", ", bytes, " bytes)"), bytes, peer);
    req->expected_bytes = bytes;
    MPI_Request r;
    check_mpi(MPI_Irecv(buf, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, &r), "MPI_Irecv", world_rank(rank_));
    g_progress->add(r, req);
    return req;
  }

  void barrier() override {
    auto req = std::make_shared<MpiRequest>();
    req->what = "barrier";
    MPI_Request r;
    check_mpi(MPI_Ibarrier(comm_, &r), "MPI_Ibarrier", world_rank(rank_));
    g_progress->add(r, req);
    wait(req);
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm sub;
    int rc = MPI_SUCCESS;
    within_timeout("MPI_Comm_split", [&] { rc = MPI_Comm_split(comm_, color, key, &sub); });
    check_mpi(rc, "MPI_Comm_split", world_rank(rank_));
    auto c = std::make_unique<MpiCommunicator>(sub);
    c->timeout_s = timeout_s;
    c->tracker = tracker;
    return c;
  }

 private:
  std::shared_ptr<MpiRequest> make(std::string what, int64_t bytes, int peer) {
    RS_CHECK(peer >= 0 && peer < size_, "rank ", rank_, ": peer ", peer, " out of range for ", size_, " ranks");
    RS_CHECK(bytes <= 2147483647, "rank ", rank_, ": MPI message of ", bytes, " bytes exceeds MPI's int count");
    auto req = std::make_shared<MpiRequest>();
    req->what = std::move(what);
    req->owner = world_rank(rank_);
    return req;
  }
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

std::unique_ptr<MpiCommunicator> g_world;

}  // namespace

bool mpi_available() { return true; }
bool mpi_active() { return g_world != nullptr; }

Communicator& mpi_world(double timeout_s) {
  if (!g_world) {
    // MPI_Init itself takes a while (0.3 s for two processes here, more across nodes): a
    // --timeout meant for the transfers never cuts it short.
    g_timeout_s = std::max(timeout_s, kMinStartupTimeout);
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      within_timeout("MPI_Init", [&] { MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided); });
      RS_CHECK(provided >= MPI_THREAD_MULTIPLE,
               "MPI does not provide MPI_THREAD_MULTIPLE, which the progress thread needs");
    }
    // Errors come back as return codes, so that they become exceptions naming the op.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    g_progress = new Progress();
    g_world = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD);
  }
  return *g_world;
}

void mpi_abort(const std::string& message) {
  int rank = -1;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // "rank 0 failed: rank 0: all_gather: ..." says its rank once.
  const std::string own = "rank " + std::to_string(rank) + ": ";
  const std::string text = message.rfind(own, 0) == 0 ? message.substr(own.size()) : message;
  std::fprintf(stderr, "ringside: rank %d failed: %s\n", rank, text.c_str());
  std::fflush(stderr);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

void mpi_finalize() {
  if (!g_world) return;
  g_progress->stop();
  g_world.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) within_timeout("MPI_Finalize", [] { MPI_Finalize(); });
}

}  // namespace ringside
