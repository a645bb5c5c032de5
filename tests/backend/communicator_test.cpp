#include "memo/backend/communicator.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <span>
#include <utility>
#include <string>
#include <vector>

#include "memo/backend/host_backend.hpp"
#include "memo/backend/self_communicator.hpp"
#include "memo/backend/thread_communicator.hpp"

// The concept accepts the communicators and rejects what is not one.
static_assert(memo::Communicator<memo::self_communicator>);
static_assert(memo::Communicator<memo::thread_communicator>);
static_assert(memo::CommunicatorOf<memo::thread_communicator, memo::host_backend>);
static_assert(!memo::Communicator<memo::host_backend>, "a backend is not a communicator");
static_assert(!memo::Communicator<int>);
static_assert(memo::communicator_element<float> && memo::communicator_element<std::int32_t>);
static_assert(!memo::communicator_element<double>, "double is not moved by communicators");

TEST_CASE("communicator: payload bytes follow the simulator's convention for each collective") {
  // 10 floats per block on 4 ranks.
  memo::comm_call call = memo::self_communicator::make<float>(memo::comm_op::all_reduce, nullptr, nullptr, 10);
  CHECK(memo::comm_payload_bytes(call, 4) == 40);  // the buffer
  call.op = memo::comm_op::all_gather;
  CHECK(memo::comm_payload_bytes(call, 4) == 160);  // the gathered output
  call.op = memo::comm_op::reduce_scatter;
  CHECK(memo::comm_payload_bytes(call, 4) == 160);  // the full input
  call.op = memo::comm_op::all_to_all;
  CHECK(memo::comm_payload_bytes(call, 4) == 160);  // one rank's buffer
  call.op = memo::comm_op::broadcast;
  CHECK(memo::comm_payload_bytes(call, 4) == 40);  // the buffer
  call.op = memo::comm_op::barrier;
  CHECK(memo::comm_payload_bytes(call, 4) == 0);
}

TEST_CASE("communicator: checked_call gives the per-rank block and refuses wrong shapes with the sizes") {
  auto comms = memo::thread_communicator::create_group(3);
  std::vector<float> send(12);
  std::vector<float> recv(4);
  const auto call = comms[0].checked_call<float>(memo::comm_op::reduce_scatter, std::span<const float>(send),
                                                 std::span<float>(recv));
  CHECK(call.count == 4);
  CHECK(call.send == send.data());
  CHECK(call.recv == recv.data());
  try {
    (void)comms[0].checked_call<float>(memo::comm_op::all_gather, std::span<const float>(recv),
                                       std::span<float>(recv.data(), 3));
    FAIL_CHECK("a wrong all_gather shape was accepted");
  } catch (const memo::error& e) {
    const std::string what = e.what();
    CHECK(what.find("all_gather needs recv of size() * send elements = 12, got 3") != std::string::npos);
    CHECK(what.find("rank 0/3") != std::string::npos);
  }
  CHECK_THROWS_AS((void)comms[0].checked_call<float>(memo::comm_op::broadcast, std::span<const float>(recv),
                                                     std::span<float>(recv)),
                  memo::error);
  CHECK_THROWS_AS((void)comms[0].checked_call<float>(memo::comm_op::send, std::span<const float>(recv),
                                                     std::span<float>(recv)),
                  memo::error);
  // A send span whose size() times 3 passes 2^64: refused by size, no
  // wrapped product (only the sizes are read).
  const std::span<const float> vast(recv.data(), SIZE_MAX / 2);
  try {
    (void)comms[0].checked_call<float>(memo::comm_op::all_gather, vast, std::span<float>(recv.data(), 3));
    FAIL_CHECK("an all_gather of 2^63 elements per rank was accepted");
  } catch (const memo::error& e) {
    CHECK(std::string(e.what()).find("size() * send elements = more than 2^64 - 1, got 3") != std::string::npos);
  }
  // A moved-from communicator makes no task (it would hold no state).
  memo::thread_communicator moved = std::move(comms[2]);
  CHECK_THROWS_AS((void)comms[2].task(call), memo::error);
  CHECK(moved.rank() == 2);
}
