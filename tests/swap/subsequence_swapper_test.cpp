// Tests of memo/swap/subsequence_swapper.hpp: what a forward writes comes
// back to its backward through the host and the device store, whichever
// slot either ran in; the stores are exactly the offloaded and kept rows;
// a backward's refill of the next unit runs during this backward; the last
// forward units can stay in their slots, with no copies and no room in the
// stores; units out of order and bad ratios are errors.
#include "memo/swap/subsequence_swapper.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "memo/backend/buffer.hpp"
#include "memo/backend/host_backend.hpp"

namespace {

using memo::host_backend;
using swapper_type = memo::subsequence_swapper<host_backend>;
using device_resource = std::remove_reference_t<decltype(std::declval<host_backend&>().device_memory())>;
using device_bytes = memo::buffer<std::byte, device_resource>;

// Two tensors of the longest subsequence's 4 rows: 8 and 12 bytes a row.
memo::skeletal_layout layout() {
  return memo::skeletal_layout({{"a", 4, 8, memo::skeletal_policy::offload_fraction},
                                {"b", 4, 12, memo::skeletal_policy::offload_whole}});
}

// A swapper over its own two slots and kept store, for `plan`'s
// subsequences forward in order and backward in reverse.
struct swapper_setup {
  device_bytes slots, kept;
  swapper_type swapper;
  // `resident`: how many of the last forward units stay in their slots;
  // the kept store is exactly what the swapper then needs.
  swapper_setup(host_backend& backend, host_backend::stream& compute, const memo::subsequence_offload_plan& plan,
                std::int64_t layers, int resident = 0)
      : slots(backend.device_memory(), swapper_type::slot_bytes(layout())),
        kept(backend.device_memory(),
             swapper_type::kept_bytes(layout(), plan, layers,
                                      swapper_type::resident_units(order(plan, false), order(plan, true), layers,
                                                                   resident))),
        swapper(backend, compute, layout(), plan, layers, order(plan, false), order(plan, true),
                {slots.data(), slots.size_bytes()}, {kept.data(), kept.size_bytes()}, resident) {}
  static std::vector<int> order(const memo::subsequence_offload_plan& plan, bool reversed) {
    std::vector<int> out(plan.rows.size());
    for (std::size_t j = 0; j < out.size(); ++j) out[j] = static_cast<int>(reversed ? out.size() - 1 - j : j);
    return out;
  }
};

// The byte the forward of (layer, subsequence) writes into tensor t.
unsigned char pattern(std::int64_t layer, int j, std::size_t t) {
  return static_cast<unsigned char>(1 + 16 * layer + 4 * j + static_cast<int>(t));
}

// One whole step: every forward writes its pattern, every backward checks
// it from a task on the compute stream that first sleeps, so a refill or a
// next forward that did not wait for the compute stream would overwrite
// the slot before the check reads it.
void run_step(host_backend& backend, host_backend::stream& compute, swapper_type& swapper,
              const memo::subsequence_offload_plan& plan, std::int64_t layers, std::vector<int> forwards,
              std::vector<int> backwards, int& bad_rows) {
  for (const int j : forwards) {
    for (std::int64_t l = 0; l < layers; ++l) {
      const auto slices = swapper.begin_forward(l, j);
      for (std::size_t t = 0; t < slices.size(); ++t) {
        backend.memset_async(slices[t].data, pattern(l, j, t), slices[t].bytes(), compute);
      }
      swapper.end_forward(l, j);
    }
  }
  for (const int j : backwards) {
    for (std::int64_t l = layers - 1; l >= 0; --l) {
      const auto slices = swapper.begin_backward(l, j);
      for (std::size_t t = 0; t < slices.size(); ++t) {
        const auto* data = reinterpret_cast<const unsigned char*>(slices[t].data);
        const std::size_t bytes = slices[t].bytes();
        const unsigned char expected = pattern(l, j, t);
        CHECK(slices[t].tokens == static_cast<std::size_t>(plan.rows[static_cast<std::size_t>(j)]));
        backend.enqueue(compute, [=, &bad_rows](host_backend::native_stream) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          if (std::count(data, data + bytes, expected) != static_cast<long>(bytes)) ++bad_rows;
        });
      }
      swapper.end_backward(l, j);
    }
  }
  backend.synchronize(compute);
}

}  // namespace

TEST_CASE("subsequence_swapper: a slot is not refilled or rewritten while the compute stream still reads it") {
  host_backend backend;
  auto compute = backend.make_stream("compute");
  // Three subsequences, three layers: every slot is reused while the
  // previous unit's (sleeping) reader is still queued.
  const auto plan = memo::subsequence_offload_plan::from_alpha({4, 3, 2}, {1.0, 0.5, 0.0}, "test");
  const std::int64_t layers = 3;
  swapper_setup setup(backend, compute, plan, layers);
  swapper_type& swapper = setup.swapper;
  int bad_rows = 0;
  run_step(backend, compute, swapper, plan, layers, {0, 1, 2}, {2, 1, 0}, bad_rows);
  CHECK(bad_rows == 0);
  // Abandoned after part of a step, the next step runs whole and right.
  (void)swapper.begin_forward(0, 0);
  swapper.end_forward(0, 0);
  (void)swapper.begin_forward(1, 0);
  swapper.abandon();
  run_step(backend, compute, swapper, plan, layers, {0, 1, 2}, {2, 1, 0}, bad_rows);
  CHECK(bad_rows == 0);
  // And after a step abandoned in its backward.
  run_step(backend, compute, swapper, plan, layers, {0, 1, 2}, {}, bad_rows);
  swapper.abandon();
  run_step(backend, compute, swapper, plan, layers, {0, 1, 2}, {2, 1, 0}, bad_rows);
  CHECK(bad_rows == 0);
}

TEST_CASE("subsequence_swapper: orders that do not run each subsequence forward and backward once are errors") {
  host_backend backend;
  auto compute = backend.make_stream("compute");
  const auto plan = memo::subsequence_offload_plan::from_alpha({4, 2}, {0.5, 0.5}, "test");
  device_bytes slots(backend.device_memory(), swapper_type::slot_bytes(layout()));
  device_bytes kept(backend.device_memory(), swapper_type::kept_bytes(layout(), plan, 1));
  auto make = [&](std::vector<int> forwards, std::vector<int> backwards) {
    swapper_type s(backend, compute, layout(), plan, 1, std::move(forwards), std::move(backwards),
                   {slots.data(), slots.size_bytes()}, {kept.data(), kept.size_bytes()});
  };
  CHECK_THROWS_WITH_AS(make({}, {}), doctest::Contains("no subsequence to run"), memo::error);
  CHECK_THROWS_WITH_AS(make({0, 0}, {0, 0}), doctest::Contains("appears twice in the forward order"), memo::error);
  CHECK_THROWS_WITH_AS(make({0, 1}, {0, 0}), doctest::Contains("every forward subsequence exactly once"),
                       memo::error);
  CHECK_THROWS_WITH_AS(make({0, 1}, {1}), doctest::Contains("every forward subsequence exactly once"), memo::error);
  make({1, 0}, {0, 1});  // any permutation is fine
}

TEST_CASE("subsequence_swapper: a subsequence's rows come back to its backward through both stores") {
  host_backend backend;
  auto compute = backend.make_stream("compute");
  // Subsequences of 4 and 2 rows: half of the first and all of the second
  // go to the host; two layers.
  const auto plan = memo::subsequence_offload_plan::from_alpha({4, 2}, {0.5, 1.0}, "test");
  CHECK(plan.offloaded == std::vector<std::int64_t>{2, 2});
  CHECK(plan.kept_rows() == 2);
  const std::int64_t layers = 2;
  CHECK(swapper_type::host_bytes(layout(), plan, layers) == 2 * (2 + 2) * 20);
  CHECK(swapper_type::kept_bytes(layout(), plan, layers) == 2 * 2 * 20);
  swapper_setup setup(backend, compute, plan, layers);
  swapper_type& swapper = setup.swapper;
  CHECK(swapper.host_bytes() == 160);
  CHECK(swapper.units().size() == 8);
  for (int step = 0; step < 2; ++step) {
    CAPTURE(step);
    for (const int j : {0, 1}) {
      for (std::int64_t l = 0; l < layers; ++l) {
        const auto slices = swapper.begin_forward(l, j);
        for (std::size_t t = 0; t < slices.size(); ++t) {
          CHECK(slices[t].tokens == static_cast<std::size_t>(plan.rows[static_cast<std::size_t>(j)]));
          backend.memset_async(slices[t].data, pattern(l, j, t), slices[t].bytes(), compute);
        }
        swapper.end_forward(l, j);
      }
    }
    // Every backward unit lands in a slot that another unit used last.
    for (const int j : {1, 0}) {
      for (std::int64_t l = layers - 1; l >= 0; --l) {
        const auto slices = swapper.begin_backward(l, j);
        for (std::size_t t = 0; t < slices.size(); ++t) {
          std::vector<unsigned char> back(slices[t].bytes());
          backend.copy_async(back.data(), slices[t].data, back.size(), memo::copy_kind::device_to_host, compute);
          backend.synchronize(compute);
          CAPTURE(l);
          CAPTURE(j);
          CAPTURE(t);
          CHECK(std::count(back.begin(), back.end(), pattern(l, j, t)) == static_cast<long>(back.size()));
        }
        swapper.end_backward(l, j);
      }
    }
  }
  backend.synchronize(compute);
  CHECK(swapper.offloaded_bytes() == 2 * 160);
  CHECK(swapper.prefetched_bytes() == 2 * 160);
}

TEST_CASE("subsequence_swapper: a backward refills the next unit's slot while the compute stream runs it") {
  host_backend backend;
  auto compute = backend.make_stream("compute");
  // Half of the first subsequence, all of the second and none of the third
  // go to the host: refills from both stores, from the host alone and from
  // the device store alone.
  const auto plan = memo::subsequence_offload_plan::from_alpha({4, 3, 2}, {0.5, 1.0, 0.0}, "test");
  const std::int64_t layers = 2;
  swapper_setup setup(backend, compute, plan, layers);
  swapper_type& swapper = setup.swapper;
  const std::vector<swapper_type::unit> units = swapper.units();
  const std::size_t first_backward = units.size() / 2;
  const std::uint64_t row = swapper_type::row_bytes(layout());
  const memo::skeletal_layout tensors = layout();

  // Between the copy stream and the compute stream. For backward unit u
  // (not the last), a task on the copy stream, enqueued right after
  // begin_backward(u), checks unit u + 1's slot and marks checked[u]; a
  // task on the compute stream, in unit u's backward, waits for that mark.
  // If the refill of u + 1 was issued by begin_backward(u), it is ahead of
  // the check on the copy stream and needs nothing the compute stream does
  // after unit u - 1, so the mark comes while the compute stream is held in
  // unit u and the slot holds u + 1's forward bytes. Without it the slot
  // still holds an earlier unit's bytes (stale). A mark that never comes
  // fails the test after the timeout instead of hanging it, and the later
  // waits then give up at once.
  struct copy_seen {
    std::mutex mutex;
    std::condition_variable marked;
    std::vector<char> checked;  // [unit]
    int stale = 0;              // checks that found other bytes than the next unit's forward wrote
    int missed = 0;             // compute tasks whose mark did not come in time
    bool gave_up = false;
  } seen;
  seen.checked.assign(units.size(), 0);

  for (int step = 0; step < 2; ++step) {
    CAPTURE(step);
    // Unit u runs in slot u % 2, whose tensors start where the forwards of
    // units 0 and 1 were given them.
    std::vector<std::byte*> slot_data[2];
    for (std::size_t u = 0; u < first_backward; ++u) {
      const auto slices = swapper.begin_forward(units[u].layer, units[u].subsequence);
      for (std::size_t t = 0; t < slices.size(); ++t) {
        if (u < 2) slot_data[u].push_back(slices[t].data);
        backend.memset_async(slices[t].data, pattern(units[u].layer, units[u].subsequence, t), slices[t].bytes(),
                             compute);
      }
      swapper.end_forward(units[u].layer, units[u].subsequence);
    }
    const std::uint64_t prefetched_before = swapper.prefetched_bytes();
    std::uint64_t issued = 0;  // host bytes of the backward units whose refill is due
    for (std::size_t u = first_backward; u < units.size(); ++u) {
      CAPTURE(u);
      (void)swapper.begin_backward(units[u].layer, units[u].subsequence);
      // Copies are counted when issued: this unit's and the next one's.
      for (std::size_t w = u == first_backward ? u : u + 1; w <= u + 1 && w < units.size(); ++w) {
        issued += static_cast<std::uint64_t>(plan.offloaded[static_cast<std::size_t>(units[w].subsequence)]) * row;
      }
      CHECK(swapper.prefetched_bytes() - prefetched_before == issued);
      if (u + 1 < units.size()) {
        const swapper_type::unit next = units[u + 1];
        const auto rows = static_cast<std::size_t>(plan.rows[static_cast<std::size_t>(next.subsequence)]);
        std::vector<std::size_t> bytes_of;  // [tensor]: unit u + 1's bytes of it
        for (const auto& t : tensors.tensors()) bytes_of.push_back(rows * t.bytes_per_token);
        // Reading the slot on the copy stream is not a race: its last
        // writer was a refill on that stream or a forward the copy stream
        // waited for before copying it out, the compute stream's backwards
        // only read, and its next writer is a later refill on that stream
        // or a forward of the next step, after the step's end.
        backend.enqueue(swapper.copy_stream(), [&seen, u, next, bytes_of, data = slot_data[(u + 1) % 2]] {
          bool fresh = true;
          for (std::size_t t = 0; t < data.size(); ++t) {
            const auto* bytes = reinterpret_cast<const unsigned char*>(data[t]);
            fresh = fresh && std::count(bytes, bytes + bytes_of[t], pattern(next.layer, next.subsequence, t)) ==
                                 static_cast<long>(bytes_of[t]);
          }
          const std::lock_guard lock(seen.mutex);
          if (!fresh) ++seen.stale;
          seen.checked[u] = 1;
          seen.marked.notify_all();
        });
        backend.enqueue(compute, [&seen, u] {
          std::unique_lock lock(seen.mutex);
          seen.marked.wait_for(lock, std::chrono::seconds(10), [&] { return seen.checked[u] != 0 || seen.gave_up; });
          if (seen.checked[u] == 0) {
            ++seen.missed;
            seen.gave_up = true;
          }
        });
      }
      swapper.end_backward(units[u].layer, units[u].subsequence);
    }
    // The step's end on the compute stream follows every copy-stream task.
    backend.synchronize(compute);
    const std::lock_guard lock(seen.mutex);
    CHECK(seen.stale == 0);
    CHECK(seen.missed == 0);
    CHECK(std::count(seen.checked.begin(), seen.checked.end(), 1) == static_cast<long>(units.size() / 2 - 1));
    CHECK(issued == 2 * (2 + 3 + 0) * row);
    seen.checked.assign(units.size(), 0);
    seen.stale = 0, seen.missed = 0;
  }
}

TEST_CASE("subsequence_swapper: units out of order and bad ratios are errors") {
  host_backend backend;
  auto compute = backend.make_stream("compute");
  const auto plan = memo::subsequence_offload_plan::from_alpha({4, 2}, {0.0, 0.0}, "test");
  swapper_setup setup(backend, compute, plan, 1);
  swapper_type& swapper = setup.swapper;
  CHECK(swapper.host_bytes() == 0);
  CHECK_THROWS_WITH_AS((void)swapper.begin_backward(0, 1), doctest::Contains("out of order"), memo::error);
  CHECK_THROWS_WITH_AS((void)swapper.begin_forward(0, 1),
                       doctest::Contains("expected the start of the forward of layer 0, subsequence 0"), memo::error);
  (void)swapper.begin_forward(0, 0);
  CHECK_THROWS_WITH_AS(swapper.end_forward(0, 1), doctest::Contains("without its begin"), memo::error);
  swapper.abandon();  // the next step starts clean
  (void)swapper.begin_forward(0, 0);
  swapper.end_forward(0, 0);
  swapper.abandon();

  // Rounding: round(alpha n) rows.
  const auto rounded = memo::subsequence_offload_plan::from_alpha({5, 3, 8}, {0.5, 0.5, 0.3}, "test");
  CHECK(rounded.offloaded == std::vector<std::int64_t>{3, 2, 2});
  CHECK_THROWS_WITH_AS(memo::subsequence_offload_plan::from_alpha({4, 4}, {0.5, -1.0}, "who"),
                       doctest::Contains("who: offload ratio 1 is -1.0"), memo::error);
  CHECK_THROWS_WITH_AS(memo::subsequence_offload_plan::from_alpha({4, 4}, {std::nan("")}, "who"),
                       doctest::Contains("who: 1 offload ratios given for 2 subsequences"), memo::error);
  CHECK_THROWS_WITH_AS(memo::subsequence_offload_plan::from_alpha({4, 4}, {std::nan(""), 0.0}, "who"),
                       doctest::Contains("offload ratio 0 is nan"), memo::error);
}

TEST_CASE("subsequence_swapper: resident units are the last forwards whose backwards come next") {
  using unit = swapper_type::unit;
  auto pairs = [](const std::vector<unit>& units) {
    std::vector<std::pair<std::int64_t, int>> out;
    for (const unit& u : units) out.emplace_back(u.layer, u.subsequence);
    return out;
  };
  using list = std::vector<std::pair<std::int64_t, int>>;
  // Two layers: the last subsequence's layers 1 and 0.
  CHECK(pairs(swapper_type::resident_units({0, 1, 2}, {2, 1, 0}, 2, 2)) == list{{1, 2}, {0, 2}});
  CHECK(pairs(swapper_type::resident_units({0, 1, 2}, {2, 1, 0}, 2, 1)) == list{{1, 2}});
  CHECK(pairs(swapper_type::resident_units({0, 1, 2}, {2, 1, 0}, 2, 0)).empty());
  // One layer: the last two subsequences.
  CHECK(pairs(swapper_type::resident_units({0, 1, 2}, {2, 1, 0}, 1, 2)) == list{{0, 2}, {0, 1}});
  // One unit in all.
  CHECK(pairs(swapper_type::resident_units({0}, {0}, 1, 2)) == list{{0, 0}});
  // A backward that does not start with the last forward keeps nothing;
  // one whose second unit is not the mirror keeps one.
  CHECK(pairs(swapper_type::resident_units({0, 1, 2}, {1, 2, 0}, 2, 2)).empty());
  CHECK(pairs(swapper_type::resident_units({0, 1, 2}, {2, 0, 1}, 1, 2)) == list{{0, 2}});
  CHECK_THROWS_WITH_AS((void)swapper_type::resident_units({0}, {0}, 1, 3), doctest::Contains("0 to 2"), memo::error);

  // The stores lose exactly the resident units' rows: subsequences of 4
  // and 2 rows, 2 and 2 of them offloaded, two layers, 20 bytes a row.
  const auto plan = memo::subsequence_offload_plan::from_alpha({4, 2}, {0.5, 1.0}, "test");
  const auto resident = swapper_type::resident_units({0, 1}, {1, 0}, 2, 2);  // both layers of subsequence 1
  CHECK(swapper_type::host_bytes(layout(), plan, 2, resident) == (2 * (2 + 2) - 2 * 2) * 20);
  CHECK(swapper_type::kept_bytes(layout(), plan, 2, resident) == 2 * 2 * 20);  // subsequence 1 kept nothing
  const auto one_layer = swapper_type::resident_units({0, 1}, {1, 0}, 1, 2);   // every unit of a one-layer stage
  CHECK(swapper_type::host_bytes(layout(), plan, 1, one_layer) == 0);
  CHECK(swapper_type::kept_bytes(layout(), plan, 1, one_layer) == 0);
  CHECK_THROWS_WITH_AS((void)swapper_type::kept_bytes(layout(), plan, 2, {{0, 1, true}, {0, 1, true}}),
                       doctest::Contains("listed twice"), memo::error);
  CHECK_THROWS_WITH_AS((void)swapper_type::kept_bytes(layout(), plan, 2, {{2, 0, true}}),
                       doctest::Contains("not one of 2 layers x 2 subsequences"), memo::error);
}

TEST_CASE("subsequence_swapper: resident units come back from their slots, the others through the stores") {
  host_backend backend;
  auto compute = backend.make_stream("compute");
  const std::uint64_t row = swapper_type::row_bytes(layout());
  struct setting {
    std::vector<std::int64_t> rows;
    std::vector<double> alpha;
    std::int64_t layers;
  };
  const setting settings[] = {{{4, 3, 2}, {1.0, 0.5, 0.5}, 3},
                              {{4, 3, 2}, {0.0, 1.0, 1.0}, 1},
                              {{4, 2}, {0.5, 1.0}, 2},
                              {{4}, {1.0}, 1},
                              {{4}, {0.5}, 2}};
  for (const setting& s : settings) {
    for (const int resident : {1, 2}) {
      CAPTURE(s.layers);
      CAPTURE(s.rows.size());
      CAPTURE(resident);
      const auto plan = memo::subsequence_offload_plan::from_alpha(s.rows, s.alpha, "test");
      swapper_setup setup(backend, compute, plan, s.layers, resident);
      swapper_type& swapper = setup.swapper;
      // Counted here, independently: the last `resident` units of the
      // forward (subsequences in order, layers ascending) move nothing.
      const auto n = static_cast<std::int64_t>(s.rows.size());
      const std::int64_t units = n * s.layers;
      const std::int64_t stay = std::min<std::int64_t>(resident, units);
      CHECK(swapper.resident() == static_cast<std::size_t>(stay));
      std::uint64_t host_rows = 0;
      for (std::int64_t u = 0; u < units - stay; ++u) {
        host_rows += static_cast<std::uint64_t>(plan.offloaded[static_cast<std::size_t>(u / s.layers)]);
      }
      CHECK(swapper.host_bytes() == host_rows * row);
      // Slots alternate in the forward; a resident unit's backward runs in
      // its forward's slot (the first backward unit mirrors the last
      // forward one).
      const std::size_t forwards = swapper.units().size() / 2;
      for (std::size_t k = 0; k < static_cast<std::size_t>(stay); ++k) {
        CHECK(swapper.slot_of(forwards + k) == swapper.slot_of(forwards - 1 - k));
      }
      for (std::size_t u = 1; u < swapper.units().size(); ++u) {
        if (u != forwards) CHECK(swapper.slot_of(u) != swapper.slot_of(u - 1));
      }
      int bad_rows = 0;
      for (int step = 0; step < 2; ++step) {
        std::vector<int> fw(s.rows.size()), bw(s.rows.size());
        for (std::size_t j = 0; j < fw.size(); ++j) fw[j] = static_cast<int>(j), bw[j] = static_cast<int>(fw.size() - 1 - j);
        run_step(backend, compute, swapper, plan, s.layers, fw, bw, bad_rows);
      }
      CHECK(bad_rows == 0);
      CHECK(swapper.offloaded_bytes() == 2 * host_rows * row);
      CHECK(swapper.prefetched_bytes() == 2 * host_rows * row);
      // Abandoned with the resident units' slots still held, the next step
      // runs whole and right.
      for (std::size_t u = 0; u < forwards; ++u) {
        const auto& w = swapper.units()[u];
        (void)swapper.begin_forward(w.layer, w.subsequence);
        swapper.end_forward(w.layer, w.subsequence);
      }
      swapper.abandon();
      std::vector<int> fw(s.rows.size()), bw(s.rows.size());
      for (std::size_t j = 0; j < fw.size(); ++j) fw[j] = static_cast<int>(j), bw[j] = static_cast<int>(fw.size() - 1 - j);
      run_step(backend, compute, swapper, plan, s.layers, fw, bw, bad_rows);
      CHECK(bad_rows == 0);
    }
  }
}
