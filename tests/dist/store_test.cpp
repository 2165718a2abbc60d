// The TCP store with several processes: its calls, and the errors a missing or departed rank gives.
#include "dist/store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "common/error_of.h"
#include "dist/ranks.h"

namespace fp8kit::dist {
namespace {

using namespace std::chrono_literals;
using testing::error_of;
using testing::local_rendezvous;
using testing::run_ranks;

std::span<const std::byte> bytes(const std::string& s) { return std::as_bytes(std::span(s)); }
std::string text(const Store::Blob& b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }

TEST(Store, BroadcastGatherAllgatherBarrier) {
  const auto outcomes = run_ranks(3, [](const Rendezvous& r) {
    Store store(r, {.timeout = 20s});
    std::string seen = text(store.broadcast(bytes(r.rank == 0 ? std::string("id-from-0") : "ignored")));
    store.barrier();
    const std::vector<Store::Blob> gathered = store.gather(bytes(std::string(r.rank + 1, 'a' + r.rank)));
    seen += fmt::format(" gather:{}", gathered.size());
    for (const Store::Blob& b : gathered) seen += fmt::format(" {}", text(b));
    seen += " all:";
    for (const Store::Blob& b : store.allgather(bytes(fmt::format("r{}", r.rank)))) seen += fmt::format(" {}", text(b));
    store.barrier();
    return seen;
  });
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_TRUE(outcomes[0].ok) << outcomes[0].text;
  EXPECT_EQ(outcomes[0].text, "id-from-0 gather:3 a bb ccc all: r0 r1 r2");
  for (int rank : {1, 2}) {
    EXPECT_TRUE(outcomes[rank].ok) << outcomes[rank].text;
    EXPECT_EQ(outcomes[rank].text, "id-from-0 gather:0 all: r0 r1 r2");
  }
}

TEST(Store, OneProcessNeedsNoSockets) {
  Store store(Rendezvous{}, {.timeout = 1s});
  EXPECT_EQ(text(store.broadcast(bytes("x"))), "x");
  ASSERT_EQ(store.allgather(bytes("y")).size(), 1u);
  store.barrier();
}

TEST(Store, ARankThatLeavesIsNamedOnEveryRank) {
  // Rank 2 connects and ends; the others are in a barrier with a long timeout: its closed socket ends it.
  const auto outcomes = run_ranks(3, [](const Rendezvous& r) -> std::string {
    Store store(r, {.timeout = 30s});
    if (r.rank == 2) _exit(0);
    store.barrier();
    return "barrier passed";
  });
  for (int rank : {0, 1}) {
    EXPECT_FALSE(outcomes[rank].ok);
    EXPECT_NE(outcomes[rank].text.find("rank 2 left during barrier #1"), std::string::npos) << outcomes[rank].text;
  }
}

TEST(Store, PollingBetweenCallsHearsOfADepartedRank) {
  // Ranks 0 and 2 wait on something else (as for the GPU), polling; rank 1 dies meanwhile.
  const auto outcomes = run_ranks(3, [](const Rendezvous& r) -> std::string {
    Store store(r, {.timeout = 30s});
    if (r.rank == 1) _exit(9);
    for (int i = 0; i < 1000; ++i) {
      if (std::string failure = store.poll_failure(); !failure.empty()) return failure;
      std::this_thread::sleep_for(10ms);
    }
    return "nothing heard";
  });
  EXPECT_EQ(outcomes[0].text, "rank 1 left (its connection closed: the process ended)");
  EXPECT_EQ(outcomes[2].text, "rank 1 left (its connection closed: the process ended)");
  // Pending frames of the next call are not failures, and stay for that call.
  const auto quiet = run_ranks(2, [](const Rendezvous& r) -> std::string {
    Store store(r, {.timeout = 30s});
    if (r.rank == 1) store.gather(bytes("early"));  // returns once sent
    std::this_thread::sleep_for(200ms);
    const std::string failure = store.poll_failure();
    const std::string gathered = r.rank == 0 ? text(store.gather(bytes("x"))[1]) : "";
    store.barrier();
    return failure + "|" + gathered;
  });
  EXPECT_EQ(quiet[0].text, "|early");
  EXPECT_EQ(quiet[1].text, "|");
}

TEST(Store, ARankThatDoesNotArriveTimesOutNamingIt) {
  const auto outcomes = run_ranks(3, [](const Rendezvous& r) -> std::string {
    Store store(r, {.timeout = 500ms});
    if (r.rank == 1) {
      std::this_thread::sleep_for(1500ms);  // busy elsewhere past the timeout
      return "late";
    }
    store.barrier();
    return "barrier passed";
  });
  for (int rank : {0, 2}) {
    EXPECT_FALSE(outcomes[rank].ok);
    EXPECT_NE(outcomes[rank].text.find("barrier #1 timed out after 0.5 s on rank 0: rank(s) 1 did not arrive"),
              std::string::npos)
        << outcomes[rank].text;
  }
}

TEST(Store, RanksNeverStartedAreNamedByRankZero) {
  const auto outcomes = run_ranks(3, [](const Rendezvous& r) -> std::string {
    if (r.rank != 0) return "not started";
    Store store(r, {.timeout = 300ms});
    return "connected";
  });
  EXPECT_FALSE(outcomes[0].ok);
  EXPECT_NE(outcomes[0].text.find("rank(s) 1, 2 did not connect"), std::string::npos) << outcomes[0].text;
}

TEST(Store, AnUnreachableRankZeroIsNamedWithItsAddress) {
  const Rendezvous r = local_rendezvous(1, 2, free_tcp_port());
  const std::string message = error_of([&] { Store store(r, {.timeout = 300ms}); });
  EXPECT_NE(message.find(fmt::format("rank 1 could not reach rank 0 at 127.0.0.1:{} within 0.3 s", r.master_port)),
            std::string::npos)
      << message;
}

TEST(Store, DifferentCallsOnDifferentRanksAreAnError) {
  const auto outcomes = run_ranks(2, [](const Rendezvous& r) -> std::string {
    Store store(r, {.timeout = 20s});
    if (r.rank == 0) store.broadcast(bytes("x"));  // returns once sent: the next call hears of rank 1's error
    store.barrier();
    return "passed";
  });
  for (int rank : {0, 1}) {
    EXPECT_FALSE(outcomes[rank].ok);
    // Rank 1 finds rank 0's broadcast, or rank 0 (in barrier #2) rank 1's barrier #1, first.
    EXPECT_NE(outcomes[rank].text.find("every rank must make the same store calls in the same order"),
              std::string::npos)
        << outcomes[rank].text;
  }
}

TEST(Store, TwoProcessesClaimingOneRank) {
  const auto outcomes = run_ranks(3, [](const Rendezvous& r) -> std::string {
    Rendezvous claimed = r;
    if (r.rank == 2) claimed.rank = 1;
    Store store(claimed, {.timeout = 2s});
    return "connected";
  });
  EXPECT_FALSE(outcomes[0].ok);
  EXPECT_NE(outcomes[0].text.find("two processes claim rank 1"), std::string::npos) << outcomes[0].text;
}

TEST(Store, AbortEndsTheCallOnEveryRankWithItsMessage) {
  const auto outcomes = run_ranks(3, [](const Rendezvous& r) -> std::string {
    Store store(r, {.timeout = 20s});
    if (r.rank == 1) store.abort("rank 1 found a different config");
    store.barrier();
    return "passed";
  });
  EXPECT_EQ(outcomes[1].text, "rank 1 found a different config");
  EXPECT_EQ(outcomes[0].text, "rank 1: rank 1 found a different config");
  EXPECT_EQ(outcomes[2].text, "rank 1: rank 1 found a different config");
}

}  // namespace
}  // namespace fp8kit::dist
