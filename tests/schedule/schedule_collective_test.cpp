#include "memo/schedule/schedule_collective.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "memo/backend/host_backend.hpp"
#include "memo/backend/self_communicator.hpp"
#include "memo/backend/thread_communicator.hpp"
#include "memo/schedule/stream_schedule.hpp"

namespace {

constexpr std::size_t elements = 1000;  // [elements] float gradients per rank

memo::device_profile test_profile() {
  memo::device_profile profile;
  profile.name = "test";
  profile.peak_flops = 1e12;
  profile.efficiency = 1.0;
  profile.host_to_device_bytes_per_second = 1e10;
  profile.device_to_host_bytes_per_second = 1e10;
  profile.interconnect_bytes_per_second = 4e9;
  profile.device_memory_bytes = 1ull << 30;
  profile.host_memory_bytes = 1ull << 32;
  return profile;
}

// One rank's step: fill gradients (compute stream), all_reduce them (comm
// stream, after the fill), scale by 1/ranks (compute stream, after the
// all_reduce).
memo::stream_schedule rank_schedule(memo::thread_communicator& comm, std::vector<float>& gradients) {
  memo::stream_schedule schedule;
  schedule.add_stream("compute");
  schedule.add_stream("comm");
  float* data = gradients.data();
  const float value = float(comm.rank() + 1);
  memo::compute_op fill;
  fill.flops = 1e9;
  fill.work = [data, value](memo::native_stream_ref) {
    for (std::size_t i = 0; i < elements; ++i) data[i] = value * float(i % 10);
  };
  const auto filled = schedule.add_compute("fill", "compute", fill);
  const auto reduced = memo::add_collective<memo::thread_communicator, float>(
      schedule, "all_reduce gradients", "comm", comm, memo::comm_op::all_reduce,
      std::span<const float>(data, elements), std::span<float>(data, elements), {filled});
  memo::compute_op scale;
  scale.flops = 1e9;
  const float inverse = 1.0f / float(comm.size());
  scale.work = [data, inverse](memo::native_stream_ref) {
    for (std::size_t i = 0; i < elements; ++i) data[i] *= inverse;
  };
  schedule.add_compute("average", "compute", scale, {reduced});
  return schedule;
}

/// Executes rank r's schedule on thread r, each on a backend of its own;
/// what each rank failed with ("" = nothing).
std::vector<std::string> execute_on_threads(std::vector<memo::stream_schedule>& schedules) {
  std::vector<std::string> failures(schedules.size());
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < schedules.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        memo::host_backend backend;
        schedules[r].execute(backend);
      } catch (const std::exception& e) {
        failures[r] = e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  return failures;
}

}  // namespace

TEST_CASE("schedule_collective: a 2-rank all_reduce schedule executes on threads and simulates on the comm stream") {
  auto comms = memo::thread_communicator::create_group(2);
  std::vector<std::vector<float>> gradients(2, std::vector<float>(elements, -1.0f));
  std::vector<memo::stream_schedule> schedules;
  for (int r = 0; r < 2; ++r) schedules.push_back(rank_schedule(comms[static_cast<std::size_t>(r)], gradients[static_cast<std::size_t>(r)]));
  const std::vector<std::string> failures = execute_on_threads(schedules);
  CHECK(failures[0].empty());
  CHECK(failures[1].empty());
  // (1 + 2) * (i % 10) summed over the ranks, then averaged over 2.
  for (int r = 0; r < 2; ++r) {
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < elements; ++i) wrong += gradients[static_cast<std::size_t>(r)][i] != 1.5f * float(i % 10);
    CHECK(wrong == 0);
  }

  const auto& schedule = schedules[0];
  const auto profile = test_profile();
  const auto simulated = schedule.simulate(profile);
  const auto& collective = simulated.op(schedule.find("all_reduce gradients"));
  CHECK(collective.kind == memo::op_kind::collective);
  CHECK(simulated.streams()[collective.stream] == "comm");
  CHECK(collective.bytes == elements * sizeof(float));
  // Ring all-reduce on 2 ranks: 2 (p - 1) / p of the buffer over the link,
  // after the fill (1e9 FLOPs at 1e12 FLOP/s).
  CHECK(collective.start_seconds == doctest::Approx(1e-3));
  CHECK(collective.duration_seconds() == doctest::Approx(2.0 * 0.5 * 4000.0 / 4e9));
  CHECK(simulated.op(schedule.find("average")).start_seconds == doctest::Approx(collective.end_seconds));
  CHECK(schedule.op(schedule.find("all_reduce gradients")).spec.index() == 2);
  CHECK(std::get<memo::collective_op>(schedule.op(schedule.find("all_reduce gradients")).spec).communicator ==
        comms[0].describe());
}

TEST_CASE("schedule_collective: a 3-rank broadcast executes from its root and simulates as the whole buffer over the link") {
  constexpr int ranks = 3;
  constexpr int root = 2;
  auto comms = memo::thread_communicator::create_group(ranks);
  std::vector<std::vector<float>> data(ranks);
  std::vector<memo::stream_schedule> schedules(ranks);
  for (int r = 0; r < ranks; ++r) {
    auto& mine = data[static_cast<std::size_t>(r)];
    mine.assign(elements, float(r) - 5.0f);
    auto& schedule = schedules[static_cast<std::size_t>(r)];
    schedule.add_stream("comm");
    memo::add_broadcast<memo::thread_communicator, float>(schedule, "weights", "comm", comms[static_cast<std::size_t>(r)],
                                                          std::span<float>(mine), root);
  }
  const std::vector<std::string> failures = execute_on_threads(schedules);
  for (int r = 0; r < ranks; ++r) {
    CAPTURE(r);
    CHECK(failures[static_cast<std::size_t>(r)].empty());
    std::size_t wrong = 0;
    for (const float v : data[static_cast<std::size_t>(r)]) wrong += v != float(root) - 5.0f;
    CHECK(wrong == 0);
  }
  const auto simulated = schedules[0].simulate(test_profile());
  const auto& op = simulated.op(schedules[0].find("weights"));
  CHECK(op.bytes == elements * sizeof(float));
  // Pipelined broadcast: every rank but the root receives the whole buffer.
  CHECK(op.duration_seconds() == doctest::Approx(4000.0 / 4e9));
  CHECK(std::get<memo::collective_op>(schedules[0].op(schedules[0].find("weights")).spec).kind ==
        memo::collective_kind::broadcast);
  // A root outside the group is refused when the op is added.
  CHECK_THROWS_AS((memo::add_broadcast<memo::thread_communicator, float>(schedules[0], "bad", "comm", comms[0],
                                                                         std::span<float>(data[0]), ranks)),
                  memo::error);
}

TEST_CASE("schedule_collective: shapes are checked when the op is added, and send/recv are not schedule collectives") {
  memo::self_communicator comm;
  memo::stream_schedule schedule;
  schedule.add_stream("comm");
  std::vector<float> a(4);
  std::vector<float> b(3);
  CHECK_THROWS_AS((memo::add_collective<memo::self_communicator, float>(schedule, "bad", "comm", comm, memo::comm_op::all_reduce,
                                                                       std::span<const float>(a), std::span<float>(b))),
                  memo::error);
  CHECK_THROWS_AS((memo::add_collective<memo::self_communicator, float>(schedule, "p2p", "comm", comm, memo::comm_op::send,
                                                                       std::span<const float>(a), std::span<float>(a))),
                  memo::error);
  CHECK(schedule.size() == 0);
}
