// Tests of memo/swap/alpha_solver.hpp: the lp_solve answer against the
// closed form min(1, bandwidth limit, host limit) on many random problems,
// infeasible ones included, plus hand-worked cases; and the LP's skeletal
// sizes against the skeletal tensors of the trace the bi-level planner
// plans for the same model.
#include "memo/swap/alpha_solver.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "memo/plan/bilevel_planner.hpp"
#include "memo/plan/gpt_trace.hpp"
#include "memo/schedule/memo_step.hpp"
#include "memo/swap/skeletal_layout.hpp"

namespace {

// MEMO's 7B layer (hidden 4096, 32 heads) at 256K tokens on TP 4 x CP 2.
memo::transformer_layer layer_7b_256k() {
  memo::transformer_layer shape;
  shape.hidden = 4096;
  shape.heads = 32;
  shape.tokens = 256 * 1024;
  shape.tensor_parallel = 4;
  shape.context_parallel = 2;
  return shape;
}

memo::alpha_problem hand_problem() {
  memo::alpha_problem p;
  p.input_bytes = 100;
  p.attention_output_bytes = 100;
  p.other_bytes = 1400;
  p.bandwidth_bytes_per_second = 1000;
  p.layer_forward_seconds = 1.0;  // 1000 bytes fit: alpha = 800 / 1400
  p.layers = 12;
  p.resident_last_layers = 2;
  p.host_budget_bytes = 1e9;
  return p;
}

}  // namespace

TEST_CASE("alpha_solver: hand-worked problems and their binding constraint") {
  auto p = hand_problem();
  auto bandwidth = memo::solve_alpha(p);
  CHECK(bandwidth.alpha == doctest::Approx(800.0 / 1400.0));
  CHECK(bandwidth.binding == memo::alpha_bound::bandwidth);
  CHECK(bandwidth.transfer_seconds == doctest::Approx(1.0));
  CHECK(bandwidth.stall_seconds_per_layer == doctest::Approx(0.0));
  CHECK(bandwidth.host_bytes == doctest::Approx(10 * 1000.0));
  // alpha = 1 would take 1.6 s per layer: 0.6 s stall.
  CHECK(memo::predicted_stall_seconds(p, 1.0) == doctest::Approx(0.6));

  // 10 swapped layers, budget 5000 bytes: 500 per layer, alpha = 300 / 1400.
  p.host_budget_bytes = 5000;
  auto host = memo::solve_alpha(p);
  CHECK(host.alpha == doctest::Approx(300.0 / 1400.0));
  CHECK(host.binding == memo::alpha_bound::host_memory);

  p = hand_problem();
  p.layer_forward_seconds = 10.0;
  auto everything = memo::solve_alpha(p);
  CHECK(everything.alpha == 1.0);
  CHECK(everything.binding == memo::alpha_bound::everything);

  // Two layers: nothing is swapped, so the host budget does not matter.
  p = hand_problem();
  p.layers = 2;
  p.host_budget_bytes = 0;
  CHECK(memo::solve_alpha(p).alpha == doctest::Approx(800.0 / 1400.0));
}

TEST_CASE("alpha_solver: infeasible at alpha = 0 names the constraint and the excess") {
  auto p = hand_problem();
  p.layer_forward_seconds = 0.15;  // 200 bytes need 0.2 s
  CHECK_THROWS_WITH_AS(memo::solve_alpha(p),
                       doctest::Contains("even alpha = 0 breaks the bandwidth constraint (eq. 2)"),
                       memo::error);
  CHECK_THROWS_WITH_AS(memo::solve_alpha(p), doctest::Contains("0.050000 s longer"), memo::error);
  p = hand_problem();
  p.host_budget_bytes = 1500;  // 10 x 200 = 2000 bytes
  CHECK_THROWS_WITH_AS(memo::solve_alpha(p),
                       doctest::Contains("host-memory constraint (eq. 3): 10 swapped layers x "
                                         "(input + attention output) = 2000 bytes exceeds the "
                                         "budget of 1500 bytes by 500 bytes"),
                       memo::error);
  p = hand_problem();
  p.bandwidth_bytes_per_second = 0;
  CHECK_THROWS_WITH_AS(memo::solve_alpha(p), doctest::Contains("bandwidth_bytes_per_second"),
                       memo::error);
  p = hand_problem();
  p.other_bytes = -1;  // wraps to 2^64 - 1: the sizes no longer add up to a byte count
  CHECK_THROWS_WITH_AS(memo::solve_alpha(p), doctest::Contains("overflows 64 bits"), memo::error);
}

TEST_CASE("alpha_solver: an attention that keeps Q, K and V on the host, by hand") {
  auto p = hand_problem();
  p.other_bytes = 1400 - 300;
  p.attention_host_bytes = 300;  // moved whole by every layer, held for all 12
  // (2): 200 + 300 + alpha 1100 <= 1000 bytes in 1 s: alpha = 500 / 1100.
  auto bandwidth = memo::solve_alpha(p);
  CHECK(bandwidth.alpha == doctest::Approx(500.0 / 1100.0));
  CHECK(bandwidth.binding == memo::alpha_bound::bandwidth);
  CHECK(bandwidth.transfer_seconds == doctest::Approx(1.0));
  CHECK(bandwidth.host_bytes == doctest::Approx(10 * 700.0 + 12 * 300.0));
  // (3): 12 x 300 + 10 x (200 + alpha 1100) <= 8000: alpha = 240 / 1100.
  p.host_budget_bytes = 8000;
  auto host = memo::solve_alpha(p);
  CHECK(host.alpha == doctest::Approx(240.0 / 1100.0));
  CHECK(host.binding == memo::alpha_bound::host_memory);
  CHECK(memo::alpha_closed_form(p).alpha == doctest::Approx(240.0 / 1100.0));
  // The attention's stores alone overflow the budget.
  p.host_budget_bytes = 3000;
  CHECK_THROWS_WITH_AS(memo::solve_alpha(p),
                       doctest::Contains("12 layers x the attention's host Q, K and V (300 bytes) = 3600 "
                                         "bytes exceeds the budget of 3000 bytes by 600 bytes"),
                       memo::error);
  // What they leave (1400) is less than 10 x 200.
  p.host_budget_bytes = 5000;
  CHECK_THROWS_WITH_AS(memo::solve_alpha(p),
                       doctest::Contains("= 2000 bytes exceeds the budget of 1400 bytes (what every layer's "
                                         "attention store leaves of 5000) by 600 bytes"),
                       memo::error);
  // Their copies alone outlast a 0.45 s layer: 500 bytes take 0.5 s.
  p = hand_problem();
  p.other_bytes = 1100;
  p.attention_host_bytes = 300;
  p.layer_forward_seconds = 0.45;
  CHECK_THROWS_WITH_AS(memo::solve_alpha(p),
                       doctest::Contains("(200 bytes) and the attention's host Q, K and V (300 bytes) takes 0.5"),
                       memo::error);
}

TEST_CASE("alpha_solver: the backward row (4), by hand") {
  auto p = hand_problem();
  p.other_bytes = 1100;
  p.attention_host_bytes = 300;
  p.layer_forward_seconds = 10.0;  // (2) allows alpha = 1
  p.layer_backward_seconds = 0.5;
  p.host_to_device_bytes_per_second = 1000;
  p.attention_fetch_bytes = 100;
  // (4): 200 + alpha 1100 + 100 <= 500 bytes in 0.5 s: alpha = 200 / 1100.
  for (const auto& solved : {memo::solve_alpha(p), memo::alpha_closed_form(p)}) {
    CHECK(solved.alpha == doctest::Approx(200.0 / 1100.0));
    CHECK(solved.binding == memo::alpha_bound::prefetch);
    CHECK(solved.backward_transfer_seconds == doctest::Approx(0.5));
    CHECK(solved.backward_stall_seconds_per_layer == doctest::Approx(0.0));
  }
  CHECK(std::string(memo::to_string(memo::alpha_bound::prefetch)).find("backward") != std::string::npos);
  // Without the attention's fetches: alpha = 300 / 1100.
  p.attention_fetch_bytes = 0;
  CHECK(memo::solve_alpha(p).alpha == doctest::Approx(300.0 / 1100.0));
  // A shorter forward makes (2) the tighter row: 500 + alpha 1100 <= 700
  // bytes in 0.7 s gives alpha = 200 / 1100.
  p.layer_forward_seconds = 0.7;
  const auto forward = memo::solve_alpha(p);
  CHECK(forward.alpha == doctest::Approx(200.0 / 1100.0));
  CHECK(forward.binding == memo::alpha_bound::bandwidth);
  CHECK(forward.backward_transfer_seconds == doctest::Approx(0.4));
  // Without the row (no backward time), as in MEMO: only (2) and (3).
  p.layer_backward_seconds = 0.0;
  p.layer_forward_seconds = 10.0;
  const auto memo_lp = memo::solve_alpha(p);
  CHECK(memo_lp.alpha == 1.0);
  CHECK(memo_lp.backward_transfer_seconds == 0.0);

  // More prefetches queued ahead of the first fetches: with K = 4 and two
  // resident layers the forward's end queues two, so 2 (200 + alpha 1100) +
  // 100 <= 700 bytes in 0.7 s: alpha = 200 / 2200. With nothing swapped
  // (two layers) there is no prefetch, and only the fetches count.
  p.layer_forward_seconds = 10.0;
  p.layer_backward_seconds = 0.7;
  p.attention_fetch_bytes = 100;
  p.rounding_buffers = 4;
  CHECK(p.queued_prefetches() == 2);
  for (const auto& solved : {memo::solve_alpha(p), memo::alpha_closed_form(p)}) {
    CHECK(solved.alpha == doctest::Approx(200.0 / 2200.0));
    CHECK(solved.binding == memo::alpha_bound::prefetch);
  }
  p.rounding_buffers = 3;  // one queued: (200 + alpha 1100) + 100 <= 700
  CHECK(memo::solve_alpha(p).alpha == doctest::Approx(400.0 / 1100.0));
  p.layers = 2;
  CHECK(p.queued_prefetches() == 0);
  CHECK(memo::solve_alpha(p).alpha == 1.0);
  CHECK(memo::solve_alpha(p).backward_transfer_seconds == doctest::Approx(0.1));
  // ... even when the fetches alone outlast the backward: alpha moves
  // nothing over the link then, so (2) decides it.
  p.attention_fetch_bytes = 900;
  for (const auto& solved : {memo::solve_alpha(p), memo::alpha_closed_form(p)}) {
    CHECK(solved.alpha == 1.0);
    CHECK(solved.backward_stall_seconds_per_layer == doctest::Approx(0.2));
  }

  // Even alpha = 0 breaks (4): 200 + 600 bytes take 0.8 s of a 0.5 s
  // backward. Not an error (at alpha = 0 the layers' shared rebuilds may
  // absorb it): alpha = 0, and the excess as the backward stall.
  p = hand_problem();
  p.layer_backward_seconds = 0.5;
  p.host_to_device_bytes_per_second = 1000;
  p.attention_fetch_bytes = 600;
  p.attention_host_bytes = 100;
  for (const auto& solved : {memo::solve_alpha(p), memo::alpha_closed_form(p)}) {
    CHECK(solved.alpha == 0.0);
    CHECK(solved.binding == memo::alpha_bound::prefetch);
    CHECK(solved.backward_transfer_seconds == doctest::Approx(0.8));
    CHECK(solved.backward_stall_seconds_per_layer == doctest::Approx(0.3));
  }
  // Fields out of range name themselves.
  p.attention_fetch_bytes = 0;
  p.host_to_device_bytes_per_second = 0;
  CHECK_THROWS_WITH_AS(memo::solve_alpha(p), doctest::Contains("host_to_device_bytes_per_second must be positive"),
                       memo::error);
  p.layer_backward_seconds = -1;
  CHECK_THROWS_WITH_AS(memo::solve_alpha(p),
                       doctest::Contains("layer_backward_seconds must be finite and >= 0, got -1"),
                       memo::error);
  p.layer_backward_seconds = 0;
  p.attention_fetch_bytes = 5;
  CHECK_THROWS_WITH_AS(memo::solve_alpha(p), doctest::Contains("is counted only in the backward row"),
                       memo::error);
  p.attention_fetch_bytes = 0;
  p.rounding_buffers = 0;
  CHECK_THROWS_WITH_AS(memo::solve_alpha(p), doctest::Contains("rounding_buffers (K) must be >= 1, got 0"),
                       memo::error);
}

TEST_CASE("alpha_solver: at the LP's alpha the simulated step waits on no copy, above it the backward does") {
  // The 7B layer at 256K on TP 4 x CP 2 with an FPDT attention (chunks of
  // 16K of the 128K local tokens) on an A800 whose link to the device is
  // slowed until the attention's forward fetches barely hide behind the
  // forward (which the LP takes as given), so that row (4) binds. The step
  // simulator (schedule/memo_step.hpp) is the independent judge: it plays
  // the protocol's copies and the attention's own on in-order streams.
  memo::transformer_layer shape = layer_7b_256k();
  shape.attention_keeps_qkv = true;
  shape.attention_chunk = 16 * 1024;
  const auto cost = memo::gpt_layer_cost_of(shape);
  auto profile = memo::device_profile::a800_80gb();
  profile.host_to_device_bytes_per_second = 1.1 * static_cast<double>(cost.attention_forward_fetch_bytes) /
                                            profile.compute_seconds(cost.forward_flops);
  const auto p = memo::alpha_problem::from_layer_cost(cost, profile, 32);
  CHECK(p.attention_fetch_bytes == cost.attention_backward_fetch_bytes);
  CHECK(p.layer_backward_seconds == doctest::Approx(profile.compute_seconds(cost.backward_flops)));
  const auto solved = memo::solve_alpha(p);
  REQUIRE(solved.binding == memo::alpha_bound::prefetch);
  REQUIRE(solved.alpha > 0.05);
  REQUIRE(solved.alpha < 0.95);
  CHECK(solved.alpha == doctest::Approx(memo::alpha_closed_form(p).alpha).epsilon(1e-6));

  const auto at = [&](double alpha, int K = 2, int u = 2) {
    auto config = memo::memo_step_config::from_layer_cost(cost, 32, alpha);
    config.rounding_buffers = K;
    config.resident_last_layers = u;
    return memo::simulate_memo_step(config, profile);
  };
  const auto tight = at(solved.alpha);
  CHECK(tight.compute_stall_seconds <= 1e-9 * tight.step_seconds);
  // Other K and u: (4) counts the K - u prefetches the forward's end
  // queues; at the LP's alpha nothing waits, just above it the backward does.
  for (const auto& [K, u] : {std::pair{3, 2}, std::pair{4, 2}, std::pair{3, 1}, std::pair{4, 1}, std::pair{2, 1}}) {
    CAPTURE(K);
    CAPTURE(u);
    auto q = p;
    q.rounding_buffers = K;
    q.resident_last_layers = u;
    const auto alpha = memo::solve_alpha(q).alpha;
    REQUIRE(alpha > 0.0);
    REQUIRE(alpha < 0.95);
    const auto fits = at(alpha, K, u);
    CHECK(fits.compute_stall_seconds <= 1e-9 * fits.step_seconds);
    CHECK(at(alpha + 0.05, K, u).backward_stall_seconds > 0.0);
  }
  // Above it, by hand: the first swapped layer's prefetch and the fetches
  // of the last resident layer (which rebuilds nothing) outlast that
  // layer's backward by the excess over (4); in each of the 29 sections
  // after it (layers 29 to 1, each prefetching the layer below) the rebuild
  // of (1 - alpha) of the tokens gives the prefetch a head start, so they
  // stall by the excess less the rebuild; layer 0 prefetches nothing.
  const double above = solved.alpha + 0.05;
  const auto over = at(above);
  const double excess = p.backward_transfer_seconds(above) - p.layer_backward_seconds;
  const double rebuild = (1.0 - above) * profile.compute_seconds(cost.recompute_flops);
  REQUIRE(excess > rebuild);
  CHECK(over.forward_stall_seconds <= 1e-9 * over.step_seconds);
  CHECK(over.backward_stall_seconds == doctest::Approx(excess + 29 * (excess - rebuild)).epsilon(1e-6));
  // MEMO's LP alone, without (4), would pick alpha where the backward waits.
  auto memo_only = p;
  memo_only.layer_backward_seconds = 0.0;
  memo_only.attention_fetch_bytes = 0;
  const auto loose = memo::solve_alpha(memo_only);
  CHECK(loose.alpha > solved.alpha + 0.05);
  CHECK(at(loose.alpha).backward_stall_seconds > 0.0);
}

TEST_CASE("alpha_solver: a layer whose attention keeps Q, K and V gives them to S_qkv") {
  memo::transformer_layer layer;
  layer.tokens = 16;
  layer.hidden = 8;
  layer.heads = 2;
  layer.kv_heads = 1;
  layer.bytes_per_element = 4;
  // q [16, 8], k and v [16, 4], fp32.
  const std::uint64_t qkv = 16 * 8 * 4 + 2 * 16 * 4 * 4;
  const auto profile = memo::device_profile::a800_80gb();
  const auto p = memo::alpha_problem::from_layer(layer, profile, 6);
  CHECK(p.attention_host_bytes == 0);
  layer.attention_keeps_qkv = true;
  const auto q = memo::alpha_problem::from_layer(layer, profile, 6);
  CHECK(q.other_bytes == p.other_bytes - qkv);
  CHECK(q.attention_host_bytes == qkv);
  CHECK(q.input_bytes == p.input_bytes);
  CHECK(q.attention_output_bytes == p.attention_output_bytes);
  CHECK(q.host_budget_bytes == p.host_budget_bytes);
  // Every alpha moves the same bytes per layer, q, k and v whole instead
  // of a fraction alpha.
  for (const double alpha : {0.0, 0.5, 1.0}) {
    CHECK(q.transfer_seconds(alpha) ==
          doctest::Approx(p.transfer_seconds(alpha) + (1.0 - alpha) * qkv / p.bandwidth_bytes_per_second));
  }
}

TEST_CASE("alpha_solver: lp_solve agrees with the closed form on random problems") {
  std::mt19937_64 random(20240611);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int feasible = 0;
  int infeasible = 0;
  int by_bound[4] = {0, 0, 0, 0};
  int backward_row_broken = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    memo::alpha_problem p;
    // Magnitudes from kilobytes to tens of gigabytes, as sequence length varies.
    const double scale = std::pow(10.0, 3.0 + 7.0 * unit(random));
    auto bytes = [](double value) { return static_cast<std::uint64_t>(value); };
    p.input_bytes = bytes(scale * unit(random));
    p.attention_output_bytes = bytes(scale * unit(random));
    p.other_bytes = trial % 50 == 0 ? 0 : bytes(14.0 * scale * unit(random));
    p.attention_host_bytes = trial % 3 == 0 ? bytes(3.0 * scale * unit(random)) : 0;
    p.bandwidth_bytes_per_second = 1e9 * (1.0 + 60.0 * unit(random));
    p.layer_forward_seconds =
        static_cast<double>(p.input_bytes + p.attention_output_bytes + p.other_bytes) /
            p.bandwidth_bytes_per_second * (0.05 + 2.0 * unit(random)) +
        1e-9;
    p.layers = 1 + static_cast<int>(unit(random) * 80);
    p.resident_last_layers = static_cast<int>(unit(random) * 3);
    p.host_budget_bytes = bytes(std::max(0, p.layers - p.resident_last_layers) * scale * 16 * unit(random));
    if (trial % 4 == 1) {
      // The backward row: a backward of 1.5 to 2.5 forwards, the
      // attention's fetches, a link as slow as a tenth of B.
      p.layer_backward_seconds = p.layer_forward_seconds * (1.5 + unit(random));
      p.rounding_buffers = 1 + static_cast<int>(unit(random) * 4);
      p.host_to_device_bytes_per_second = p.bandwidth_bytes_per_second * (0.1 + unit(random));
      p.attention_fetch_bytes = p.attention_host_bytes > 0 ? bytes(4.0 * scale * unit(random)) : 0;
    }
    CAPTURE(trial);
    bool closed_threw = false;
    memo::alpha_solution expected;
    try {
      expected = memo::alpha_closed_form(p);
    } catch (const memo::error&) {
      closed_threw = true;
    }
    if (closed_threw) {
      ++infeasible;
      CHECK_THROWS_AS(memo::solve_alpha(p), memo::error);
      continue;
    }
    ++feasible;
    const auto solved = memo::solve_alpha(p);
    CHECK(solved.alpha == doctest::Approx(expected.alpha).epsilon(1e-6));
    CHECK(solved.alpha >= 0.0);
    CHECK(solved.alpha <= 1.0);
    // (2) and (3) hold at the answer (up to lp_solve's tolerance).
    CHECK(solved.transfer_seconds <= p.layer_forward_seconds * (1 + 1e-6));
    CHECK(solved.host_bytes <= static_cast<double>(p.host_budget_bytes) * (1 + 1e-6) + 1e-6);
    if (p.has_backward_row()) {
      // (4) by hand: m prefetches (the K - u the forward's end queues, at
      // least one, none with nothing swapped) and the fetches inside a
      // layer's backward, unless alpha = 0 breaks it already.
      const int swapped = std::max(0, p.layers - p.resident_last_layers);
      const int m = swapped == 0 ? 0 : std::max(1, std::min(p.rounding_buffers - p.resident_last_layers, swapped));
      auto busy = [&](double alpha) {
        return (m * (static_cast<double>(p.input_bytes + p.attention_output_bytes) +
                     alpha * static_cast<double>(p.other_bytes)) +
                static_cast<double>(p.attention_fetch_bytes)) /
               p.host_to_device_bytes_per_second;
      };
      if (busy(0.0) <= p.layer_backward_seconds) {
        CHECK(busy(solved.alpha) <= p.layer_backward_seconds * (1 + 1e-6));
        CHECK(solved.backward_stall_seconds_per_layer <= p.layer_backward_seconds * 1e-6);
      } else {
        ++backward_row_broken;
        CHECK(solved.alpha == 0.0);
        CHECK(solved.backward_stall_seconds_per_layer == doctest::Approx(busy(0.0) - p.layer_backward_seconds));
      }
    }
    if (solved.binding == expected.binding) {
      ++by_bound[static_cast<int>(solved.binding)];
    } else {
      // Only possible when two limits coincide.
      CHECK(std::abs(solved.alpha - expected.alpha) < 1e-6);
    }
  }
  // The generator exercises every outcome.
  CHECK(infeasible > 100);
  CHECK(feasible > 1000);
  CHECK(by_bound[0] > 50);
  CHECK(by_bound[1] > 50);
  CHECK(by_bound[2] > 50);
  CHECK(by_bound[3] > 30);
  CHECK(backward_row_broken > 5);
}

TEST_CASE("alpha_solver: a problem from the 7B layer cost on the A800 preset") {
  memo::transformer_layer shape = layer_7b_256k();
  const auto cost = memo::gpt_layer_cost_of(shape);
  const auto profile = memo::device_profile::a800_80gb();
  const auto p = memo::alpha_problem::from_layer_cost(cost, profile, 32);
  CHECK(p.bandwidth_bytes_per_second == profile.device_to_host_bytes_per_second);
  CHECK(p.host_budget_bytes == 2048 * memo::gib / 8);
  CHECK(p.layer_forward_seconds == doctest::Approx(cost.forward_flops / (312e12 * 0.55)));
  const auto solved = memo::solve_alpha(p);
  CHECK(solved.alpha == doctest::Approx(memo::alpha_closed_form(p).alpha).epsilon(1e-6));
}

TEST_CASE("alpha_solver: the LP offloads the skeletal bytes of the trace the planner plans") {
  struct shape {
    std::int64_t hidden, heads, kv_heads, ffn, tokens, tp, cp, bytes;
  };
  const shape shapes[] = {
      {64, 4, 0, 0, 512, 1, 1, 2},     // multi-head, f = 4h, one GPU
      {64, 8, 2, 0, 512, 2, 1, 2},     // grouped-query attention, TP 2
      {96, 6, 6, 288, 384, 2, 2, 2},   // f = 3h, TP 2 x CP 2
      {128, 16, 4, 320, 256, 4, 2, 2}, // GQA, f = 2.5h, TP 4 x CP 2
      {32, 4, 1, 64, 256, 1, 4, 4},    // multi-query, fp32, CP 4
  };
  for (const auto& x : shapes) {
    memo::gpt_shape g;
    g.hidden = x.hidden;
    g.heads = x.heads;
    g.kv_heads = x.kv_heads;
    g.ffn_hidden = x.ffn;
    g.tokens = x.tokens;
    g.tensor_parallel = x.tp;
    g.context_parallel = x.cp;
    g.bytes_per_element = x.bytes;
    g.layers = 3;
    g.vocab = 100;
    g.loss_chunk_tokens = 64;
    CAPTURE(x.hidden);
    CAPTURE(x.kv_heads);
    CAPTURE(x.tp);
    CAPTURE(x.cp);

    // What the LP sees.
    const auto problem =
        memo::alpha_problem::from_layer(g, memo::device_profile::a800_80gb(), static_cast<int>(g.layers));
    const std::uint64_t lp_bytes = problem.whole_bytes() + problem.other_bytes;
    // What the rounding buffers hold.
    const memo::skeletal_layout layout(g);
    CHECK(layout.layer_bytes() == lp_bytes);
    CHECK(layout.bytes_with(memo::skeletal_policy::offload_whole) == problem.whole_bytes());
    CHECK(layout.bytes_with(memo::skeletal_policy::offload_fraction) == problem.other_bytes);
    std::vector<std::uint64_t> layout_sizes;
    for (const auto& tensor : layout.tensors()) layout_sizes.push_back(tensor.bytes());
    std::sort(layout_sizes.begin(), layout_sizes.end());

    // What the planner plans: the buffers it sets aside as skeletal (born in
    // a section, outliving it), grouped by the forward section they are
    // born in. Layer l's forward makes its skeletal tensors but the input,
    // which the layer before made, and its output, the next layer's input.
    const auto trace = memo::make_gpt_trace(g);
    memo::bilevel_planner<> planner;
    const auto planned = planner.plan(trace);
    CHECK(memo::validate(trace.problem, planned.plan).ok);
    std::map<std::uint64_t, const memo::dsa_buffer*> by_id;
    for (const auto& b : trace.problem.buffers) by_id[b.id] = &b;
    for (std::uint64_t l = 0; l < g.layers; ++l) {
      CAPTURE(l);
      const std::string forward = "layer " + std::to_string(l) + " forward";
      const std::string backward = "layer " + std::to_string(l) + " backward";
      const auto& fwd = *std::find_if(trace.sections.begin(), trace.sections.end(),
                                      [&](const auto& s) { return s.name == forward; });
      const auto& bwd = *std::find_if(trace.sections.begin(), trace.sections.end(),
                                      [&](const auto& s) { return s.name == backward; });
      std::uint64_t born_here = 0;
      for (const auto id : planned.skeletal_ids) {
        const auto& b = *by_id.at(id);
        if (b.lower >= fwd.begin && b.lower < fwd.end) born_here += b.size_bytes;
      }
      CHECK(born_here == lp_bytes);
      // By lifetime: made before the end of layer l's forward, freed in its
      // backward (the layer input included, the gradient from above not).
      std::vector<std::uint64_t> kept;
      for (const auto& b : trace.problem.buffers) {
        if (b.lower < fwd.end && b.upper >= bwd.begin && b.upper < bwd.end) kept.push_back(b.size_bytes);
      }
      std::sort(kept.begin(), kept.end());
      CHECK(kept == layout_sizes);
    }
  }
}
