// The local backend: P ranks as threads of one process, each with a comm thread.
//
// A send and a receive meet in the LocalWorld (matched by source, destination, tag and
// communicator context, in posting order). The sender's comm thread then copies the bytes
// straight into the receiver's buffer, so a posted transfer runs while its rank computes,
// the way a NIC or a copy engine would. An optional artificial link (latency + bytes /
// bandwidth) makes transfers take the time a real link would.
//
// GPU ranks (core/gpu.h: virtual ranks sharing one GPU, each with compute and comm streams)
// post device buffers. Posting records an event on the rank's compute stream; the sender's
// comm thread then runs the copy as a device-to-device copy on the sender's comm stream,
// after both sides' events (the data is written; the destination is no longer read), so the
// copy engine moves it while the ranks' kernels run, as NVLink would.
#include <condition_variable>
#include <cstring>
#include <algorithm>
#include <deque>
#include <map>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "comm/communicator.h"
#include "core/gpu.h"

namespace ringside {

namespace {

class LocalWorld;
struct Transfer;

// A request of this backend. The world keeps only raw pointers to it: when the rank drops its
// last reference (normally after the wait; during unwinding when the rank fails), the
// destructor takes the request out of the world first, and waits for a copy in progress to
// finish, so that no transfer ever touches a buffer its rank has already released.
class LocalRequest final : public CompletionRequest {
 public:
  explicit LocalRequest(LocalWorld* w) : world_(w) {}
  ~LocalRequest() override;
  std::shared_ptr<Transfer> transfer;  ///< once matched (guarded by the world's mutex)
  std::optional<uint64_t> waiting_on;  ///< the link whose unmatched list holds it (the world's mutex)

 protected:
  void check_abort() const override;

 private:
  LocalWorld* world_;
};

// One posted half of a transfer.
struct Posted {
  int src, dst, tag;
  uint64_t context;
  void* buf;  // const for sends
  int64_t bytes;
  LocalRequest* req;
  const gpu::RankStreams* streams = nullptr;  // the posting rank's, when it is a GPU rank
  std::shared_ptr<gpu::Event> ready;          // its compute stream at posting (device buffers)
};

// A matched pair, for the sender's comm thread to carry out. A request released before the
// copy starts cancels it (its pointer becomes null); one released during the copy waits.
struct Transfer {
  const void* from;
  void* to;
  int64_t bytes;
  LocalRequest* send_req;
  LocalRequest* recv_req;
  const gpu::RankStreams* streams;  // whose comm stream runs a device copy (the sender's)
  int src;                          // whose comm thread carries it out
  std::shared_ptr<gpu::Event> send_ready, recv_ready;
  bool cancelled = false, copying = false;
};

class LocalWorld {
 public:
  LocalWorld(int P, const LocalOptions& o) : P_(P), opts_(o), queue_cv_(P), queues_(P) {
    ensure_thread_stacks();
    try {
      for (int r = 0; r < P; ++r) threads_.emplace_back([this, r] { comm_thread(r); });
    } catch (const std::system_error& e) {
      const size_t started = threads_.size();
      stop();  // the comm threads that did start
      throw Error(detail::concat("could not start comm thread ", started, ": ", e.what(),
                                 " (a limit on threads or address space: fewer ranks may fit)"));
    }
  }
  ~LocalWorld() { stop(); }

  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    wake_comm_threads();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

  // Every comm thread, to see stopping_ or aborted_ (their waits check both under mu_).
  void wake_comm_threads() {
    for (auto& cv : queue_cv_) cv.notify_all();
  }

  void post_send(Posted s) { post(s, true); }
  void post_recv(Posted r) { post(r, false); }

  // Abort: every waiter wakes and throws; sleeping transfers wake and are dropped.
  void abort(const std::string& why) {
    {
      std::lock_guard lock(msg_mu_);
      if (!abort_message_.empty()) return;  // the first failure names the cause
      abort_message_ = why;
    }
    {
      std::lock_guard lock(mu_);
      aborted_ = true;
    }
    wake_comm_threads();
    copy_cv_.notify_all();
    barrier_cv_.notify_all();
    std::lock_guard lock(req_mu_);
    for (auto& w : live_requests_)
      if (auto r = w.lock()) r->wake();
  }
  bool aborted() const { return aborted_.load(); }
  // Its own (leaf) mutex: waiters read it holding their request's mutex, which the comm
  // threads take while holding mu_.
  std::string abort_message() {
    std::lock_guard lock(msg_mu_);
    return abort_message_;
  }

  std::shared_ptr<LocalRequest> make_request() {
    auto r = std::make_shared<LocalRequest>(this);
    std::lock_guard lock(req_mu_);
    if (live_requests_.size() > 4096) std::erase_if(live_requests_, [](auto& w) { return w.expired(); });
    live_requests_.push_back(r);
    return r;
  }

  // A request's last reference is gone: forget its unmatched half, or cancel its transfer
  // (waiting out a copy in progress, which is a memcpy: short).
  void release(LocalRequest* req) {
    if (dry_immediate()) return;  // the world kept no pointer to it (post_dry)
    std::unique_lock lock(mu_);
    if (req->waiting_on) std::erase_if(unmatched_[*req->waiting_on], [&](const Half& h) { return h.req == req; });
    if (const std::shared_ptr<Transfer> t = req->transfer) {
      copy_cv_.wait(lock, [&] { return !t->copying; });
      t->cancelled = true;
      (t->send_req == req ? t->send_req : t->recv_req) = nullptr;
      queue_cv_[t->src].notify_all();  // its comm thread, sleeping on this transfer's link delay, moves on
    }
  }

  // A barrier over the ranks of one context (generation-counted so it can be reused).
  void barrier(uint64_t context, int group_size, double timeout_s, int rank) {
    std::unique_lock lock(barrier_mu_);
    auto& st = barriers_[context];
    const uint64_t gen = st.generation;
    if (++st.arrived == group_size) {
      st.arrived = 0;
      ++st.generation;
      barrier_cv_.notify_all();
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (st.generation == gen) {
      if (aborted_) throw AbortedError(detail::concat("rank ", rank, ": barrier aborted: ", abort_message()));
      if (barrier_cv_.wait_until(lock, deadline) == std::cv_status::timeout && st.generation == gen)
        throw CommError(detail::concat("rank ", rank, ": barrier did not complete within ", timeout_s, " s"));
    }
  }

  int size() const { return P_; }

 private:
  struct Half {
    bool is_send;
    Posted p;
    LocalRequest* req;
  };

  void post(const Posted& p, bool is_send) {
    std::lock_guard lock(mu_);
    if (aborted_) throw AbortedError("aborted: " + abort_message());
    // Match with the oldest opposite half of the same (src, dst, tag, context): the halves wait
    // in one list per (src, dst) pair, so a post scans only its own link's.
    if (dry_immediate()) {
      post_dry(p, is_send);
      return;
    }
    std::deque<Half>& unmatched = unmatched_[link_key(p.src, p.dst)];
    for (auto it = unmatched.begin(); it != unmatched.end(); ++it) {
      const Posted& o = it->p;
      if (it->is_send == is_send || o.tag != p.tag || o.context != p.context) continue;
      const Posted& s = is_send ? p : o;
      const Posted& r = is_send ? o : p;
      if (s.bytes != r.bytes)
        throw CommError(detail::concat("rank ", p.dst, ": recv from rank ", p.src, " (tag ", p.tag, ") expects ", r.bytes,
                                       " bytes but rank ", p.src, " sent ", s.bytes));
      const int sender = s.src;  // s may be the half erased below
      it->req->waiting_on.reset();
      auto t = std::make_shared<Transfer>(
          Transfer{s.buf, r.buf, s.bytes, s.req, r.req, s.streams ? s.streams : r.streams, sender, s.ready, r.ready});
      s.req->transfer = r.req->transfer = t;
      queues_[sender].push_back(std::move(t));
      unmatched.erase(it);
      queue_cv_[sender].notify_one();  // the sender's comm thread alone, not every rank's
      return;
    }
    unmatched.push_back(Half{is_send, p, p.req});
    p.req->waiting_on = link_key(p.src, p.dst);
  }

  // A dry run moves no bytes, has no link, and its ranks' schedules do not depend on what they
  // receive: each half completes as it is posted, so no rank ever waits on another (the what-if
  // model pairs the halves by their sequence numbers, trace::Tracer::next_seq). The halves are
  // still paired here, in posting order, to refuse a receive of another size than its send.
  void post_dry(const Posted& p, bool is_send) {
    std::deque<std::pair<bool, int64_t>>& waiting = dry_unmatched_[{p.src, p.dst, p.tag, p.context}];
    if (waiting.empty() || waiting.front().first == is_send) {
      waiting.push_back({is_send, p.bytes});
    } else {
      const int64_t sent = is_send ? p.bytes : waiting.front().second, expected = is_send ? waiting.front().second : p.bytes;
      if (sent != expected)
        throw CommError(detail::concat("rank ", p.dst, ": recv from rank ", p.src, " (tag ", p.tag, ") expects ", expected,
                                       " bytes but rank ", p.src, " sent ", sent));
      waiting.pop_front();
    }
    p.req->mark_started();
    p.req->complete(0);
  }

  bool dry_immediate() const { return opts_.dry_run && opts_.latency_us <= 0 && opts_.bandwidth_gbps <= 0; }

  uint64_t link_key(int src, int dst) const { return uint64_t(src) * uint64_t(P_) + uint64_t(dst); }

  // The link: latency + bytes / bandwidth, at most an hour (longer than any timeout).
  std::chrono::steady_clock::duration link_delay(int64_t bytes) const {
    double us = opts_.latency_us;
    if (opts_.bandwidth_gbps > 0) us += double(bytes) / (opts_.bandwidth_gbps * 1e3);
    us = std::min(us, 3.6e9);
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double, std::micro>(us));
  }

  void comm_thread(int rank) {
    std::unique_lock lock(mu_);
    for (;;) {
      queue_cv_[rank].wait(lock, [&] { return stopping_ || !queues_[rank].empty(); });
      if (queues_[rank].empty()) return;  // stopping and drained
      const std::shared_ptr<Transfer> t = std::move(queues_[rank].front());
      queues_[rank].pop_front();
      if (!t->cancelled && !aborted_) {
        t->send_req->mark_started();
        t->recv_req->started_ns = t->send_req->started_ns.load();
        if (opts_.latency_us > 0 || opts_.bandwidth_gbps > 0) {
          const auto until = std::chrono::steady_clock::now() + link_delay(t->bytes);
          queue_cv_[rank].wait_until(lock, until, [&] { return t->cancelled || aborted_.load(); });
        }
      }
      // After an abort the failed rank may have released its buffers; a cancelled transfer's
      // peer has: move nothing, and tell the side still waiting.
      if (t->cancelled || aborted_) {
        for (LocalRequest* q : {t->send_req, t->recv_req})
          if (q) q->fail(detail::concat("aborted (", q->what, "): the peer released its half of the transfer (it failed)"), true);
        t->send_req = t->recv_req = nullptr;
        continue;
      }
      t->copying = true;
      lock.unlock();
      int64_t done_ns = 0;
      std::string failure;
      try {
        if (t->bytes && !opts_.dry_run) {
          if (t->send_ready || t->recv_ready) {  // device memory: a copy on the comm stream, timed by events
            int64_t start_ns = 0;
            gpu::transfer(*t->streams, t->to, t->from, t->bytes, {t->send_ready.get(), t->recv_ready.get()},
                          opts_.timeout_s, start_ns, done_ns);
            t->send_req->started_ns = t->recv_req->started_ns = start_ns;
          } else {
            std::memcpy(t->to, t->from, static_cast<size_t>(t->bytes));
          }
        }
      } catch (const std::exception& e) {
        failure = e.what();
      }
      lock.lock();
      t->copying = false;
      if (!failure.empty()) {  // a CUDA error: both sides' waits report it
        t->recv_req->fail(detail::concat(t->recv_req->what, ": ", failure));
        t->send_req->fail(detail::concat(t->send_req->what, ": ", failure));
      } else {
        t->recv_req->complete(done_ns);
        t->send_req->complete(done_ns);
      }
      copy_cv_.notify_all();  // a release waiting for this copy
    }
  }

  struct BarrierState {
    int arrived = 0;
    uint64_t generation = 0;
  };

  int P_;
  LocalOptions opts_;
  std::mutex mu_;
  // Each comm thread sleeps on its own condition: a matched transfer, a cancel or an abort wakes
  // the one that carries it out, not all P (one shared condition woke every rank's comm thread
  // on every message: a dry run of 32 ranks spent three quarters of its time in futex calls).
  // A release waits on copy_cv_ for a copy in progress.
  std::vector<std::condition_variable> queue_cv_;
  std::condition_variable copy_cv_;
  std::vector<std::deque<std::shared_ptr<Transfer>>> queues_;
  std::unordered_map<uint64_t, std::deque<Half>> unmatched_;  // by link_key(src, dst)
  // A dry run's halves not yet paired, by (src, dst, tag, context): all sends or all receives.
  std::map<std::tuple<int, int, int, uint64_t>, std::deque<std::pair<bool, int64_t>>> dry_unmatched_;
  std::vector<std::thread> threads_;
  bool stopping_ = false;
  std::atomic<bool> aborted_{false};
  std::mutex msg_mu_;
  std::string abort_message_;
  std::mutex barrier_mu_;
  std::condition_variable barrier_cv_;
  std::map<uint64_t, BarrierState> barriers_;
  std::mutex req_mu_;
  std::vector<std::weak_ptr<LocalRequest>> live_requests_;
};

LocalRequest::~LocalRequest() { world_->release(this); }

void LocalRequest::check_abort() const {
  if (world_->aborted()) throw AbortedError("aborted (" + what + "): " + world_->abort_message());
}

class LocalCommunicator final : public Communicator {
 public:
  // group: world ranks of this communicator, in rank order; context: tag namespace.
  LocalCommunicator(LocalWorld* world, std::vector<int> group, int rank, uint64_t context)
      : world_(world), group_(std::move(group)), rank_(rank), context_(context) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(group_.size()); }
  std::string backend() const override { return "local"; }

  RequestPtr post_send(const void* buf, int64_t bytes, int peer, int tag) override {
    check_peer(peer, "send");
    auto req = world_->make_request();
    req->what = detail::concat("send to rank ", world_rank(peer), " (tag ", tag, ", ", bytes, " bytes)");
    world_->post_send(Posted{group_[rank_], group_[peer], tag, context_, const_cast<void*>(buf), bytes, req.get(),
                             gpu::bound(), ready_event(buf)});
    return req;
  }

  RequestPtr post_recv(void* buf, int64_t bytes, int peer, int tag) override {
    check_peer(peer, "recv");
    auto req = world_->make_request();
    req->what = detail::concat("recv from rank ", world_rank(peer), " (tag ", tag, ", ", bytes, " bytes)");
    world_->post_recv(Posted{group_[peer], group_[rank_], tag, context_, buf, bytes, req.get(), gpu::bound(),
                             ready_event(buf)});
    return req;
  }

  void barrier() override { world_->barrier(context_, size(), timeout_s, world_rank(rank_)); }  // rank: for messages

  std::unique_ptr<Communicator> split(int color, int key) override {
    // Everyone learns everyone's (color, key) with an all_gather, then builds its group.
    std::vector<double> mine = {double(color), double(key)}, all(2 * size());
    Communicator::all_gather(mine.data(), all.data(), std::vector<int64_t>(size(), 2), DType::f64);
    return split_by([&](int r) { return std::pair{int(all[2 * r]), int(all[2 * r + 1])}; });
  }

  // Every member knows every (color, key): the group needs no message.
  std::unique_ptr<Communicator> split_by(const std::function<std::pair<int, int>(int)>& color_key) override {
    const int color = color_key(rank_).first;
    std::vector<std::pair<std::pair<int, int>, int>> members;  // ((key, parent rank), parent rank)
    for (int r = 0; r < size(); ++r)
      if (const auto [c, k] = color_key(r); c == color) members.push_back({{k, r}, r});
    std::sort(members.begin(), members.end());
    std::vector<int> group;
    int new_rank = -1;
    for (auto& m : members) {
      if (m.second == rank_) new_rank = static_cast<int>(group.size());
      group.push_back(group_[m.second]);
    }
    // A context every member computes alike: parent context, split count and color.
    const uint64_t ctx = (context_ * 1000003ULL + ++splits_) * 1000003ULL + static_cast<uint64_t>(color + 1);
    auto c = std::make_unique<LocalCommunicator>(world_, group, new_rank, ctx);
    c->world_ranks_ = std::move(group);  // the local world's ranks are the world's
    c->parent_ = this;
    c->timeout_s = timeout_s;
    c->slow_link = slow_link;
    c->tracker = tracker;
    return c;
  }

 private:
  // On a GPU rank posting device memory: an event at this point of its compute stream.
  static std::shared_ptr<gpu::Event> ready_event(const void* buf) {
    if (!gpu::bound() || dry_run_active() || !gpu::is_device_pointer(buf)) return nullptr;
    return gpu::Event::record();
  }
  void check_peer(int peer, const char* op) const {
    RS_CHECK(peer >= 0 && peer < size(), "rank ", rank_, ": ", op, " to rank ", peer, " of a communicator of size ", size());
  }
  LocalWorld* world_;
  std::vector<int> group_;
  int rank_;
  uint64_t context_;
  uint64_t splits_ = 0;
};

}  // namespace

void run_local(int P, const std::function<void(Communicator&)>& fn, const LocalOptions& opts) {
  RS_CHECK(P >= 1, "run_local: need at least one rank, got ", P);
  LocalWorld world(P, opts);
  std::vector<int> everyone(P);
  for (int r = 0; r < P; ++r) everyone[r] = r;
  RankFailures failures;
  std::string slow_link;
  if (opts.latency_us > 0 || opts.bandwidth_gbps > 0)
    slow_link = detail::concat("the slowed link (latency ", opts.latency_us, " us, bandwidth ",
                               opts.bandwidth_gbps > 0 ? detail::concat(opts.bandwidth_gbps, " GB/s") : "unlimited", ")");
  run_rank_threads(
      P,
      [&](int r) {
        LocalCommunicator comm(&world, everyone, r, 1);
        comm.timeout_s = opts.timeout_s;
        comm.slow_link = slow_link;
        try {
          std::optional<gpu::Bind> bind;  // virtual ranks: every rank on GPU 0, streams of its own
          if (opts.device == Device::cuda) bind.emplace(0, r);
          fn(comm);
          gpu::synchronize();  // a rank's queued work fails here, as its own, not later
        } catch (const std::exception& e) {
          world.abort(failures.record(r, e));
        }
      },
      [&](const std::string& why) { world.abort(why); });
  failures.rethrow();
}

}  // namespace ringside
