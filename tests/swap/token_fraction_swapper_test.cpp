// Tests of memo/swap/token_fraction_swapper.hpp on the host backend with a
// throttled copy engine (slow copies make any missing wait visible as wrong
// bytes, and ThreadSanitizer sees it as a race).
#include "memo/swap/token_fraction_swapper.hpp"

#include <doctest/doctest.h>

#include <memory>

#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <random>
#include <string>
#include <vector>

#include "memo/backend/host_backend.hpp"
#include "memo/schedule/memo_step.hpp"

#include "../schedule/schedule_test_helpers.hpp"
#include "../support/recording_backend.hpp"

namespace {

using memo::host_backend;
using memo::skeletal_policy;
using swapper_type = memo::token_fraction_swapper<host_backend>;

constexpr std::size_t kTokens = 64;

// input and attn_out are random per (step, layer); every other tensor is a
// token-wise function of them, as in a transformer layer.
memo::skeletal_layout test_layout() {
  return memo::skeletal_layout({
      {"input", kTokens, 16, skeletal_policy::offload_whole},
      {"attn_out", kTokens, 16, skeletal_policy::offload_whole},
      {"qkv", kTokens, 24, skeletal_policy::offload_fraction},
      {"mlp", kTokens, 40, skeletal_policy::offload_fraction},
      {"norm", kTokens, 8, skeletal_policy::recompute},
  });
}

// Sizes that are not multiples of the 256-byte alignment, so slices and
// host slots have padding between them that copies may merge across.
memo::skeletal_layout odd_layout() {
  return memo::skeletal_layout({
      {"input", 50, 16, skeletal_policy::offload_whole},
      {"attn_out", 50, 16, skeletal_policy::offload_whole},
      {"qkv", 50, 20, skeletal_policy::offload_fraction},
      {"mlp", 50, 36, skeletal_policy::offload_fraction},
      {"norm", 50, 6, skeletal_policy::recompute},
  });
}

std::byte derived_byte(const std::byte* input_row, const std::byte* attn_row, std::size_t tensor,
                       std::size_t b) {
  std::uint32_t h = 2166136261u ^ static_cast<std::uint32_t>(tensor * 131 + b);
  for (std::size_t k = 0; k < 16; ++k) {
    h = (h ^ static_cast<std::uint32_t>(input_row[k])) * 16777619u;
    h = (h ^ static_cast<std::uint32_t>(attn_row[(k + b) % 16])) * 16777619u;
  }
  return static_cast<std::byte>(h >> 13);
}

// Writes tensor `t`'s tokens [begin, end) from the layer's input and attn_out.
void derive(const memo::skeletal_views& views, std::size_t t, memo::token_range range) {
  const auto& input = views[0];
  const auto& attn = views[1];
  const auto& out = views[t];
  for (std::size_t token = range.begin; token < range.end; ++token) {
    for (std::size_t b = 0; b < out.bytes_per_token; ++b) {
      out.token(token)[b] = derived_byte(input.token(token), attn.token(token), t, b);
    }
  }
}

// Writes every layer's skeletal tensors in forward (input and attn_out
// random per (step, layer), the rest derived from them) and compares, inside
// every backward, each byte with the copy its forward made. Counters are
// touched on the compute thread only; read them after synchronising.
struct step_checker {
  explicit step_checker(std::size_t layers, std::size_t tensors)
      : expected(layers, std::vector<std::vector<std::byte>>(tensors)) {}

  void forward(swapper_type& swapper, host_backend& backend, host_backend::stream& compute, std::size_t layer,
               std::size_t step) {
    auto views = swapper.begin_forward(layer);
    backend.enqueue(compute, [this, views, layer, step] {
      std::mt19937 random(static_cast<unsigned>(step * 1000 + layer));
      for (std::size_t t = 0; t < 2; ++t) {
        for (std::size_t b = 0; b < views[t].bytes(); ++b) views[t].data[b] = static_cast<std::byte>(random() & 0xff);
      }
      for (std::size_t t = 2; t < views.size(); ++t) derive(views, t, {0, views[t].tokens});
      for (std::size_t t = 0; t < views.size(); ++t) {
        expected[layer][t].assign(views[t].data, views[t].data + views[t].bytes());
      }
    });
    swapper.end_forward(layer);
  }

  void backward(swapper_type& swapper, host_backend& backend, host_backend::stream& compute, std::size_t layer) {
    auto recompute = [](host_backend::native_stream, const memo::recompute_request& request) {
      for (const auto& item : request.items) derive(request.views, item.tensor, item.tokens);
    };
    auto views = swapper.begin_backward(layer, recompute);
    backend.enqueue(compute, [this, views, layer] {
      for (std::size_t t = 0; t < views.size(); ++t) {
        for (std::size_t b = 0; b < views[t].bytes(); ++b) {
          mismatched += views[t].data[b] != expected[layer][t][b] ? 1 : 0;
          ++checked;
        }
        // Scribble: stale bytes must never pass for the next user's.
        std::memset(views[t].data, 0xEE, views[t].bytes());
      }
    });
    swapper.end_backward(layer);
  }

  void step(swapper_type& swapper, host_backend& backend, host_backend::stream& compute, std::size_t step) {
    for (std::size_t layer = 0; layer < swapper.layers(); ++layer) forward(swapper, backend, compute, layer, step);
    for (std::size_t layer = swapper.layers(); layer-- > 0;) backward(swapper, backend, compute, layer);
  }

  std::vector<std::vector<std::vector<std::byte>>> expected;  // [layer][tensor] what the forward wrote
  std::size_t mismatched = 0;
  std::size_t checked = 0;
};

// A backend, a compute stream, and rounding buffers (K = 2) and a 1 MiB host
// store for test_layout() at `alpha`.
struct swap_setup {
  explicit swap_setup(double alpha) : plan(test_layout(), alpha) {}
  host_backend backend;
  host_backend::stream compute = backend.make_stream("compute");
  memo::offload_plan plan;
  memo::rounding_buffers<host_backend> buffers{backend, plan};
  memo::host_store<host_backend> store{backend, memo::mib};
};

struct run_result {
  std::size_t mismatched_bytes = 0;
  std::size_t checked_bytes = 0;
  std::uint64_t device_peak_bytes = 0;
  std::uint64_t planned_device_bytes = 0;
  std::uint64_t offloaded_bytes = 0;
  std::uint64_t expected_offloaded_bytes = 0;
};

// Runs `steps` training steps of an n-layer model through a step_checker.
run_result run_model(std::size_t layers, double alpha, std::size_t k, std::size_t granularity,
                     std::size_t steps, const memo::skeletal_layout& layout_in = test_layout()) {
  host_backend::options config;
  config.host_to_device_bytes_per_second = 4e6;  // ~1.5 ms per layer's offload
  config.device_to_host_bytes_per_second = 4e6;
  host_backend backend(config);
  auto compute = backend.make_stream("compute");
  memo::offload_plan plan(layout_in, alpha, granularity);
  memo::rounding_buffers<host_backend> buffers(backend, plan, k);
  memo::host_store<host_backend> store(backend, 64 * memo::mib);
  run_result result;
  {
    swapper_type swapper(backend, compute, buffers, store, {layers, 2, 0});
    step_checker checker(layers, plan.layout().size());
    for (std::size_t step = 0; step < steps; ++step) checker.step(swapper, backend, compute, step);
    swapper.synchronize();
    result.mismatched_bytes = checker.mismatched;
    result.checked_bytes = checker.checked;
    result.offloaded_bytes = swapper.offloaded_bytes();
    CHECK(swapper.prefetched_bytes() == swapper.offloaded_bytes());
  }
  result.device_peak_bytes = backend.device_memory().peak_bytes();
  result.planned_device_bytes = buffers.planned_device_bytes();
  result.expected_offloaded_bytes = steps * (layers - 2) * plan.offloaded_bytes_per_layer();
  return result;
}

}  // namespace

TEST_CASE("token_fraction_swapper: every backward sees the bytes its forward produced") {
  for (const double alpha : {0.0, 0.125, 0.25, 0.5, 1.0}) {
    for (const std::size_t k : {std::size_t{2}, std::size_t{3}}) {
      CAPTURE(alpha);
      CAPTURE(k);
      const std::size_t layers = 7;
      const auto result = run_model(layers, alpha, k, alpha == 0.25 ? 8 : 1, 2);
      CHECK(result.checked_bytes == 2 * layers * test_layout().layer_bytes());
      CHECK(result.mismatched_bytes == 0);
      CHECK(result.offloaded_bytes == result.expected_offloaded_bytes);
      // The run allocates device memory only through the rounding buffers.
      CHECK(result.device_peak_bytes == result.planned_device_bytes);
    }
  }
}

TEST_CASE("token_fraction_swapper: padding between slices and one-token tails lose no byte") {
  // alpha = 0.98 of 50 tokens offloads 49: the discarded tail of qkv and mlp
  // is one token, inside the same 256-byte block as the offloaded prefix.
  for (const double alpha : {0.0, 0.5, 0.98, 1.0}) {
    for (const std::size_t k : {std::size_t{2}, std::size_t{3}}) {
      CAPTURE(alpha);
      CAPTURE(k);
      const auto result = run_model(6, alpha, k, 1, 2, odd_layout());
      CHECK(result.checked_bytes == 2 * 6 * odd_layout().layer_bytes());
      CHECK(result.mismatched_bytes == 0);
      CHECK(result.offloaded_bytes == result.expected_offloaded_bytes);
      CHECK(result.device_peak_bytes == result.planned_device_bytes);
    }
  }
}

TEST_CASE("token_fraction_swapper: device peak of a swapped run equals the hand-computed plan") {
  // alpha = 0: input and attn_out (1024 bytes each) are in the K rounding
  // buffers; qkv (1536), mlp (2560) and norm (512) share one region.
  const auto zero = run_model(5, 0.0, 2, 1, 1);
  CHECK(zero.device_peak_bytes == 2 * (1024 + 1024) + (1536 + 2560 + 512));
  CHECK(zero.mismatched_bytes == 0);
  // alpha = 1/2: qkv and mlp move into the rounding buffers, norm stays shared.
  const auto half = run_model(5, 0.5, 2, 1, 1);
  CHECK(half.device_peak_bytes == 2 * (1024 + 1024 + 1536 + 2560) + 512);
  // alpha = 1, K = 3.
  const auto whole = run_model(5, 1.0, 3, 1, 1);
  CHECK(whole.device_peak_bytes == 3 * (1024 + 1024 + 1536 + 2560) + 512);
}

TEST_CASE("token_fraction_swapper: fewer layers than resident layers swap nothing") {
  const auto result = run_model(2, 1.0, 2, 1, 2);
  CHECK(result.mismatched_bytes == 0);
  CHECK(result.offloaded_bytes == 0);
}

TEST_CASE("token_fraction_swapper: layers out of step order are an error") {
  host_backend backend;
  auto compute = backend.make_stream("compute");
  memo::offload_plan plan(test_layout(), 0.5);
  memo::rounding_buffers<host_backend> buffers(backend, plan);
  memo::host_store<host_backend> store(backend, memo::mib);
  CHECK_THROWS_WITH_AS((swapper_type(backend, compute, buffers, store, {4, 3, 0})),
                       doctest::Contains("3 resident last layers need as many rounding buffers, but K = 2"),
                       memo::error);
  CHECK_THROWS_AS((swapper_type(backend, compute, buffers, store, {0, 2, 0})), memo::error);
  CHECK(store.slot_count() == 0);
  swapper_type swapper(backend, compute, buffers, store, {4, 2, 0});
  CHECK_THROWS_AS((void)swapper.begin_forward(1), memo::error);
  CHECK_THROWS_AS((void)swapper.begin_backward(0, {}), memo::error);
  (void)swapper.begin_forward(0);
  CHECK_THROWS_AS(swapper.end_forward(1), memo::error);
  CHECK_THROWS_AS((void)swapper.begin_forward(0), memo::error);
  swapper.end_forward(0);
  swapper.synchronize();
}

TEST_CASE("token_fraction_swapper: missing recompute function is an error") {
  host_backend backend;
  auto compute = backend.make_stream("compute");
  memo::offload_plan plan(test_layout(), 0.5);
  memo::rounding_buffers<host_backend> buffers(backend, plan);
  memo::host_store<host_backend> store(backend, memo::mib);
  swapper_type swapper(backend, compute, buffers, store, {3, 2, 0});
  for (std::size_t layer = 0; layer < 3; ++layer) {
    (void)swapper.begin_forward(layer);
    swapper.end_forward(layer);
  }
  // Layer 2 is resident and the shared region still holds its values.
  (void)swapper.begin_backward(2, {});
  swapper.end_backward(2);
  // Layer 1 is resident, but the shared region holds layer 2's norm.
  CHECK_THROWS_WITH_AS((void)swapper.begin_backward(1, {}),
                       doctest::Contains("no recompute function"), memo::error);
  swapper.synchronize();
}

TEST_CASE("token_fraction_swapper: host budget, alpha and layout errors lose nothing stored") {
  host_backend::options config;
  config.device_to_host_bytes_per_second = 4e6;
  config.host_to_device_bytes_per_second = 4e6;
  host_backend backend(config);
  auto compute = backend.make_stream("compute");
  const std::size_t layers = 5;
  memo::offload_plan plan(test_layout(), 1.0);
  // Budget: exactly the 3 swapped layers of this plan (tensors are 256-aligned).
  const std::uint64_t budget = 3 * (1024 + 1024 + 1536 + 2560);
  memo::rounding_buffers<host_backend> buffers(backend, plan);
  memo::host_store<host_backend> store(backend, budget);
  swapper_type swapper(backend, compute, buffers, store, {layers, 2, 0});
  CHECK(store.used_bytes() == budget);

  // Forward with known bytes; the offload lands in the store.
  std::vector<std::vector<std::byte>> written(layers);
  for (std::size_t layer = 0; layer < layers; ++layer) {
    auto views = swapper.begin_forward(layer);
    backend.enqueue(compute, [&written, views, layer] {
      for (std::size_t t = 0; t < views.size(); ++t) {
        for (std::size_t b = 0; b < views[t].bytes(); ++b) {
          views[t].data[b] = static_cast<std::byte>((layer * 7 + t * 3 + b) & 0xff);
        }
        written[layer].insert(written[layer].end(), views[t].data, views[t].data + views[t].bytes());
      }
    });
    swapper.end_forward(layer);
  }
  backend.synchronize(swapper.offload_stream());

  // Each failing request happens now, between forward and backward.
  memo::rounding_buffers<host_backend> more(backend, plan);
  const std::string budget_message =
      "exceeding the host-memory budget of " + std::to_string(budget) + " bytes";
  CHECK_THROWS_WITH_AS((swapper_type(backend, compute, more, store, {layers, 2, 100})),
                       doctest::Contains(budget_message.c_str()),
                       memo::error);
  CHECK_THROWS_WITH_AS(memo::offload_plan(test_layout(), 1.5),
                       doctest::Contains("alpha must be in [0, 1], got 1.5"), memo::error);
  CHECK_THROWS_AS(memo::offload_plan(test_layout(), -0.25), memo::error);
  auto other_tensors = test_layout().tensors();
  other_tensors[2].bytes_per_token = 32;  // same names, different bytes
  memo::rounding_buffers<host_backend> mismatched(
      backend, memo::offload_plan(memo::skeletal_layout(other_tensors), 1.0));
  memo::host_store<host_backend> roomy(backend, memo::gib);
  CHECK_THROWS_WITH_AS((swapper_type(backend, compute, mismatched, store, {layers, 2, 0})),
                       doctest::Contains("mismatched layouts"), memo::error);
  CHECK(store.used_bytes() == budget);
  CHECK(store.slot_count() == 3 * 4);

  // Backward still sees every byte of every layer.
  std::vector<std::size_t> mismatches(layers, 0);
  auto recompute = [](host_backend::native_stream, const memo::recompute_request& request) {
    // alpha = 1: only the shared `norm` of the layers that lost it.
    for (const auto& item : request.items) {
      const auto& out = request.views[item.tensor];
      for (std::size_t token = item.tokens.begin; token < item.tokens.end; ++token) {
        for (std::size_t b = 0; b < out.bytes_per_token; ++b) {
          const std::size_t byte = token * out.bytes_per_token + b;
          out.data[byte] = static_cast<std::byte>((request.layer * 7 + item.tensor * 3 + byte) & 0xff);
        }
      }
    }
  };
  for (std::size_t layer = layers; layer-- > 0;) {
    auto views = swapper.begin_backward(layer, recompute);
    backend.enqueue(compute, [&written, &mismatches, views, layer] {
      std::size_t offset = 0;
      for (std::size_t t = 0; t < views.size(); ++t) {
        for (std::size_t b = 0; b < views[t].bytes(); ++b) {
          mismatches[layer] += views[t].data[b] != written[layer][offset++] ? 1 : 0;
        }
        std::memset(views[t].data, 0xEE, views[t].bytes());
      }
    });
    swapper.end_backward(layer);
  }
  swapper.synchronize();
  for (std::size_t layer = 0; layer < layers; ++layer) {
    CAPTURE(layer);
    CHECK(mismatches[layer] == 0);
  }
}

TEST_CASE("token_fraction_swapper: its backend calls are the simulated memo step, op for op") {
  // The swapper runs on a backend that logs every record, wait, copy and
  // enqueue per stream. The log is turned into ops independently of the
  // protocol: copies are named by the host slot they touch ("offload 3" is
  // a device-to-host copy into layer 3's slots), compute work by the call it
  // was issued from (an enqueue inside begin_backward(i) is "recompute i").
  // Each wait stands for the op that was last on the recording stream when
  // its event was recorded. Then, for every n, K, resident_last_layers and
  // alpha below, the per-stream op order and the happens-before relation
  // must equal those of build_memo_step's schedule, the one the simulator
  // runs.
  using recording = memo::testing::recording_backend<host_backend>;
  using recording_swapper = memo::token_fraction_swapper<recording>;
  const memo::skeletal_layout layout({
      {"input", kTokens, 16, skeletal_policy::offload_whole},
      {"attn_out", kTokens, 16, skeletal_policy::offload_whole},
      {"qkv", kTokens, 24, skeletal_policy::offload_fraction},
      {"mlp", kTokens, 40, skeletal_policy::offload_fraction},
  });
  std::size_t runs = 0;
  for (const std::size_t n : {1, 2, 3, 4, 5, 7}) {
    for (const std::size_t k : {2, 3}) {
      for (std::size_t resident = 0; resident <= std::min(k, n); ++resident) {
        for (const double alpha : {0.0, 0.5, 1.0}) {
          CAPTURE(n);
          CAPTURE(k);
          CAPTURE(resident);
          CAPTURE(alpha);
          host_backend inner;
          recording backend(inner);
          auto compute = backend.make_stream("compute");
          const memo::offload_plan plan(layout, alpha);
          memo::rounding_buffers<recording> buffers(backend, plan, k);
          memo::host_store<recording> store(backend, 64 * memo::mib);
          recording_swapper swapper(backend, compute, buffers, store, {n, resident, 0});
          REQUIRE(backend.stream_names() == std::vector<std::string>{"compute", "offload", "prefetch"});

          // The same step as numbers, for the simulator.
          memo::memo_step_config config;
          config.layers = static_cast<int>(n);
          config.alpha = alpha;
          config.rounding_buffers = static_cast<int>(k);
          config.resident_last_layers = static_cast<int>(resident);
          config.layer_forward_flops = 1000.0;
          config.recompute_flops = 500.0;
          config.input_bytes = layout[0].bytes();
          config.attention_output_bytes = layout[1].bytes();
          config.other_bytes = layout[2].bytes() + layout[3].bytes();
          const auto options = config.protocol_options();
          CHECK(options.recompute_swapped == swapper.protocol_options().recompute_swapped);
          CHECK(options.recompute_shared == swapper.protocol_options().recompute_shared);
          const auto step = memo::build_memo_step(config);

          auto recompute = [](host_backend::native_stream, const memo::recompute_request&) {};
          for (std::size_t i = 0; i < n; ++i) {
            backend.set_label("begin_forward");
            (void)swapper.begin_forward(i);
            backend.set_label("forward " + std::to_string(i));
            backend.enqueue(compute, [] {});
            backend.set_label("end_forward");
            swapper.end_forward(i);
          }
          for (std::size_t i = n; i-- > 0;) {
            backend.set_label("recompute " + std::to_string(i));  // what begin_backward enqueues
            (void)swapper.begin_backward(i, recompute);
            backend.set_label("backward " + std::to_string(i));
            backend.enqueue(compute, [] {});
            backend.set_label("end_backward");
            swapper.end_backward(i);
          }
          swapper.synchronize();

          // Host slot address -> layer.
          auto layer_of = [&](const void* address) {
            const auto* byte = static_cast<const std::byte*>(address);
            for (const auto& request : memo::host_slots_for(plan, swapper.swapped_layers())) {
              const std::byte* slot = store.slot(request.key);
              if (byte >= slot && byte < slot + request.bytes) return std::to_string(request.key.layer);
            }
            return std::string("?");
          };
          const auto executed = memo::testing::replay(backend.calls(), 3, [&](const memo::testing::recorded_call& call) {
            if (call.stream == 1 && call.kind == memo::testing::call_kind::copy) return "offload " + layer_of(call.destination);
            if (call.stream == 2 && call.kind == memo::testing::call_kind::copy) return "prefetch " + layer_of(call.source);
            return call.stream == 0 ? call.label : "unexpected " + call.label;
          });
          const auto simulated = memo::testing::ops_of(step.schedule);
          CHECK(executed.order == simulated.order);
          CHECK(memo::testing::happens_before(executed) == memo::testing::happens_before(simulated));
          // The simulator runs every stream in that order too.
          CHECK(step.schedule.simulate(memo::testing::unit_profile()).op_order_per_stream() == simulated.order);
          ++runs;
        }
      }
    }
  }
  // resident_last_layers in [0, min(K, n)]: (2 + 2) + (3 + 3) + 4 x (3 + 4) = 38 shapes, 3 alphas each.
  CHECK(runs == 38 * 3);
}

TEST_CASE("token_fraction_swapper: a destroyed swapper returns its host slots and its buffers") {
  swap_setup setup(0.5);
  auto& [backend, compute, plan, buffers, store] = setup;
  {
    swapper_type first(backend, compute, buffers, store, {5, 2, 0});
    CHECK(store.slot_count() == 3 * 4);
    CHECK(buffers.claimed());
    // Destroyed mid-step, holding buffers: they come back, unpoisoned.
    (void)first.begin_forward(0);
    first.end_forward(0);
    (void)first.begin_forward(1);
  }
  CHECK(store.slot_count() == 0);
  CHECK(store.used_bytes() == 0);
  CHECK(!buffers.claimed());
  CHECK(!buffers.leased(0));
  CHECK(!buffers.leased(1));
  // The next swapper takes the same slots and buffers and runs correct steps.
  swapper_type second(backend, compute, buffers, store, {5, 2, 0});
  step_checker checker(5, test_layout().size());
  for (std::size_t step = 0; step < 2; ++step) checker.step(second, backend, compute, step);
  second.synchronize();
  CHECK(checker.checked == 2 * 5 * test_layout().layer_bytes());
  CHECK(checker.mismatched == 0);
}

TEST_CASE("token_fraction_swapper: a step after its host store or buffers are gone is an error, and its end touches neither") {
  // The store and the buffers must outlive the swapper; one that does not
  // is reported at the next step, and the swapper's destructor then leaves
  // it alone (AddressSanitizer checks that in the sanitizer build).
  for (const bool store_first : {true, false}) {
    CAPTURE(store_first);
    host_backend backend;
    auto compute = backend.make_stream("compute");
    const memo::offload_plan plan(test_layout(), 0.5);
    auto buffers = std::make_unique<memo::rounding_buffers<host_backend>>(backend, plan);
    auto store = std::make_unique<memo::host_store<host_backend>>(backend, memo::mib);
    auto swapper = std::make_unique<swapper_type>(backend, compute, *buffers, *store, memo::swap_options{5, 2, 0});
    (void)swapper->begin_forward(0);
    swapper->end_forward(0);
    swapper->synchronize();
    if (store_first) {
      store.reset();
    } else {
      buffers.reset();
    }
    CHECK_THROWS_WITH_AS((void)swapper->begin_forward(1),
                         doctest::Contains(store_first ? "token_fraction_swapper::begin_forward: its host store was "
                                                         "destroyed before it (it must outlive the swapper)"
                                                       : "token_fraction_swapper::begin_forward: its rounding "
                                                         "buffers were destroyed before it"),
                         memo::error);
    // The plan and layout are read from the buffers: refused once they are gone.
    if (store_first) {
      CHECK(swapper->plan().alpha() == 0.5);
      CHECK(swapper->layout().size() == test_layout().size());
    } else {
      CHECK_THROWS_WITH_AS((void)swapper->plan(), doctest::Contains("token_fraction_swapper::plan: its rounding"),
                           memo::error);
      CHECK_THROWS_WITH_AS((void)swapper->layout(),
                           doctest::Contains("token_fraction_swapper::layout: its rounding"), memo::error);
    }
    swapper.reset();
  }
}

TEST_CASE("token_fraction_swapper: two swappers over one set of rounding buffers are refused") {
  swap_setup setup(0.5);
  auto& [backend, compute, plan, buffers, store] = setup;
  swapper_type first(backend, compute, buffers, store, {4, 2, 0});
  const auto used = store.used_bytes();
  CHECK_THROWS_WITH_AS((swapper_type(backend, compute, buffers, store, {4, 2, 100})),
                       doctest::Contains("rounding buffers: already driven by token_fraction_swapper"),
                       memo::error);
  CHECK(store.used_bytes() == used);  // the refused swapper reserved nothing
  CHECK(buffers.claimed());           // and left the first one's claim alone
}

TEST_CASE("token_fraction_swapper: an abandoned step is reset and the next steps are correct") {
  host_backend::options config;
  config.host_to_device_bytes_per_second = 4e6;
  config.device_to_host_bytes_per_second = 4e6;
  host_backend backend(config);
  auto compute = backend.make_stream("compute");
  for (const double alpha : {0.0, 0.5, 1.0}) {
    CAPTURE(alpha);
    memo::offload_plan plan(test_layout(), alpha);
    memo::rounding_buffers<host_backend> buffers(backend, plan, 2);
    memo::host_store<host_backend> store(backend, memo::mib);
    swapper_type swapper(backend, compute, buffers, store, {6, 2, 0});
    step_checker checker(6, test_layout().size());

    // 1. The caller throws in the middle of the forward (layer 3 begun).
    try {
      for (std::size_t layer = 0; layer < 3; ++layer) checker.forward(swapper, backend, compute, layer, 0);
      (void)swapper.begin_forward(3);
      throw std::runtime_error("model code failed");
    } catch (const std::runtime_error&) {
      CHECK(swapper.in_step());
      // Without a reset the next step cannot start.
      CHECK_THROWS_WITH_AS((void)swapper.begin_forward(0), doctest::Contains("out of order"), memo::error);
      swapper.abandon_step();
    }
    CHECK(!swapper.in_step());
    CHECK(!buffers.leased(0));
    CHECK(!buffers.leased(1));

    // 2. A task on the compute stream fails in the backward: abandon_step
    //    reports it once, after the reset.
    for (std::size_t layer = 0; layer < 6; ++layer) checker.forward(swapper, backend, compute, layer, 1);
    checker.backward(swapper, backend, compute, 5);
    (void)swapper.begin_backward(4, [](host_backend::native_stream, const memo::recompute_request&) {});
    backend.enqueue(compute, [] { throw std::runtime_error("kernel failed"); });
    swapper.end_backward(4);  // its release records a guard behind the failure
    CHECK_THROWS_WITH_AS(swapper.abandon_step(), "kernel failed", std::runtime_error);
    CHECK(!swapper.in_step());

    // 3. Whole steps afterwards see exactly what their forward wrote.
    const std::size_t checked_before = checker.checked;
    for (std::size_t step = 2; step < 4; ++step) checker.step(swapper, backend, compute, step);
    swapper.synchronize();
    CHECK(checker.checked - checked_before == 2 * 6 * test_layout().layer_bytes());
    CHECK(checker.mismatched == 0);
  }
}

TEST_CASE("token_fraction_swapper: over rounding buffers and a host store built on caller regions") {
  host_backend::options config;
  config.host_to_device_bytes_per_second = 4e6;
  config.device_to_host_bytes_per_second = 4e6;
  host_backend backend(config);
  auto compute = backend.make_stream("compute");
  const std::size_t layers = 5;
  for (const double alpha : {0.0, 0.5, 1.0}) {
    CAPTURE(alpha);
    const memo::offload_plan plan(test_layout(), alpha);
    using buffers_type = memo::rounding_buffers<host_backend>;
    using store_type = memo::host_store<host_backend>;
    const auto slots = memo::host_slots_for(plan, layers - 2);
    memo::buffer<std::byte, memo::host_memory_resource> device_arena(backend.device_memory(),
                                                                     buffers_type::required_bytes(plan, 2));
    memo::buffer<std::byte, memo::host_memory_resource> host_arena(backend.pinned_memory(),
                                                                   store_type::required_bytes(slots));
    const auto device_before = backend.device_memory().current_bytes();
    const auto pinned_before = backend.pinned_memory().current_bytes();
    backend.device_memory().reset_peak();
    buffers_type buffers(backend, plan, 2, memo::memory_region{device_arena.data(), device_arena.size()});
    store_type store(backend, memo::memory_region{host_arena.data(), host_arena.size()});
    {
      swapper_type swapper(backend, compute, buffers, store, {layers, 2, 0});
      CHECK(store.used_bytes() == host_arena.size());  // the region holds exactly the plan's slots
      step_checker checker(layers, test_layout().size());
      for (std::size_t step = 0; step < 2; ++step) checker.step(swapper, backend, compute, step);
      swapper.synchronize();
      CHECK(checker.checked == 2 * layers * test_layout().layer_bytes());
      CHECK(checker.mismatched == 0);
    }
    // Nothing was allocated beyond the two regions.
    CHECK(backend.device_memory().current_bytes() == device_before);
    CHECK(backend.pinned_memory().current_bytes() == pinned_before);
    CHECK(backend.device_memory().peak_bytes() == device_before);
  }
}

TEST_CASE("token_fraction_swapper: a step simulated from its protocol options matches it when alpha rounds to zero") {
  // alpha = 0.01 of 64 tokens is no token: the swapper's plan shares the
  // fraction tensors (as at alpha = 0), while a config read from alpha alone
  // would model a partial recompute. Taking the shape from the swapper
  // removes the difference.
  swap_setup setup(0.01);
  auto& [backend, compute, plan, buffers, store] = setup;
  swapper_type swapper(backend, compute, buffers, store, {5, 2, 0});
  CHECK(swapper.protocol_options().recompute_shared);
  CHECK_FALSE(swapper.protocol_options().recompute_swapped);
  memo::memo_step_config config;
  config.layers = 5;
  config.alpha = 0.01;
  config.layer_forward_flops = 1000.0;
  config.recompute_flops = 500.0;
  CHECK(config.protocol_options().recompute_swapped);  // the model from alpha alone
  config.protocol = swapper.protocol_options();
  const auto step = memo::build_memo_step(config);
  std::vector<std::string> actions;
  for (const auto& action : swapper.protocol()) actions.push_back(action.name());
  std::vector<std::string> ops;
  for (const auto& action : step.protocol) ops.push_back(action.name());
  CHECK(ops == actions);
  CHECK(step.recompute[3].has_value());  // resident layer 3 rebuilds its shared tensors
  config.protocol->layers = 6;
  CHECK_THROWS_WITH_AS(static_cast<void>(memo::build_memo_step(config)),
                       doctest::Contains("the given protocol is for 6 layers"), memo::error);
}

TEST_CASE("token_fraction_swapper: recording a step's timeline, an abandoned step, and end_recompute out of place") {
  host_backend backend;
  auto compute = backend.make_stream("compute");
  memo::offload_plan plan(test_layout(), 0.5);
  memo::rounding_buffers<host_backend> buffers(backend, plan);
  memo::host_store<host_backend> store(backend, memo::mib);
  swapper_type swapper(backend, compute, buffers, store, {4, 2, 0});
  swapper.record_timeline(true);
  auto nothing = [](host_backend::native_stream, const memo::recompute_request&) {};
  // A step abandoned part-way leaves no timeline behind.
  (void)swapper.begin_forward(0);
  CHECK_THROWS_WITH(swapper.record_timeline(false), doctest::Contains("inside a step"));
  swapper.abandon_step();
  CHECK_THROWS_WITH((void)swapper.last_timeline(), doctest::Contains("no step was recorded"));
  // A whole step: end_recompute only inside a recomputing layer's backward.
  for (std::size_t layer = 0; layer < 4; ++layer) {
    (void)swapper.begin_forward(layer);
    CHECK_THROWS_WITH(swapper.end_recompute(layer), doctest::Contains("outside a recomputing layer's backward"));
    swapper.end_forward(layer);
  }
  for (std::size_t layer = 4; layer-- > 0;) {
    (void)swapper.begin_backward(layer, nothing);
    if (swapper.recomputing(layer)) {
      swapper.end_recompute(layer);
      CHECK_THROWS_WITH(swapper.end_recompute(layer), doctest::Contains("outside a recomputing layer's backward"));
    }
    swapper.end_backward(layer);
  }
  swapper.synchronize();
  const memo::timeline t = swapper.last_timeline();
  // One op per protocol action, under its name, on its stream.
  REQUIRE(t.ops().size() == swapper.protocol().size());
  for (std::size_t i = 0; i < t.ops().size(); ++i) {
    CHECK(t.ops()[i].name == swapper.protocol()[i].name());
    CHECK(t.streams()[t.ops()[i].stream] == memo::to_string(swapper.protocol()[i].stream()));
  }
}
