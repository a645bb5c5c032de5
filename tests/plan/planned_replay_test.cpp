#include "memo/plan/planned_replay.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "memo/backend/buffer.hpp"
#include "memo/backend/host_backend.hpp"
#include "memo/plan/bilevel_planner.hpp"
#include "memo/plan/greedy.hpp"
#include "memo/plan/planned_arena.hpp"
#include "memo/plan/recording_resource.hpp"
#include "memo/plan/trace.hpp"

namespace {

using memo::host_backend;

// A small model whose step is a real computation: every layer's forward
// pass multiplies, squashes, concatenates and reduces; the backward-like
// pass rescales by what the forward pass saved. Every buffer's contents
// reach the result.
struct toy_model {
  int n = 8;       // rows and width
  int layers = 3;
  std::vector<float> w, v;  // per layer: w [n, n], v [2n, n]

  toy_model() {
    w.resize(static_cast<std::size_t>(layers * n * n));
    v.resize(static_cast<std::size_t>(layers * 2 * n * n));
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 37 % 17)) / 16.0f - 0.5f;
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 11 % 13)) / 24.0f - 0.25f;
  }
};

// What a test run does differently from the correct program; none of it
// changes the sequence of memory requests unless it says so.
struct variant {
  bool read_after_free = false;  // layer 1 reads `a` after freeing it
  bool bigger_c = false;         // layer 1 asks for one more element of `c`
  bool extra_buffer = false;     // layer 1 allocates a scratch buffer the recording did not
};

// y[r, j] = sum_k a[r, k] * b[k, j];  a [rows, inner], b [inner, cols]
void matmul(const float* a, const float* b, float* y, int rows, int inner, int cols) {
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < cols; ++j) {
      float sum = 0.0f;
      for (int k = 0; k < inner; ++k) sum += a[r * inner + k] * b[k * cols + j];
      y[r * cols + j] = sum;
    }
  }
}

/// One training-like step of `model` with every activation allocated from
/// `memory`; returns the final activation [n, n]. Each piece of work runs on
/// `stream`; a buffer is freed only after the work reading it has finished.
template <memo::MemoryResource R>
std::vector<float> run_step(host_backend& backend, host_backend::stream& stream, R& memory,
                            const toy_model& model, variant options = {}) {
  using buf = memo::buffer<float, R>;
  const int n = model.n;
  const auto nn = static_cast<std::size_t>(n * n);
  auto run = [&](auto work) {
    backend.enqueue(stream, work);
    backend.synchronize(stream);
  };
  buf x(memory, nn);  // [n, n] the layer input, born outside every section
  run([p = x.data(), n] {
    for (int i = 0; i < n * n; ++i) p[i] = static_cast<float>((i * 7 % 11) - 5) / 8.0f;
  });
  std::vector<buf> saved;  // per layer: [n] row sums, made forward, used backward
  for (int l = 0; l < model.layers; ++l) {
    const std::string section = "layer " + std::to_string(l) + " forward";
    memo::mark_section_begin(memory, section);
    const float* w = model.w.data() + static_cast<std::size_t>(l) * nn;
    const float* v = model.v.data() + static_cast<std::size_t>(l) * 2 * nn;
    buf h(memory, nn);  // [n, n]
    run([x = x.data(), w, h = h.data(), n] { matmul(x, w, h, n, n, n); });
    buf a(memory, nn);  // [n, n]
    run([h = h.data(), a = a.data(), n] {
      for (int i = 0; i < n * n; ++i) a[i] = std::tanh(h[i]) + 0.5f * h[i];
    });
    h = buf();
    const bool bigger = options.bigger_c && l == 1;
    buf c(memory, 2 * nn + (bigger ? 1 : 0));  // [n, 2n] = [a | x]
    run([a = a.data(), x = x.data(), c = c.data(), n] {
      for (int r = 0; r < n; ++r) {
        for (int j = 0; j < n; ++j) {
          c[r * 2 * n + j] = a[r * n + j];
          c[r * 2 * n + n + j] = x[r * n + j];
        }
      }
    });
    buf s(memory, static_cast<std::size_t>(n));  // [n] saved for the backward pass
    run([c = c.data(), s = s.data(), n] {
      for (int r = 0; r < n; ++r) {
        float sum = 0.0f;
        for (int j = 0; j < 2 * n; ++j) sum += c[r * 2 * n + j];
        s[r] = sum;
      }
    });
    std::vector<buf> scratch;
    if (options.extra_buffer && l == 1) scratch.emplace_back(memory, nn);
    buf y(memory, nn);  // [n, n] the next layer's input
    auto compute_y = [a = a.data(), c = c.data(), v, y = y.data(), n] {
      matmul(c, v, y, n, 2 * n, n);
      for (int i = 0; i < n * n; ++i) y[i] += 0.25f * a[i];
    };
    if (options.read_after_free && l == 1) {
      a = buf();  // the bug: `a` is freed before its last use
      run(compute_y);
    } else {
      run(compute_y);
      a = buf();
    }
    scratch.clear();
    c = buf();
    x = std::move(y);
    saved.push_back(std::move(s));
    memo::mark_section_end(memory, section);
  }
  for (int l = model.layers - 1; l >= 0; --l) {
    const std::string section = "layer " + std::to_string(l) + " backward";
    memo::mark_section_begin(memory, section);
    buf g(memory, nn);  // [n, n]
    run([x = x.data(), s = saved[static_cast<std::size_t>(l)].data(), g = g.data(), n] {
      for (int r = 0; r < n; ++r) {
        for (int j = 0; j < n; ++j) g[r * n + j] = x[r * n + j] * (1.0f + s[r] / static_cast<float>(n));
      }
    });
    saved[static_cast<std::size_t>(l)] = buf();
    saved.pop_back();
    buf t(memory, static_cast<std::size_t>(n));  // [n] column maxima of g
    run([g = g.data(), t = t.data(), n] {
      for (int j = 0; j < n; ++j) {
        float best = g[j];
        for (int r = 1; r < n; ++r) best = std::max(best, g[r * n + j]);
        t[j] = best;
      }
    });
    buf z(memory, nn);  // [n, n]
    run([g = g.data(), t = t.data(), z = z.data(), n] {
      for (int r = 0; r < n; ++r) {
        for (int j = 0; j < n; ++j) z[r * n + j] = (g[r * n + j] - t[j]) * 0.5f;
      }
    });
    g = buf();
    t = buf();
    x = std::move(z);
    memo::mark_section_end(memory, section);
  }
  std::vector<float> result(nn);
  run([x = x.data(), out = result.data(), nn] { std::memcpy(out, x, nn * sizeof(float)); });
  return result;
}

memo::arena_options poisoning(bool on) {
  memo::arena_options options;
  options.poison = on;
  return options;
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Forwards to a resource and checks, independently of any plan, that no two
// allocations live at the same time share a byte and that each lies inside
// `bounds`. Brute force over the live set.
template <memo::MemoryResource R>
class overlap_checker {
 public:
  overlap_checker(R& inner, memo::memory_region bounds) : inner_(&inner), bounds_(bounds) {}
  void* allocate(std::size_t bytes, std::size_t alignment = memo::default_alignment_bytes) {
    void* p = inner_->allocate(bytes, alignment);
    const auto* begin = static_cast<const std::byte*>(p);
    if (begin < bounds_.data || begin + bytes > bounds_.data + bounds_.bytes) ++outside;
    if (!memo::is_aligned(p, alignment)) ++misaligned;
    for (const auto& [q, size] : live_) {
      const auto* other = static_cast<const std::byte*>(q);
      if (begin < other + size && other < begin + bytes) ++overlaps;
    }
    for (const auto& [q, size] : ever_) {
      const auto* other = static_cast<const std::byte*>(q);
      if (begin < other + size && other < begin + bytes && q != p) reused = true;
    }
    live_.emplace_back(p, bytes);
    ever_.emplace_back(p, bytes);
    return p;
  }
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = memo::default_alignment_bytes) {
    std::erase_if(live_, [&](const auto& entry) { return entry.first == p; });
    inner_->deallocate(p, bytes, alignment);
  }
  void begin_section(std::string_view name) { memo::mark_section_begin(*inner_, name); }
  void end_section(std::string_view name) { memo::mark_section_end(*inner_, name); }
  std::size_t current_bytes() const { return inner_->current_bytes(); }
  std::size_t peak_bytes() const { return inner_->peak_bytes(); }
  void reset_peak() { inner_->reset_peak(); }

  int overlaps = 0;
  int outside = 0;
  int misaligned = 0;
  bool reused = false;  // two buffers at different times share bytes

 private:
  R* inner_;
  memo::memory_region bounds_;
  std::vector<std::pair<void*, std::size_t>> live_;
  std::vector<std::pair<void*, std::size_t>> ever_;
};

memo::memory_trace record(host_backend& backend, host_backend::stream& stream, const toy_model& model,
                          std::vector<float>* result = nullptr) {
  memo::recording_resource recorder(backend.device_memory(), "toy model");
  auto out = run_step(backend, stream, recorder, model);
  if (result != nullptr) *result = std::move(out);
  return recorder.trace();
}

}  // namespace

TEST_CASE("planned_replay: record, plan (bi-level and greedy), replay: same bits, device peak = plan peak") {
  host_backend backend;
  auto stream = backend.make_stream("compute");
  const toy_model model;
  auto& device = backend.device_memory();

  const auto reference = run_step(backend, stream, device, model);  // ordinary allocation
  std::vector<float> recorded_result;
  const memo::memory_trace trace = record(backend, stream, model, &recorded_result);
  CHECK(bit_identical(recorded_result, reference));
  REQUIRE(trace.sections.size() == 6);
  REQUIRE(trace.never_freed.empty());

  memo::dsa_solve_options solve;
  solve.time_limit_seconds = 5.0;
  memo::bilevel_planner<> bilevel;
  const auto planned = bilevel.plan(trace, solve);
  // The forward passes are alike, and so are the backward passes of layers 2
  // and 1; layer 0's output is freed by the request right after its section,
  // which makes it one of that section's transients: 3 distinct solves.
  CHECK(planned.level1_solves == 3);
  const auto greedy = memo::greedy_by_size_solver{}.solve(trace.problem, solve);

  std::uint64_t total_bytes = 0;
  for (const auto& b : trace.problem.buffers) total_bytes += b.size_bytes;

  for (const auto* plan : {&planned.plan, &greedy.plan}) {
    CAPTURE(plan == &planned.plan ? "bilevel" : "greedy-size");
    REQUIRE(device.current_bytes() == 0);
    CHECK(plan->peak_bytes < total_bytes);  // the plan reuses memory
    device.reset_peak();
    memo::planned_arena arena(backend, trace, *plan, poisoning(true));  // its device memory
    const auto allocations = device.allocation_count();
    const auto deallocations = device.deallocation_count();
    {
      memo::planned_replay_resource replay(arena);
      for (int step = 0; step < 3; ++step) {
        overlap_checker checked(replay, arena.memory());
        const auto result = run_step(backend, stream, checked, model);
        replay.end_step();
        CHECK(bit_identical(result, reference));
        CHECK(checked.overlaps == 0);
        CHECK(checked.outside == 0);
        CHECK(checked.misaligned == 0);
        CHECK(checked.reused);
        CHECK(replay.current_bytes() == 0);
      }
      CHECK(replay.steps_completed() == 3);
      CHECK(replay.allocation_count() == 3 * trace.problem.buffers.size());
      CHECK(replay.peak_bytes() == memo::lower_bound_bytes(trace.problem));
    }
    // Nothing came from the backend during the steps; the arena is the peak.
    CHECK(device.allocation_count() == allocations);
    CHECK(device.deallocation_count() == deallocations);
    CHECK(device.peak_bytes() == plan->peak_bytes);
    CHECK(device.current_bytes() == plan->peak_bytes);
  }
  CHECK(device.current_bytes() == 0);
}

TEST_CASE("planned_replay: a use after free changes the result when poisoning, and only then") {
  host_backend backend;
  auto stream = backend.make_stream("compute");
  const toy_model model;
  const auto reference = run_step(backend, stream, backend.device_memory(), model);
  const auto trace = record(backend, stream, model);
  const auto plan = memo::bilevel_planner<>{}.plan(trace).plan;

  // The id of layer 1's `a`, from the trace: the second buffer born in
  // "layer 1 forward".
  const auto& layer1 = trace.sections[1];
  REQUIRE(layer1.name == "layer 1 forward");
  std::vector<std::uint64_t> born;
  for (const auto& b : trace.problem.buffers) {
    if (b.lower >= layer1.begin && b.lower < layer1.end) born.push_back(b.id);
  }
  REQUIRE(born.size() >= 2);
  const std::uint64_t a_id = born[1];  // h, a, c, s, y in allocation order

  SUBCASE("poisoned: the stale read sees NaN") {
    memo::planned_arena arena(backend.device_memory(), trace, plan, poisoning(true));
    memo::planned_replay_resource replay(arena);
    const auto correct = run_step(backend, stream, replay, model);
    replay.end_step();
    CHECK(bit_identical(correct, reference));
    const auto buggy = run_step(backend, stream, replay, model, {.read_after_free = true});
    replay.end_step();  // the requests were the same: the plan cannot see the bug
    CHECK_FALSE(bit_identical(buggy, reference));
    CHECK(std::any_of(buggy.begin(), buggy.end(), [](float f) { return std::isnan(f); }));
    // Independently: after a step every buffer is dead, so its bytes are the poison.
    const auto region = arena.region(a_id);
    CHECK(std::all_of(region.data, region.data + region.bytes,
                      [](std::byte b) { return b == std::byte{0xFF}; }));
  }
  SUBCASE("not poisoned: the same bug goes unnoticed") {
    memo::planned_arena arena(backend.device_memory(), trace, plan, poisoning(false));
    memo::planned_replay_resource replay(arena);
    const auto buggy = run_step(backend, stream, replay, model, {.read_after_free = true});
    replay.end_step();
    CHECK(bit_identical(buggy, reference));
  }
}

TEST_CASE("planned_replay: a program that strays from the trace is an error naming the request") {
  host_backend backend;
  auto stream = backend.make_stream("compute");
  const toy_model model;
  const auto trace = record(backend, stream, model);
  const auto plan = memo::greedy_by_size_solver{}.solve(trace.problem).plan;
  memo::planned_arena arena(backend.device_memory(), trace, plan);
  memo::planned_replay_resource replay(arena);

  // Where layer 1's `c` is allocated, from the trace: the third malloc of the section.
  const auto& layer1 = trace.sections[1];
  std::vector<const memo::dsa_buffer*> born;
  for (const auto& b : trace.problem.buffers) {
    if (b.lower >= layer1.begin && b.lower < layer1.end) born.push_back(&b);
  }
  std::sort(born.begin(), born.end(), [](auto* x, auto* y) { return x->lower < y->lower; });
  const auto c = *born[2];
  const auto y = *born[4];

  SUBCASE("a different size") {
    const std::string message = "request " + std::to_string(c.lower) +
                                " does not match the trace: expected malloc of " +
                                std::to_string(c.size_bytes) + " bytes (buffer " + std::to_string(c.id) +
                                "), got malloc of " + std::to_string(c.size_bytes + 4) + " bytes";
    CHECK_THROWS_WITH_AS(run_step(backend, stream, replay, model, {.bigger_c = true}),
                         doctest::Contains(message.c_str()), memo::error);
  }
  SUBCASE("an extra request") {
    // The scratch buffer takes the place of `y`: same size, so the size matches,
    // but `y`'s own request then meets the free of `a`.
    CHECK_THROWS_WITH_AS(run_step(backend, stream, replay, model, {.extra_buffer = true}),
                         doctest::Contains(("request " + std::to_string(y.lower + 1) +
                                            " does not match the trace: expected free of")
                                               .c_str()),
                         memo::error);
  }
  // Unwinding freed everything out of order: the replay stays failed until reset.
  CHECK(replay.failure().has_value());
  CHECK_THROWS_AS(replay.end_step(), memo::error);
  CHECK(replay.current_bytes() == 0);
  replay.reset();
  CHECK(replay.position() == 0);
  CHECK_NOTHROW(run_step(backend, stream, replay, model));
  CHECK_NOTHROW(replay.end_step());
}

TEST_CASE("planned_replay: hand-worked trace: order, sizes, extra requests, sections") {
  const auto trace = memo::parse_trace(
      "section begin layer 0 forward\n"
      "malloc 0 100\nmalloc 1 200\nfree 0 100\n"
      "section end layer 0 forward\n"
      "free 1 200\n");
  const memo::dsa_plan plan{{0, 256}, 456};  // buffer 0 at 0, buffer 1 at 256
  memo::host_memory_resource device("device");
  memo::planned_arena arena(device, trace, plan);
  CHECK(device.allocation_count() == 1);
  CHECK(device.current_bytes() == 456);
  memo::planned_replay_resource replay(arena);
  auto* base = arena.memory().data;

  SUBCASE("the planned addresses in recorded order, then the next step") {
    for (int step = 0; step < 2; ++step) {
      replay.begin_section("layer 0 forward");
      void* p0 = replay.allocate(100);
      void* p1 = replay.allocate(200);
      CHECK(p0 == base);
      CHECK(p1 == base + 256);
      replay.deallocate(p0, 100);
      replay.end_section("layer 0 forward");
      replay.deallocate(p1, 200);
      replay.end_step();
    }
    CHECK(replay.steps_completed() == 2);
    CHECK(device.allocation_count() == 1);
  }
  SUBCASE("a wrong size") {
    (void)replay.allocate(100);
    CHECK_THROWS_WITH_AS((void)replay.allocate(300),
                         doctest::Contains("request 1 does not match the trace: expected malloc of "
                                           "200 bytes (buffer 1), got malloc of 300 bytes"),
                         memo::error);
    replay.deallocate(base, 100);
  }
  SUBCASE("an extra request after the last one") {
    void* p0 = replay.allocate(100);
    void* p1 = replay.allocate(200);
    replay.deallocate(p0, 100);
    replay.deallocate(p1, 200);
    CHECK_THROWS_WITH_AS((void)replay.allocate(8),
                         doctest::Contains("request 4 does not match the trace: expected no request "
                                           "(the step has 4; call end_step() between steps), "
                                           "got malloc of 8 bytes"),
                         memo::error);
  }
  SUBCASE("a free out of order fails the step, reported by end_step and the next malloc") {
    void* p0 = replay.allocate(100);
    void* p1 = replay.allocate(200);
    replay.deallocate(p1, 200);  // the trace frees buffer 0 first
    CHECK(replay.failure().has_value());
    CHECK_THROWS_WITH_AS(replay.end_step(),
                         doctest::Contains("request 2 does not match the trace: expected free of 100 "
                                           "bytes (buffer 0), got free of 200 bytes of buffer 1"),
                         memo::error);
    CHECK_THROWS_AS((void)replay.allocate(100), memo::error);
    CHECK_THROWS_WITH_AS(replay.reset(), doctest::Contains("1 allocation(s) still live"), memo::error);
    replay.deallocate(p0, 100);
    replay.reset();
    CHECK_FALSE(replay.failure().has_value());
  }
  SUBCASE("a step ended early") {
    void* p0 = replay.allocate(100);
    CHECK_THROWS_WITH_AS(replay.end_step(),
                         doctest::Contains("request 1 does not match the trace: expected malloc of "
                                           "200 bytes (buffer 1), got end_step() after 1 of 4"),
                         memo::error);
    replay.deallocate(p0, 100);
    replay.reset();
  }
  SUBCASE("a section marker where the trace has none") {
    (void)replay.allocate(100);
    CHECK_THROWS_WITH_AS(replay.end_section("layer 0 forward"),
                         doctest::Contains("expected section 'layer 0 forward' ending at request 3"),
                         memo::error);
    CHECK_THROWS_WITH_AS(replay.begin_section("embedding"),
                         doctest::Contains("no section named 'embedding'"), memo::error);
    replay.deallocate(base, 100);
  }
  SUBCASE("a free of a pointer it never handed out") {
    int local = 0;
    replay.deallocate(&local, 4);
    REQUIRE(replay.failure().has_value());
    CHECK(replay.failure()->find("got free of 4 bytes at a pointer outside the arena") !=
          std::string::npos);
    replay.reset();
  }
}

TEST_CASE("planned_replay: lifetime errors are reported, not crashes") {
  const auto trace = memo::parse_trace("malloc 0 64\nmalloc 1 64\nfree 1 64\nfree 0 64\n");
  const memo::dsa_plan plan{{0, 256}, 320};
  memo::host_memory_resource device("device");
  std::vector<std::string> reports;
  memo::arena_options options;
  options.on_lifetime_error = [&](const memo::error& e) { reports.push_back(e.message()); };

  SUBCASE("the arena destroyed while a replayed buffer is live") {
    auto arena = std::make_unique<memo::planned_arena>(device, trace, plan, options);
    memo::planned_replay_resource replay(*arena);
    auto* p = static_cast<unsigned char*>(replay.allocate(64));
    arena.reset();
    REQUIRE(reports.size() == 1);
    CHECK(reports[0].find("planned_arena destroyed while 1 replayed allocation(s) are live") !=
          std::string::npos);
    p[63] = 7;  // still the arena's memory: kept, not freed under the program
    CHECK(device.current_bytes() == 320);
    CHECK_THROWS_WITH_AS((void)replay.allocate(64), doctest::Contains("planned_arena was destroyed"),
                         memo::error);
    replay.deallocate(p, 64);  // the last live buffer returns the memory
    CHECK(device.current_bytes() == 0);
    CHECK(device.deallocation_count() == 1);
  }
  SUBCASE("two replay resources over one arena") {
    memo::planned_arena arena(device, trace, plan, options);
    memo::planned_replay_resource first(arena);
    CHECK_THROWS_WITH_AS(memo::planned_replay_resource{arena}, doctest::Contains("one at a time"),
                         memo::error);
  }
  SUBCASE("a replay resource destroyed with live allocations") {
    memo::planned_arena arena(device, trace, plan, options);
    {
      memo::planned_replay_resource replay(arena);
      (void)replay.allocate(64);
    }
    REQUIRE(reports.size() == 1);
    CHECK(reports[0].find("destroyed with 1 allocation(s) live") != std::string::npos);
  }
  SUBCASE("the arena destroyed, then the replay resource with a buffer live") {
    // The replay resource takes its live buffers back when it goes, so the
    // arena's memory is released then, and the buffer that outlives both
    // returns nothing.
    auto arena = std::make_unique<memo::planned_arena>(device, trace, plan, options);
    auto replay = std::make_unique<memo::planned_replay_resource>(*arena);
    memo::buffer<char, memo::planned_replay_resource> survivor(*replay, 64);
    arena.reset();
    CHECK(device.current_bytes() == 320);  // kept for the live buffer
    replay.reset();
    CHECK(device.current_bytes() == 0);
    CHECK_FALSE(survivor.resource_alive());
    CHECK_THROWS_AS((void)survivor.data(), memo::error);
    REQUIRE(reports.size() == 2);
    CHECK(reports[1].find("destroyed with 1 allocation(s) live") != std::string::npos);
  }
  SUBCASE("the device resource destroyed under a replayed buffer") {
    // A buffer from the replay watches the replay resource, which is alive;
    // the memory behind it is not, and the buffer says so.
    auto owner = std::make_unique<memo::host_memory_resource>("short-lived device");
    memo::planned_arena arena(*owner, trace, plan, options);
    memo::planned_replay_resource replay(arena);
    memo::buffer<char, memo::planned_replay_resource> inside(replay, 64);
    CHECK(inside.resource_alive());
    owner.reset();
    CHECK_FALSE(inside.resource_alive());
    CHECK_THROWS_WITH_AS((void)inside.data(), doctest::Contains("after the memory resource"), memo::error);
    CHECK_THROWS_WITH_AS((void)replay.allocate(64), doctest::Contains("its arena was allocated from was destroyed"),
                         memo::error);
    inside = {};  // returned to the replay, which poisons nothing that is gone
  }
  SUBCASE("an arena allocated through a recorder whose upstream is destroyed") {
    // The arena watches the recorder, which is alive; the memory was its upstream's.
    auto owner = std::make_unique<memo::host_memory_resource>("short-lived device");
    memo::recording_resource recorder(*owner, "arena allocation");
    memo::arena_options poisoning = options;
    poisoning.poison = true;
    poisoning.fill = [](memo::memory_region region, std::byte value) {
      std::memset(region.data, static_cast<int>(value), region.bytes);
    };
    memo::planned_arena arena(recorder, trace, plan, poisoning);
    memo::planned_replay_resource replay(arena);
    owner.reset();
    CHECK_THROWS_WITH_AS((void)arena.region(0), doctest::Contains("after the memory resource"), memo::error);
    CHECK_FALSE(replay.memory_alive());
    // Refused before anything is poisoned (a write into freed memory).
    CHECK_THROWS_WITH_AS((void)replay.allocate(64), doctest::Contains("its arena was allocated from was destroyed"),
                         memo::error);
  }
  SUBCASE("a trace that never frees a buffer cannot be replayed") {
    const auto unfreed = memo::parse_trace("malloc 0 64\nmalloc 1 64\nfree 1 64\n");
    memo::planned_arena arena(device, unfreed, plan, options);
    CHECK_THROWS_WITH_AS(memo::planned_replay_resource{arena},
                         doctest::Contains("buffer 0 is never freed"), memo::error);
  }
  SUBCASE("a timeline of 2^60 instants (a DSA problem, not a request sequence)") {
    // Two buffers make at most four requests: the arena is usable for views,
    // and a replay is refused without a table of 2^60 instants.
    memo::memory_trace wide;
    wide.problem.buffers = {{0, 64, 0, std::int64_t{1} << 60, 1}, {1, 64, 5, 6, 1}};
    wide.end_time = std::int64_t{1} << 60;
    memo::planned_arena arena(device, wide, plan, options);
    CHECK(arena.region(1).data == arena.memory().data + 256);
    CHECK_THROWS_WITH_AS(memo::planned_replay_resource{arena},
                         doctest::Contains("spans 1152921504606846976 instants, but its 2 buffers make at "
                                           "most 4 requests"),
                         memo::error);
  }
  CHECK(device.current_bytes() == 0);
}

TEST_CASE("planned_replay: zero-byte requests are served without the plan") {
  const auto trace = memo::parse_trace("malloc 0 64\nfree 0 64\n");
  memo::host_memory_resource device("device");
  memo::planned_arena arena(device, trace, memo::dsa_plan{{0}, 64});
  memo::planned_replay_resource replay(arena);
  memo::buffer<float, memo::planned_replay_resource> empty(replay, 0);
  CHECK(empty.data() != nullptr);
  {
    memo::buffer<float, memo::planned_replay_resource> sixteen(replay, 16);  // [16]
    CHECK(reinterpret_cast<std::byte*>(sixteen.data()) == arena.memory().data);
  }
  CHECK_NOTHROW(replay.end_step());
}

TEST_CASE("planned_replay: poisoning fills a buffer when handed out and when freed") {
  // Buffer 2 reuses buffer 0's bytes after 0 is freed.
  const auto trace =
      memo::parse_trace("malloc 0 96\nmalloc 1 200\nfree 0 96\nmalloc 2 64\nfree 1 200\nfree 2 64\n");
  const memo::dsa_plan plan{{0, 256, 0}, 456};
  memo::host_memory_resource device("device");
  auto all_poison = [](const void* p, std::size_t bytes) {
    const auto* b = static_cast<const std::byte*>(p);
    return std::all_of(b, b + bytes, [](std::byte x) { return x == std::byte{0xFF}; });
  };
  SUBCASE("host memory, the default fill") {
    memo::planned_arena arena(device, trace, plan, poisoning(true));
    memo::planned_replay_resource replay(arena);
    void* p0 = replay.allocate(96);
    CHECK(all_poison(p0, 96));  // a read before the first write sees NaNs
    std::memset(p0, 0x11, 96);
    void* p1 = replay.allocate(200);
    std::memset(p1, 0x22, 200);
    replay.deallocate(p0, 96);
    CHECK(all_poison(p0, 96));
    void* p2 = replay.allocate(64);
    CHECK(p2 == p0);
    CHECK(all_poison(p2, 64));  // not buffer 0's leftovers
    const float* f = static_cast<const float*>(p2);
    CHECK(std::isnan(f[0]));
    replay.deallocate(p1, 200);
    CHECK(all_poison(p1, 200));
    replay.deallocate(p2, 64);
    replay.end_step();
  }
  SUBCASE("a fill function of the caller's, with the buffers' regions") {
    std::vector<std::pair<std::size_t, std::size_t>> fills;  // (offset, bytes)
    memo::arena_options options;
    options.poison = true;
    std::byte* base = nullptr;
    options.fill = [&](memo::memory_region r, std::byte value) {
      CHECK(value == std::byte{0xFF});
      fills.emplace_back(static_cast<std::size_t>(r.data - base), r.bytes);
    };
    memo::planned_arena arena(device, trace, plan, options);
    base = arena.memory().data;
    memo::planned_replay_resource replay(arena);
    void* p0 = replay.allocate(96);
    void* p1 = replay.allocate(200);
    replay.deallocate(p0, 96);
    void* p2 = replay.allocate(64);
    replay.deallocate(p1, 200);
    replay.deallocate(p2, 64);
    replay.end_step();
    const std::vector<std::pair<std::size_t, std::size_t>> expected = {
        {0, 96}, {256, 200}, {0, 96}, {0, 64}, {256, 200}, {0, 64}};
    CHECK(fills == expected);
  }
}
