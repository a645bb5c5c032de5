// schedule_example: one MEMO training step as a stream schedule, simulated
// and executed.
//
//   1. build the step of a 6-layer model (alpha = 0.5, K = 2 rounding buffers)
//      from plain numbers with memo::build_memo_step;
//   2. bind host work to its compute ops (a multiply-add loop of the op's
//      FLOP count);
//   3. describe this machine as a device_profile (its measured FLOP rate, the
//      host backend's copy throttle) and simulate the step on it;
//   4. instantiate the same schedule on memo::host_backend once (streams,
//      events, copy scratch) and launch it for a few steps, as a trainer
//      launches a CUDA graph every iteration;
//   5. compare the two timelines and write both as Chrome traces.
//
// Usage: schedule_example [output-directory] [--json]
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include "memo/backend/host_backend.hpp"
#include "memo/core/command_line.hpp"
#include "memo/core/json.hpp"
#include "memo/schedule/memo_step.hpp"
#include "memo/schedule/stream_schedule.hpp"

namespace {

// Spends `flops` floating-point operations (one multiply and one add per
// iteration) on the calling thread and returns a value the caller keeps, so
// the loop cannot be optimised away.
double spend_flops(double flops) {
  double value = 1.0;
  const auto iterations = static_cast<long>(flops / 2.0);
  for (long i = 0; i < iterations; ++i) value = value * 0.999999 + 1e-7;
  return value;
}

// This host's FLOP rate for spend_flops, measured once.
double measure_host_flops() {
  const double flops = 2e7;
  const auto start = std::chrono::steady_clock::now();
  volatile double sink = spend_flops(flops);
  static_cast<void>(sink);
  const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
  return flops / seconds.count();
}

}  // namespace

int example_main(int argc, char** argv) {
  std::optional<std::string> directory;
  bool json = false;
  memo::command_arguments args(argc, argv);
  while (!args.done()) {
    const std::string_view arg = args.next();
    if (arg == "--json") {
      json = true;
    } else if (arg.starts_with("--") || directory) {
      args.unknown();
    } else if (arg.empty()) {
      throw memo::usage_error("an empty output directory (give '.' for this one)");
    } else {
      directory = std::string(arg);
    }
  }

  // 1. The step: per layer 4 MFLOP forward (backward 2x), 1 MB input + 1 MB
  //    attention output offloaded whole, 4 MB of other skeletal tensors of
  //    which alpha = 0.5 is offloaded and the rest recomputed (2.5 MFLOP for
  //    all of it).
  memo::memo_step_config config;
  config.layers = 6;
  config.alpha = 0.5;
  config.layer_forward_flops = 4e6;
  config.recompute_flops = 2.5e6;
  config.input_bytes = 1'000'000;
  config.attention_output_bytes = 1'000'000;
  config.other_bytes = 4'000'000;
  memo::memo_step step = memo::build_memo_step(config);

  // 2. Real work for every compute op; copies run between executor-owned
  //    scratch buffers because the config gave no pointers.
  for (std::size_t i = 0; i < step.schedule.size(); ++i) {
    const memo::op_id id{i};
    const auto& op = step.schedule.op(id);
    if (op.kind() != memo::op_kind::compute) continue;
    step.schedule.set_work(id, [flops = op.flops()](memo::native_stream_ref) {
      volatile double sink = spend_flops(flops);
      static_cast<void>(sink);
    });
  }

  // 3. This machine as a device profile, and the simulation on it.
  const double copy_bytes_per_second = 1e9;
  memo::device_profile host;
  host.name = "this host";
  host.peak_flops = measure_host_flops();
  host.efficiency = 1.0;
  host.host_to_device_bytes_per_second = copy_bytes_per_second;
  host.device_to_host_bytes_per_second = copy_bytes_per_second;
  const memo::timeline simulated = step.schedule.simulate(host);

  // 4. Execution on the host backend, copies throttled to the same bandwidth.
  memo::host_backend::options options;
  options.host_to_device_bytes_per_second = copy_bytes_per_second;
  options.device_to_host_bytes_per_second = copy_bytes_per_second;
  memo::host_backend backend(options);
  auto instance = step.schedule.instantiate(backend);  // streams, events, scratch: once
  constexpr int steps = 3;
  for (int i = 0; i < steps; ++i) instance.launch();  // enqueues only
  instance.synchronize();
  const memo::timeline executed = instance.last_timeline();

  // 5. Compare and export.
  const std::string difference = executed.op_order_difference(simulated);
  const std::string simulated_path = directory.value_or(".") + "/memo_step_simulated.json";
  const std::string executed_path = directory.value_or(".") + "/memo_step_executed.json";
  simulated.write_chrome_trace(simulated_path);
  executed.write_chrome_trace(executed_path);

  const double ratio = executed.makespan_seconds() / simulated.makespan_seconds();
  if (json) {
    memo::json_writer out;
    out.begin_object()
        .field("host_flops", host.peak_flops)
        .field("launches", instance.launches())
        .field("simulated_makespan_seconds", simulated.makespan_seconds())
        .field("executed_makespan_seconds", executed.makespan_seconds())
        .field("executed_over_simulated", ratio)
        .field("simulated_compute_stall_seconds", simulated.stall_seconds("compute"))
        .field("executed_compute_stall_seconds", executed.stall_seconds("compute"))
        .field("same_op_order", difference.empty());
    out.key("traces").begin_array().value(simulated_path).value(executed_path).end_array();
    out.end_object();
    std::printf("%s\n", out.str().c_str());
  } else {
    std::printf("host FLOP rate: %.3g FLOP/s\n\n%s\n%s\n", host.peak_flops,
                simulated.summary().c_str(), executed.summary().c_str());
    std::printf("executed (last of %d launches) / simulated makespan: %.3f\n", steps, ratio);
    std::printf("op order per stream: %s\n",
                difference.empty() ? "identical" : difference.c_str());
    std::printf("Chrome traces: %s, %s (open in https://ui.perfetto.dev)\n",
                simulated_path.c_str(), executed_path.c_str());
  }
  return difference.empty() ? 0 : 1;
}

int main(int argc, char** argv) {
  return memo::run_command("schedule_example", "usage: schedule_example [output-directory] [--json]\n",
                           [&] { return example_main(argc, argv); });
}
