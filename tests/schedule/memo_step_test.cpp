#include "memo/schedule/memo_step.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

using memo::build_memo_step;
using memo::device_profile;
using memo::memo_step_config;
using memo::simulate_memo_step;

namespace {

// 1000 FLOP/s and 1000 B/s each way: a layer of 1000 FLOPs takes 1 s and
// 1000 bytes take 1 s to cross.
device_profile unit_profile() {
  device_profile profile;
  profile.name = "unit";
  profile.peak_flops = 1000.0;
  profile.efficiency = 1.0;
  profile.host_to_device_bytes_per_second = 1000.0;
  profile.device_to_host_bytes_per_second = 1000.0;
  profile.interconnect_bytes_per_second = 1000.0;
  return profile;
}

// Six layers: forward 1 s, backward 2 s, S_input 200 B, S_attn 100 B,
// S_others 1000 B, full recompute 600 FLOPs (0.6 s).
memo_step_config unit_config(double alpha) {
  memo_step_config config;
  config.layers = 6;
  config.alpha = alpha;
  config.layer_forward_flops = 1000.0;
  config.recompute_flops = 600.0;
  config.input_bytes = 200;
  config.attention_output_bytes = 100;
  config.other_bytes = 1000;
  return config;
}

std::vector<std::string> names(const std::vector<std::vector<std::string>>& order, std::size_t s) {
  return order.at(s);
}

bool depends_on(const memo::stream_schedule& schedule, const std::string& consumer,
                const std::string& producer) {
  const auto& deps = schedule.op(schedule.find(consumer)).dependencies;
  return std::find(deps.begin(), deps.end(), schedule.find(producer).index) != deps.end();
}

}  // namespace

TEST_CASE("memo_step: streams, op order and dependencies follow Figure 11") {
  const auto step = build_memo_step(unit_config(0.5));
  const auto& schedule = step.schedule;
  REQUIRE(schedule.streams() == std::vector<std::string>{"compute", "offload", "prefetch"});
  const auto order = schedule.simulate(unit_profile()).op_order_per_stream();
  CHECK(names(order, 0) == std::vector<std::string>{
                               "forward 0", "forward 1", "forward 2", "forward 3", "forward 4",
                               "forward 5", "backward 5", "backward 4", "recompute 3",
                               "backward 3", "recompute 2", "backward 2", "recompute 1",
                               "backward 1", "recompute 0", "backward 0"});
  // The last two layers are not swapped.
  CHECK(names(order, 1) == std::vector<std::string>{"offload 0", "offload 1", "offload 2", "offload 3"});
  CHECK(names(order, 2) ==
        std::vector<std::string>{"prefetch 3", "prefetch 2", "prefetch 1", "prefetch 0"});
  // Layer i + 2 overwrites buffer i % 2 only after its offload.
  CHECK(depends_on(schedule, "forward 2", "offload 0"));
  CHECK(depends_on(schedule, "forward 5", "offload 3"));
  CHECK(schedule.op(schedule.find("forward 1")).dependencies.empty());
  CHECK(depends_on(schedule, "offload 3", "forward 3"));
  // Prefetch i into buffer i % 2 after the backward of layer i + 2.
  CHECK(depends_on(schedule, "prefetch 3", "backward 5"));
  CHECK(depends_on(schedule, "prefetch 0", "backward 2"));
  CHECK(depends_on(schedule, "recompute 1", "prefetch 1"));
  CHECK(depends_on(schedule, "backward 1", "prefetch 1"));
  CHECK(schedule.op(schedule.find("backward 4")).dependencies.empty());
  // Each transfer is S_input + S_attn + alpha S_others = 200 + 100 + 500.
  CHECK(schedule.op(*step.offload[0]).bytes() == 800);
  CHECK(schedule.op(*step.prefetch[0]).bytes() == 800);
  CHECK(schedule.op(*step.recompute[2]).flops() == doctest::Approx(300.0));
  CHECK_FALSE(step.offload[4].has_value());
  CHECK_FALSE(step.recompute[5].has_value());
}

TEST_CASE("memo_step: K = 3 rounding buffers shift the waits by three layers") {
  auto config = unit_config(1.0);
  config.rounding_buffers = 3;
  const auto step = build_memo_step(config);
  const auto& schedule = step.schedule;
  CHECK(depends_on(schedule, "forward 3", "offload 0"));
  CHECK(schedule.op(schedule.find("forward 2")).dependencies.empty());
  // Layer 3's buffer (3 % 3 = 0) is next used by no later layer (6 layers),
  // so its prefetch only needs its own offload; layer 2's waits for backward 5.
  CHECK(depends_on(schedule, "prefetch 3", "offload 3"));
  CHECK(depends_on(schedule, "prefetch 2", "backward 5"));
  CHECK_FALSE(step.recompute[0].has_value());  // alpha = 1: nothing to recompute
}

TEST_CASE("memo_step: with transfer time within layer time the compute stream never stalls") {
  // alpha = 0.5: each transfer is 800 B = 0.8 s <= the 1 s forward (and the
  // 2 s backward). The step is the compute work back to back:
  // 6 x (1 + 2) s + 4 recomputes x 0.5 x 0.6 s = 18 + 1.2 = 19.2 s.
  const auto projection = simulate_memo_step(unit_config(0.5), unit_profile());
  CHECK(projection.compute_stall_seconds == 0.0);
  CHECK(projection.step_seconds == doctest::Approx(19.2));
  CHECK(projection.no_offload_seconds == doctest::Approx(18.0));
  CHECK(projection.layer_forward_seconds == doctest::Approx(1.0));
  CHECK(projection.transfer_seconds_per_layer == doctest::Approx(0.8));
  CHECK(projection.recompute_seconds_per_layer == doctest::Approx(0.3));
  CHECK(projection.host_bytes == doctest::Approx(4 * 800.0));
  CHECK(projection.slowdown() == doctest::Approx(19.2 / 18.0));
}

TEST_CASE("memo_step: alpha = 1 with transfer longer than a forward stalls by the hand-computed amount") {
  // alpha = 1: each transfer is 1300 B = T_x = 1.3 s; T_f = 1 s, T_b = 2 s.
  // Forward: offload i runs back to back from t = 1 (the offload stream is
  // the bottleneck): offload i = [1 + 1.3 i, 1 + 1.3 (i + 1)].
  //   forward 0 [0, 1], forward 1 [1, 2]
  //   forward 2 waits offload 0 (ends 2.3): [2.3, 3.3]   stall 0.3
  //   forward 3 waits offload 1 (ends 3.6): [3.6, 4.6]   stall 0.3
  //   forward 4 waits offload 2 (ends 4.9): [4.9, 5.9]   stall 0.3
  //   forward 5 waits offload 3 (ends 6.2): [6.2, 7.2]   stall 0.3
  // Backward (T_x <= T_b, so the prefetches hide):
  //   backward 5 [7.2, 9.2]; prefetch 3 [9.2, 10.5]; backward 4 [9.2, 11.2]
  //   backward 3 [11.2, 13.2]; prefetch 2 [11.2, 12.5]; backward 2 [13.2, 15.2]
  //   prefetch 1 [13.2, 14.5]; backward 1 [15.2, 17.2]
  //   prefetch 0 [15.2, 16.5]; backward 0 [17.2, 19.2]
  // Stall = (n - 2)(T_x - T_f) = 4 x 0.3 = 1.2 s; step = 18 + 1.2 = 19.2 s.
  const auto projection = simulate_memo_step(unit_config(1.0), unit_profile());
  CHECK(projection.compute_stall_seconds == doctest::Approx(1.2));
  CHECK(projection.forward_stall_seconds == doctest::Approx(1.2));
  CHECK(projection.backward_stall_seconds == doctest::Approx(0.0));
  CHECK(projection.step_seconds == doctest::Approx(19.2));
  const auto& trace = projection.trace;
  REQUIRE_FALSE(trace.ops().empty());
  CHECK(trace.ops().front().name == "forward 0");
  for (const auto& op : trace.ops()) {
    if (op.name == "forward 5") {
      CHECK(op.start_seconds == doctest::Approx(6.2));
    }
    if (op.name == "prefetch 0") {
      CHECK(op.start_seconds == doctest::Approx(15.2));
      CHECK(op.end_seconds == doctest::Approx(16.5));
    }
  }
}

TEST_CASE("memo_step: the 7B layer on the A800 profile, from layer_cost") {
  // 32 layers, h = 4096, TP 4 x CP 2, bf16.
  const auto profile = device_profile::a800_80gb();
  memo::transformer_layer shape;
  shape.hidden = 4096;
  shape.heads = 32;
  shape.tensor_parallel = 4;
  shape.context_parallel = 2;

  SUBCASE("alpha from MEMO's eq. 2 closed form hides the transfer at 32K") {
    shape.tokens = 32 * 1024;
    const auto cost = memo::gpt_layer_cost_of(shape);
    const double layer_seconds = profile.compute_seconds(cost.forward_flops);
    // (S_in + S_attn + alpha S_others) / B <= T_layer, capped at 1.
    const double alpha = std::clamp(
        (profile.device_to_host_bytes_per_second * layer_seconds -
         static_cast<double>(cost.input_bytes + cost.attention_output_bytes)) /
            static_cast<double>(cost.other_bytes),
        0.0, 1.0);
    REQUIRE(alpha > 0.0);
    REQUIRE(alpha < 1.0);  // the LP's transfer constraint binds here
    const auto projection =
        simulate_memo_step(memo_step_config::from_layer_cost(cost, 32, alpha), profile);
    CHECK(projection.transfer_seconds_per_layer <= layer_seconds * (1.0 + 1e-12));
    CHECK(projection.compute_stall_seconds <= 1e-9 * projection.step_seconds);
  }

  SUBCASE("alpha = 1 at 16K stalls every forward from layer 2 by T_x - T_f") {
    shape.tokens = 16 * 1024;
    const auto cost = memo::gpt_layer_cost_of(shape);
    const double forward = profile.compute_seconds(cost.forward_flops);
    const double transfer = static_cast<double>(cost.skeletal_bytes) / profile.device_to_host_bytes_per_second;
    // The regime of the hand computation above: T_f < T_x <= T_b = 2 T_f.
    REQUIRE(transfer > forward);
    REQUIRE(transfer <= 2.0 * forward);
    const auto projection =
        simulate_memo_step(memo_step_config::from_layer_cost(cost, 32, 1.0), profile);
    CHECK(projection.compute_stall_seconds == doctest::Approx(30.0 * (transfer - forward)));
    CHECK(projection.step_seconds ==
          doctest::Approx(32.0 * 3.0 * forward + 30.0 * (transfer - forward)));
  }
}

TEST_CASE("memo_step: collectives sit on the compute stream after each pass") {
  auto config = unit_config(0.5);
  config.forward_collectives.push_back(
      {"tp all_gather", memo::collective_kind::all_gather, 400, 2});  // 1/2 x 400 / 1000 = 0.2 s
  const auto projection = simulate_memo_step(config, unit_profile());
  // 6 layers x (1 + 2 + 2 x 0.2) s, plus 4 recomputes of 0.3 s.
  CHECK(projection.no_offload_seconds == doctest::Approx(6 * 3.4));
  CHECK(projection.step_seconds == doctest::Approx(6 * 3.4 + 1.2));
  CHECK(projection.compute_stall_seconds == 0.0);
  const auto& schedule = build_memo_step(config).schedule;
  CHECK(depends_on(schedule, "offload 0", "forward 0 tp all_gather"));
}

TEST_CASE("memo_step: measured durations override FLOP counts") {
  auto config = unit_config(0.0);
  config.layer_forward_seconds = 0.5;
  config.layer_backward_seconds = 1.0;
  config.recompute_seconds = 0.4;
  // alpha = 0: transfer 300 B = 0.3 s <= 0.5 s. Every "other" tensor lives
  // in the shared region, so every layer but the last recomputes it before
  // its backward (layer 4 is resident, but layer 5's forward overwrote its
  // shared tensors): 6 x 1.5 + 5 x 0.4 = 11.0 s.
  const auto projection = simulate_memo_step(config, unit_profile());
  CHECK(projection.step_seconds == doctest::Approx(11.0));
  CHECK(projection.compute_stall_seconds == 0.0);
}

TEST_CASE("memo_step: an attention's host copies share the link, by hand") {
  // alpha = 0.5 (transfers 800 B = 0.8 s), and an attention that stores
  // 100 B (0.1 s) and fetches 300 B (0.3 s) in each forward, and fetches
  // 1000 B (1 s) in each backward. Forward: offload i-1 then store i on the
  // offload stream, 0.9 s inside the 1 s forward; backward: prefetch, then
  // the fetches, 1.8 s inside the 2 s backward. Nothing stalls.
  auto config = unit_config(0.5);
  config.attention_store_bytes = 100;
  config.attention_forward_fetch_bytes = 300;
  config.attention_backward_fetch_bytes = 1000;
  auto projection = simulate_memo_step(config, unit_profile());
  CHECK(projection.compute_stall_seconds == 0.0);
  CHECK(projection.step_seconds == doctest::Approx(19.2));
  const auto& schedule = build_memo_step(config).schedule;
  CHECK(depends_on(schedule, "forward 3 joined", "attention store 3"));
  CHECK(depends_on(schedule, "forward 3 joined", "attention fetch 3"));
  CHECK(depends_on(schedule, "backward 3 joined", "attention fetch back 3"));
  CHECK(depends_on(schedule, "attention fetch back 3", "recompute 3"));  // issued when the backward starts
  CHECK(depends_on(schedule, "prefetch 2", "backward 4 joined"));        // the buffer is free once the pass is

  // Backward fetches of 1300 B: a prefetch and the fetches take 2.1 s.
  // backward 5 [6, 8] (fetch back 5 [6, 7.3]); prefetch 3 [8, 8.8];
  // backward 4, resident, rebuilds nothing: [8, 10], but fetch back 4
  // waits behind prefetch 3: [8.8, 10.1], so the pass ends at 10.1 (stall
  // 0.1 s, the excess over (4)). From then on each rebuild gives the
  // prefetch a head start: prefetch 2 [10.1, 10.9], recompute 3 [10.1,
  // 10.4], backward 3 [10.4, 12.4], fetch back 3 [10.9, 12.2]; and so on.
  config.attention_backward_fetch_bytes = 1300;
  projection = simulate_memo_step(config, unit_profile());
  CHECK(projection.forward_stall_seconds == 0.0);
  CHECK(projection.backward_stall_seconds == doctest::Approx(0.1));
  CHECK(projection.step_seconds == doctest::Approx(19.3));
  for (const auto& op : projection.trace.ops()) {
    if (op.name == "backward 4 joined") CHECK(op.stall_seconds == doctest::Approx(0.1));
    if (op.name == "attention fetch back 3") {
      CHECK(op.start_seconds == doctest::Approx(10.9));
      CHECK(op.end_seconds == doctest::Approx(12.2));
    }
  }

  // A forward store of 300 B: offload i-1 and store i take 1.1 s of a 1 s
  // forward, so every forward after an offload (layers 1 to 4) ends 0.1 s late.
  config.attention_backward_fetch_bytes = 1000;
  config.attention_store_bytes = 300;
  projection = simulate_memo_step(config, unit_profile());
  CHECK(projection.forward_stall_seconds == doctest::Approx(4 * 0.1));
  CHECK(projection.backward_stall_seconds == 0.0);
}

TEST_CASE("memo_step: inputs out of range are errors naming the field") {
  auto config = unit_config(1.5);
  CHECK_THROWS_WITH_AS(static_cast<void>(build_memo_step(config)),
                       doctest::Contains("alpha must be in [0, 1]"), memo::error);
  config = unit_config(0.5);
  config.resident_last_layers = 3;  // > K = 2
  CHECK_THROWS_WITH_AS(static_cast<void>(build_memo_step(config)),
                       doctest::Contains("resident_last_layers"), memo::error);
  config = unit_config(0.5);
  config.layers = 0;
  CHECK_THROWS_WITH_AS(static_cast<void>(build_memo_step(config)), doctest::Contains("layers"),
                       memo::error);
  config = unit_config(0.5);
  config.offload_stream = "compute";
  CHECK_THROWS_AS(static_cast<void>(build_memo_step(config)), memo::error);
}

TEST_CASE("memo_step: no two layers ever hold the same rounding buffer at once") {
  // Independent check of the builder's waits: in the simulated timeline,
  // layer i occupies buffer i % K from the start of its forward to the end
  // of its offload, and again from the start of its prefetch to the end of
  // its backward (a resident layer: from its forward to its backward).
  // Layers sharing a buffer must never overlap, for any n, K, resident_last_layers, alpha and
  // either ratio of transfer to compute time.
  for (int layers = 1; layers <= 7; ++layers) {
    for (int k = 1; k <= 3; ++k) {
      for (int resident = 0; resident <= std::min(k, layers); ++resident) {
        for (const double alpha : {0.0, 0.5, 1.0}) {
          for (const double forward_flops : {300.0, 3000.0}) {  // slow and fast transfers
            auto config = unit_config(alpha);
            config.layers = layers;
            config.rounding_buffers = k;
            config.resident_last_layers = resident;
            config.layer_forward_flops = forward_flops;
            const auto step = build_memo_step(config);
            const auto trace = step.schedule.simulate(unit_profile());
            CAPTURE(layers);
            CAPTURE(k);
            CAPTURE(resident);
            CAPTURE(alpha);
            CAPTURE(forward_flops);
            struct occupancy {
              int layer;
              double start;
              double end;
            };
            std::vector<std::vector<occupancy>> buffers(static_cast<std::size_t>(k));
            for (int i = 0; i < layers; ++i) {
              const auto l = static_cast<std::size_t>(i);
              auto& buffer = buffers[l % static_cast<std::size_t>(k)];
              const double forward_start = trace.op(step.forward[l]).start_seconds;
              const double backward_end = trace.op(step.backward[l]).end_seconds;
              const bool swapped = i < layers - resident;
              REQUIRE(step.offload[l].has_value() == swapped);
              REQUIRE(step.prefetch[l].has_value() == swapped);
              if (swapped) {
                const auto& offload = trace.op(*step.offload[l]);
                const auto& prefetch = trace.op(*step.prefetch[l]);
                CHECK(offload.start_seconds >= trace.op(step.forward[l]).end_seconds);
                CHECK(prefetch.start_seconds >= offload.end_seconds);
                CHECK(trace.op(step.backward[l]).start_seconds >= prefetch.end_seconds);
                if (step.recompute[l]) {
                  CHECK(trace.op(*step.recompute[l]).start_seconds >= prefetch.end_seconds);
                }
                buffer.push_back({i, forward_start, offload.end_seconds});
                buffer.push_back({i, prefetch.start_seconds, backward_end});
              } else {
                buffer.push_back({i, forward_start, backward_end});
              }
            }
            for (const auto& buffer : buffers) {
              for (std::size_t a = 0; a < buffer.size(); ++a) {
                for (std::size_t b = a + 1; b < buffer.size(); ++b) {
                  if (buffer[a].layer == buffer[b].layer) continue;
                  const bool disjoint = buffer[a].end <= buffer[b].start + 1e-12 ||
                                        buffer[b].end <= buffer[a].start + 1e-12;
                  CHECK_MESSAGE(disjoint, "layers " << buffer[a].layer << " and "
                                                    << buffer[b].layer << " share a buffer at once");
                }
              }
            }
          }
        }
      }
    }
  }
}
