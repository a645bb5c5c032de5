// arena_example: record -> plan -> replay (MEMO section 4.3).
//
// A two-layer "model" allocates its activations from whatever memory resource
// it is given. It runs once on the backend's device memory (the reference),
// once through a recording resource (the job profiler: the trace), and then,
// after the bi-level planner has placed every buffer, several steps over a
// planned arena (the runtime executor: no allocation at all). The replayed
// steps must give the reference's bits, allocate nothing from the device,
// and use exactly the plan's peak. Last, the same plan is laid inside a
// block someone else owns, sized in two phases.
//
// Usage: arena_example
#include <memo/backend/buffer.hpp>
#include <memo/backend/host_backend.hpp>
#include <memo/core/command_line.hpp>
#include <memo/core/memory_region.hpp>
#include <memo/plan/bilevel_planner.hpp>
#include <memo/plan/planned_arena.hpp>
#include <memo/plan/planned_replay.hpp>
#include <memo/plan/recording_resource.hpp>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr int tokens = 64;
constexpr int hidden = 32;
constexpr int layers = 2;

/// One step: forward through `layers` layers, keeping one saved tensor per
/// layer for the backward pass. Any memo::MemoryResource works.
template <memo::MemoryResource R>
std::vector<float> step(memo::host_backend& backend, memo::host_backend::stream& compute, R& memory) {
  using activation = memo::buffer<float, R>;
  const std::size_t size = tokens * hidden;
  auto run = [&](auto work) {  // enqueue, then wait: a buffer is freed only when idle
    backend.enqueue(compute, work);
    backend.synchronize(compute);
  };
  activation x(memory, size);  // [tokens, hidden]
  run([x = x.data(), size] {
    for (std::size_t i = 0; i < size; ++i) x[i] = std::sin(0.01f * static_cast<float>(i));
  });
  std::vector<activation> saved;
  for (int l = 0; l < layers; ++l) {
    const std::string name = "layer " + std::to_string(l) + " forward";
    memo::mark_section_begin(memory, name);
    activation h(memory, 4 * size);  // [tokens, 4 * hidden]: transient
    run([h = h.data(), x = x.data(), size] {
      for (std::size_t i = 0; i < 4 * size; ++i) h[i] = std::tanh(x[i % size] * static_cast<float>(i % 4 + 1));
    });
    activation y(memory, size);  // [tokens, hidden]: the next layer's input
    activation s(memory, tokens);  // [tokens]: saved for backward
    run([h = h.data(), y = y.data(), s = s.data(), size] {
      for (std::size_t i = 0; i < size; ++i) y[i] = h[4 * i] + 0.5f * h[4 * i + 3];
      for (int t = 0; t < tokens; ++t) s[t] = h[static_cast<std::size_t>(t) * 4 * hidden];
    });
    h = activation();
    x = std::move(y);
    saved.push_back(std::move(s));
    memo::mark_section_end(memory, name);
  }
  for (int l = layers - 1; l >= 0; --l) {
    const std::string name = "layer " + std::to_string(l) + " backward";
    memo::mark_section_begin(memory, name);
    activation g(memory, size);  // [tokens, hidden]
    run([g = g.data(), x = x.data(), s = saved.back().data()] {
      for (int t = 0; t < tokens; ++t) {
        for (int c = 0; c < hidden; ++c) g[t * hidden + c] = x[t * hidden + c] * (1.0f + s[t]);
      }
    });
    saved.pop_back();
    x = std::move(g);
    memo::mark_section_end(memory, name);
  }
  std::vector<float> out(size);
  run([x = x.data(), o = out.data(), size] { std::memcpy(o, x, size * sizeof(float)); });
  return out;
}

}  // namespace

int example_main() {
  memo::host_backend backend;
  auto compute = backend.make_stream("compute");
  auto& device = backend.device_memory();

  // 1. The reference: ordinary allocation from the device resource.
  const std::vector<float> reference = step(backend, compute, device);

  // 2. Record one step: every request, with section markers.
  memo::recording_resource recorder(device, "arena_example");
  (void)step(backend, compute, recorder);
  const memo::memory_trace trace = recorder.trace();

  // 3. Plan it with the bi-level planner.
  const memo::bilevel_result planned = memo::bilevel_planner<>{}.plan(trace);

  // 4. One device allocation of the plan's peak; replay steps over it.
  device.reset_peak();
  memo::planned_arena arena(device, trace, planned.plan);
  const auto allocations_before = device.allocation_count();
  memo::planned_replay_resource replay(arena);
  bool identical = true;
  for (int i = 0; i < 3; ++i) {
    const std::vector<float> result = step(backend, compute, replay);
    replay.end_step();  // every recorded request was made, in order
    identical = identical && std::memcmp(result.data(), reference.data(),
                                         reference.size() * sizeof(float)) == 0;
  }
  const auto allocations_during_steps = device.allocation_count() - allocations_before;
  const std::size_t device_peak = device.peak_bytes();

  // A planned buffer can also be used directly, as a typed view.
  const auto first = trace.problem.buffers.front();
  const auto x0 = arena.view<float>(first.id, {tokens, hidden});

  // 5. The same plan inside memory someone else owns: size a workspace and
  //    the arena together (counting mode), take one block, carve it.
  constexpr std::size_t workspace_bytes = 4096;
  memo::region_carver sizing;
  (void)sizing.take(workspace_bytes, "workspace");
  (void)memo::planned_arena::take_region(sizing, trace, planned.plan);
  const std::size_t block_bytes = sizing.required_bytes();
  void* block = device.allocate(block_bytes);
  bool carved_ok = false;
  {
    memo::region_carver carver({static_cast<std::byte*>(block), block_bytes}, "step memory");
    const memo::memory_region workspace = carver.take(workspace_bytes, "workspace");
    memo::planned_arena inner(memo::planned_arena::take_region(carver, trace, planned.plan), trace,
                              planned.plan);
    carved_ok = workspace.bytes == workspace_bytes &&
                inner.region(first.id).data == inner.memory().data + inner.offset(first.id);
  }
  device.deallocate(block, block_bytes);

  std::printf("requests recorded      %lld (%zu buffers, %zu sections)\n",
              static_cast<long long>(trace.end_time), trace.problem.buffers.size(),
              trace.sections.size());
  std::printf("lower bound            %s\n", memo::format_bytes(planned.flat_lower_bound_bytes).c_str());
  std::printf("bi-level plan peak     %s\n", memo::format_bytes(planned.plan.peak_bytes).c_str());
  std::printf("device peak (replay)   %s\n", memo::format_bytes(device_peak).c_str());
  std::printf("allocations in steps   %llu\n", static_cast<unsigned long long>(allocations_during_steps));
  std::printf("replayed steps         %llu, results %s\n",
              static_cast<unsigned long long>(replay.steps_completed()),
              identical ? "bit-identical" : "DIFFERENT");
  std::printf("view of buffer %-8llu [%lld, %lld] at offset %llu\n",
              static_cast<unsigned long long>(first.id), static_cast<long long>(x0.extent(0)),
              static_cast<long long>(x0.extent(1)),
              static_cast<unsigned long long>(arena.offset(first.id)));

  std::printf("arena over a region     %zu bytes with a %zu-byte workspace: %s\n", block_bytes,
              workspace_bytes, carved_ok ? "ok" : "WRONG");

  const bool ok = identical && carved_ok && allocations_during_steps == 0 &&
                  device_peak == planned.plan.peak_bytes;
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  return memo::run_command("arena_example", "usage: arena_example (no arguments)\n", [&] {
    memo::command_arguments(argc, argv).none();
    return example_main();
  });
}
