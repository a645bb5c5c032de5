// Tests of memo/swap/host_store.hpp: batches are all-or-nothing, the budget
// is checked before allocation, and nothing stored is lost on an error.
#include "memo/swap/host_store.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "memo/backend/host_backend.hpp"

namespace {

using memo::host_backend;
using store_type = memo::host_store<host_backend>;

void fill(std::byte* data, std::uint64_t bytes, unsigned seed) {
  for (std::uint64_t i = 0; i < bytes; ++i) data[i] = static_cast<std::byte>((i * 31 + seed) & 0xff);
}
bool holds(const std::byte* data, std::uint64_t bytes, unsigned seed) {
  for (std::uint64_t i = 0; i < bytes; ++i) {
    if (data[i] != static_cast<std::byte>((i * 31 + seed) & 0xff)) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("host_store: reserves slots within the budget and finds them") {
  host_backend backend;
  store_type store(backend, 4096);
  // 300 bytes pads to 512 before the next slot: 512 + 1000 = 1512.
  store.reserve({{{0, 0, {0, 30}}, 300}, {{0, 1, {0, 10}}, 1000}});
  CHECK(store.used_bytes() == 1512);
  CHECK(store.slot_count() == 2);
  CHECK(store.slot_bytes({0, 1, {0, 10}}) == 1000);
  CHECK(memo::is_aligned(store.slot({0, 0, {0, 30}}), memo::default_alignment_bytes));
  CHECK(store.slot({0, 1, {0, 10}}) - store.slot({0, 0, {0, 30}}) == 512);
  // Pinned memory holds exactly the reserved batch.
  CHECK(backend.pinned_memory().current_bytes() == 1512);
  CHECK_THROWS_WITH_AS((void)store.slot({1, 0, {0, 30}}), doctest::Contains("no slot (layer 1"),
                       memo::error);
}

TEST_CASE("host_store: over budget fails with the numbers and keeps what is stored") {
  host_backend backend;
  store_type store(backend, 4096);
  store.reserve({{{0, 0, {0, 8}}, 2048}});
  fill(store.slot({0, 0, {0, 8}}), 2048, 7);

  CHECK_THROWS_WITH_AS(store.reserve({{{1, 0, {0, 8}}, 1024}, {{2, 0, {0, 8}}, 1500}}),
                       doctest::Contains("need 2524 bytes (2.46 KiB) on top of 2048 bytes in use, "
                                         "exceeding the host-memory budget of 4096 bytes (4.00 KiB) "
                                         "by 476 bytes"),
                       memo::error);
  CHECK(store.used_bytes() == 2048);
  CHECK(store.slot_count() == 1);
  CHECK(!store.contains({1, 0, {0, 8}}));
  CHECK(backend.pinned_memory().current_bytes() == 2048);
  CHECK(holds(store.slot({0, 0, {0, 8}}), 2048, 7));

  // Exactly the rest of the budget fits.
  store.reserve({{{1, 0, {0, 8}}, 2048}});
  CHECK(store.used_bytes() == 4096);
  CHECK(holds(store.slot({0, 0, {0, 8}}), 2048, 7));
}

TEST_CASE("host_store: duplicate and empty slots are errors that change nothing") {
  host_backend backend;
  store_type store(backend, 1 << 20);
  store.reserve({{{0, 0, {0, 4}}, 64}});
  fill(store.slot({0, 0, {0, 4}}), 64, 3);
  CHECK_THROWS_WITH_AS(store.reserve({{{1, 0, {0, 4}}, 64}, {{0, 0, {0, 4}}, 64}}),
                       doctest::Contains("requested twice"), memo::error);
  CHECK_THROWS_AS(store.reserve({{{2, 0, {0, 4}}, 64}, {{2, 0, {0, 4}}, 64}}), memo::error);
  CHECK_THROWS_WITH_AS(store.reserve({{{3, 0, {4, 4}}, 64}}), doctest::Contains("is empty"),
                       memo::error);
  CHECK_THROWS_AS(store.reserve({{{3, 0, {0, 4}}, 0}}), memo::error);
  CHECK(store.slot_count() == 1);
  CHECK(!store.contains({1, 0, {0, 4}}));
  CHECK(holds(store.slot({0, 0, {0, 4}}), 64, 3));
}

TEST_CASE("host_store: a pinned allocation failure leaves the store unchanged") {
  host_backend::options config;
  config.pinned_capacity_bytes = 1000;  // below the store's own budget
  host_backend backend(config);
  store_type store(backend, 1 << 20);
  store.reserve({{{0, 0, {0, 1}}, 600}});
  fill(store.slot({0, 0, {0, 1}}), 600, 1);
  CHECK_THROWS_AS(store.reserve({{{1, 0, {0, 1}}, 600}}), memo::error);
  CHECK(store.used_bytes() == 600);
  CHECK(store.slot_count() == 1);
  CHECK(holds(store.slot({0, 0, {0, 1}}), 600, 1));
}

TEST_CASE("host_store: host_slots_for lists every offloaded range of every layer") {
  memo::skeletal_layout layout({
      {"input", 10, 4, memo::skeletal_policy::offload_whole},
      {"mlp", 10, 8, memo::skeletal_policy::offload_fraction},
      {"norm", 10, 2, memo::skeletal_policy::recompute},
  });
  const auto slots = memo::host_slots_for(memo::offload_plan(layout, 0.5), 3);
  REQUIRE(slots.size() == 6);
  std::uint64_t total = 0;
  for (const auto& slot : slots) total += slot.bytes;
  CHECK(total == 3 * (40 + 5 * 8));
  CHECK(slots[1].key == memo::host_slot_key{0, 1, {0, 5}});
  CHECK(slots[5].key == memo::host_slot_key{2, 1, {0, 5}});
}

TEST_CASE("host_store: a released batch frees its bytes and its keys") {
  host_backend backend;
  store_type store(backend, 4096);
  const auto first = store.reserve({{{0, 0, {0, 8}}, 2048}});
  const auto second = store.reserve({{{1, 0, {0, 8}}, 2048}});
  fill(store.slot({1, 0, {0, 8}}), 2048, 5);
  CHECK_THROWS_AS(store.reserve({{{2, 0, {0, 8}}, 1}}), memo::error);  // full
  store.release(first);
  CHECK(store.used_bytes() == 2048);
  CHECK(!store.contains({0, 0, {0, 8}}));
  CHECK(backend.pinned_memory().current_bytes() == 2048);
  CHECK(holds(store.slot({1, 0, {0, 8}}), 2048, 5));  // the other batch is untouched
  store.reserve({{{0, 0, {0, 8}}, 2048}});            // the same key again
  CHECK_THROWS_WITH_AS(store.release(first), doctest::Contains("not held"), memo::error);
  store.release(second);
  CHECK(store.slot_count() == 1);
}

TEST_CASE("host_store: built over a region it does not own") {
  host_backend backend;
  const std::vector<memo::host_slot_request> batch{{{0, 0, {0, 30}}, 300}, {{0, 1, {0, 10}}, 1000}};
  // 300 bytes pad to 512: 512 + 1000 = 1512, the same as an owning store uses.
  CHECK(store_type::required_bytes(batch) == 1512);
  memo::buffer<std::byte, memo::host_memory_resource> arena(backend.pinned_memory(), 4096);  // [4096]
  store_type store(backend, memo::memory_region{arena.data(), arena.size()});
  CHECK(store.over_region());
  CHECK(store.budget_bytes() == 4096);
  const auto placed = store.reserve(batch);
  CHECK(store.slot({0, 0, {0, 30}}) == arena.data());
  CHECK(store.slot({0, 1, {0, 10}}) == arena.data() + 512);
  CHECK(backend.pinned_memory().current_bytes() == 4096);  // only the arena
  // A second batch goes after the first, aligned: [1536, 3584).
  const auto next = store.reserve({{{1, 0, {0, 8}}, 2048}});
  CHECK(store.slot({1, 0, {0, 8}}) == arena.data() + 1536);
  // Over the budget: the numbers, and nothing changes.
  CHECK_THROWS_WITH_AS(store.reserve({{{2, 0, {0, 8}}, 1024}}),
                       doctest::Contains("exceeding the host-memory budget of 4096 bytes"), memo::error);
  // Releasing the first batch frees its gap for a batch that fits in it.
  store.release(placed);
  store.reserve({{{2, 0, {0, 8}}, 1024}});
  CHECK(store.slot({2, 0, {0, 8}}) == arena.data());
  store.release(next);
  CHECK(store.used_bytes() == 1024);
  // A misaligned region is refused.
  CHECK_THROWS_AS(store_type(backend, memo::memory_region{arena.data() + 8, 1024}), memo::error);
}
