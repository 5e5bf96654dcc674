// The local communicator: collectives against serial results, counted bytes, asynchrony,
// timeouts and failure propagation.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "comm_checks.h"

using namespace ringside;

TEST_CASE("local collectives match the serial computation for P = 1 to 4", "[comm]") {
  for (int P = 1; P <= 4; ++P) {
    INFO("P = " << P);
    run_local(P, [](Communicator& c) { comm_checks::all(c); });
  }
}

TEST_CASE("local point-to-point and split", "[comm]") {
  for (int P = 1; P <= 4; ++P) run_local(P, [](Communicator& c) { comm_checks::p2p_and_split(c); });
}

TEST_CASE("a posted send progresses while its rank computes", "[comm]") {
  // With a 50 ms link, each rank posts its transfer, then "computes" until the transfer is done,
  // and only then waits: the comm thread must finish it with no wait called (were it moved only
  // inside wait, the rank would compute for ever; the loop gives up after 30 s). No upper bound
  // on time: under load the transfer may take longer than 50 ms, never less.
  LocalOptions o;
  o.latency_us = 50000;
  std::atomic<int> done_before_wait{0};
  std::atomic<int64_t> shortest_ns{INT64_MAX};
  run_local(
      2,
      [&](Communicator& c) {
        std::vector<char> buf(1024);
        RequestPtr r = c.rank() == 0 ? c.isend(buf.data(), 1024, 1, 0) : c.irecv(buf.data(), 1024, 0, 0);
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!r->done() && std::chrono::steady_clock::now() < give_up)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));  // "compute"
        done_before_wait += r->done();
        c.wait(r);
        if (c.rank() == 0) shortest_ns = r->completed_ns.load() - r->posted_ns;
      },
      o);
  CHECK(done_before_wait.load() == 2);
  CHECK(shortest_ns.load() >= 50'000'000);  // the link's latency, at least
}

TEST_CASE("a wait that cannot complete fails with rank, op and peer", "[comm]") {
  // (The message names the 0.2 s timeout: it ended the wait. A hang is CTest's timeout.)
  LocalOptions o;
  o.timeout_s = 0.2;
  REQUIRE_THROWS_WITH(run_local(
                          2,
                          [](Communicator& c) {
                            double x = 0;
                            if (c.rank() == 0) c.recv(&x, 8, 1, 42);  // rank 1 never sends
                          },
                          o),
                      Catch::Contains("rank 0 failed: rank 0: recv from rank 1 (tag 42, 8 bytes) did not complete within 0.2 s"));
}

TEST_CASE("in a group, a wait that cannot complete names world ranks and the collective", "[comm]") {
  // Groups {0 2} and {1 3}: in its group world rank 2 is rank 1, and world rank 3 never joins
  // the all-gather. Before, the message said "rank 0: recv from rank 0" (group ranks).
  LocalOptions o;
  o.timeout_s = 0.2;
  REQUIRE_THROWS_WITH(run_local(
                          4,
                          [](Communicator& c) {
                            auto group = c.split_by([](int r) { return std::pair{r % 2, r / 2}; });
                            if (c.rank() == 3) return;
                            float mine = 1, all[2];
                            group->all_gather(&mine, all, {1, 1}, DType::f32);
                          },
                          o),
                      Catch::Contains("rank 1 failed: rank 1: all_gather: ") &&
                          Catch::Contains("from rank 3 (tag") && Catch::Contains("did not complete within 0.2 s"));
}

TEST_CASE("a rank that throws takes the job down without a hang", "[comm]") {
  // The others' waits would time out after 10 minutes: ending in less than half of that, the
  // job was ended by the failure, however loaded the machine (it takes milliseconds).
  LocalOptions o;
  o.timeout_s = 600;
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE_THROWS_WITH(run_local(4,
                                [](Communicator& c) {
                                  std::vector<float> v(1000, 1.0f);
                                  c.all_reduce(v.data(), 1000, DType::f32);  // all take part once
                                  if (c.rank() == 2) throw Error("boom in the MLP");
                                  c.all_reduce(v.data(), 1000, DType::f32);  // the others wait for rank 2
                                },
                                o),
                      Catch::Contains("rank 2 failed: boom in the MLP"));
  REQUIRE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 300);
}

TEST_CASE("mismatched message sizes are an error, not a corruption", "[comm]") {
  REQUIRE_THROWS_WITH(run_local(2,
                                [](Communicator& c) {
                                  double x[2] = {0, 0};
                                  if (c.rank() == 0) c.send(x, 16, 1, 1);
                                  else c.recv(x, 8, 0, 1);
                                }),
                      Catch::Contains("expects 8 bytes but rank 0 sent 16"));
}
