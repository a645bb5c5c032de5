// train_gpt: trains the reference GPT-2 (llm.c's model, fp32) with memo.
//
// By default it trains a one-layer GPT-2 with a context of 4096 tokens on the
// built-in recall task (include/memo/model/builtin_data.hpp): each sequence
// states a random binding of keys to values in its first half and asks for
// it in its second half, so the loss on the answers falls below what the
// values' frequencies alone give only when attention matches each query to
// its own key's facts, thousands of tokens back. It prints the loss on the
// answers whose facts are all more than a quarter of the context back.
// --task copy trains the copy task instead (the second half repeats the
// first). With --data it trains on an llm.c token file (GPT-2's vocabulary),
// and it reads and writes llm.c checkpoints.
//
// One sequence of --context tokens per step (batch 1), AdamW, on the host
// backend (all cores).
//
// Memory (MEMO sections 4.1-4.3, docs/model.md): a step's device memory is
// one planned arena, laid out by the bi-level plan of the step's recorded
// requests; with --alpha the skeletal tensors of every layer but the last
// two go to host memory through two rounding buffers (a fraction alpha of
// the token-wise ones, the rest recomputed), `auto` taking alpha from the
// LP fed by this machine's measured profile. Before training it prints the
// plan; --print-plan prints it and stops.
//
// Across ranks (mpirun -np P train_gpt --sp S --pp Q, P = S x Q) it trains
// the same model with FPDT sequence parallelism over S ranks per stage and
// SPPO pipeline stages (memo/model/gpt2_parallel_training.hpp); the losses
// equal the single-rank run's for the same seed and data. There --alpha
// gives SPPO's offload ratio of every subsequence (X), one per subsequence
// (a0,a1,...), or `auto` (SPPO section 5.2: each subsequence offloads what
// its neighbour's compute hides, from this machine's measured profile):
// that share of each subsequence's skeletal rows goes to host memory
// between its forward and its backward, the rest stays on the device.
//
// smoke-args: --steps 3 --context 32
#include <memo/backend/host_backend.hpp>
#include <memo/backend/host_profile.hpp>
#include <memo/core/atomic_file.hpp>
#include <memo/core/bytes.hpp>
#include <memo/core/error.hpp>
#include <memo/core/json.hpp>
#include <memo/core/command_line.hpp>
#include <memo/core/report_output.hpp>
#include <memo/core/text.hpp>
#include <memo/model/binary_file.hpp>
#include <memo/model/builtin_data.hpp>
#include <memo/model/checkpoint.hpp>
#include <memo/model/gpt2_model.hpp>
#include <memo/model/gpt2_memory.hpp>
#include <memo/model/gpt2_parallel_training.hpp>
#include <memo/model/token_data.hpp>
#include <memo/plan/caching_allocator.hpp>
#include <memo/plan/text_input.hpp>
#include <memo/schedule/memo_step.hpp>
#if MEMO_HAS_LPSOLVE
#include <memo/pipeline/sppo_offload.hpp>
#include <memo/swap/alpha_solver.hpp>
#endif
#if MEMO_HAS_MPI
#include <memo/backend/mpi_communicator.hpp>
#endif

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <charconv>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr const char* usage =
    "usage: train_gpt [--layers N] [--channels C] [--heads H] [--context T]\n"
    "                 [--attention-chunk N] [--steps N] [--lr X] [--weight-decay X]\n"
    "                 [--init-std X] [--seed N] [--task recall|copy] [--keys K]\n"
    "                 [--values V] [--copy-vocab N] [--data FILE] [--checkpoint-in FILE]\n"
    "                 [--checkpoint-out FILE] [--log-every N] [--alpha auto|X|a0,a1,...]\n"
    "                 [--kv-offload on|off] [--device-budget BYTES] [--timeline FILE]\n"
    "                 [--print-plan] [--json] [--help]\n"
    "                 [--sp S] [--pp Q] [--subsequences N] [--partition balanced|equal]\n"
    "                 [--sequence-chunk c] [--comm-timeout SECONDS]\n"
    "                 [--overlap-reduction on|off] [--verify-collectives]   (under mpirun -np S*Q)\n"
    "Trains GPT-2 (fp32, batch 1) on a built-in task (recall: K keys bound to V\n"
    "values, default 4 and 4; copy: the second half repeats the first, ids below\n"
    "--copy-vocab, default 16), or on an llm.c token file with --data.\n"
    "Defaults: 1 layer, 64 channels, 1 head, context 4096, 200 steps, lr 3e-3,\n"
    "weights N(0, 0.02 sqrt(768 / channels)). --checkpoint-in takes the model's\n"
    "shape from the checkpoint (do not combine it with --layers/--channels/--heads).\n"
    "--alpha offloads the skeletal tensors of all but the last two layers, a fraction\n"
    "X in [0, 1] of the token-wise ones (auto: from the alpha LP on this machine's\n"
    "measured profile); --kv-offload keeps attention K/V in host memory; BYTES may\n"
    "carry a KiB/MiB/GiB/TiB suffix; --timeline writes the last step as measured and as simulated\n"
    "into one Chrome trace.\n"
    "Under mpirun, --sp S ranks per pipeline stage share every sequence (FPDT), --pp Q\n"
    "stages share the layers (SPPO) over N subsequences (default 2Q; --partition equal\n"
    "for equal lengths instead of FLOPs-balanced), each rank's chunk of --sequence-chunk\n"
    "tokens (default: the largest power of two up to 64 that fits); a rank that waits\n"
    "--comm-timeout seconds (default 600, 0 = forever) in one collective ends the job;\n"
    "--verify-collectives checks before each collective that every rank issues the same\n"
    "one (kind, element type, count, root) and names each rank's call when not.\n"
    "--overlap-reduction on (default) sums each layer's gradients behind the backward of\n"
    "the layers below it; off sums the whole gradient after the backward.\n"
    "Across ranks --alpha is SPPO's offload ratio of each subsequence's skeletal rows:\n"
    "X for all, a0,a1,... one per subsequence, auto from this machine's profile.\n";

using memo::usage_error;

enum class builtin_task { recall, copy };

struct options {
  std::int64_t layers = 1, channels = 64, heads = 1, context = 4096;
  std::int64_t attention_chunk = 0;  // 0: the model's default
  std::int64_t steps = 200;
  std::int64_t log_every = 0;  // 0: about 25 progress lines
  double lr = 3e-3, weight_decay = 0.0;
  std::optional<double> init_std;  // unset: 0.02 sqrt(768 / channels)
  std::uint64_t seed = 1;
  std::string data, checkpoint_in, checkpoint_out;
  builtin_task task = builtin_task::recall;
  std::int64_t keys = 4, values = 4;  // the recall task
  std::int64_t copy_vocab = 16;       // the copy task: token ids in [0, copy_vocab)
  bool json = false, shape_given = false;
  std::set<std::string, std::less<>> given;  // every option on the command line
  std::optional<double> alpha;  // --alpha X
  bool alpha_auto = false;      // --alpha auto
  std::vector<double> alpha_list;  // --alpha a0,a1,... (across ranks: one per subsequence)
  bool kv_offload = false;
  bool overlap_reduction = true;
  std::optional<std::uint64_t> device_budget;
  std::string timeline;
  bool print_plan = false;
  // Across ranks (0: not given).
  int sp = 0, pp = 0, subsequences = 0;
  bool equal_subsequences = false;
  std::int64_t sequence_chunk = 0;
  std::int64_t comm_timeout_seconds = 600;
  bool verify_collectives = false;
};

/// An integer in [low, high]; shapes are bounded by the int32 fields of
/// llm.c's checkpoint header.
template <class Int>
Int parse_int(std::string_view option, std::string_view text, Int low,
              Int high = std::numeric_limits<std::int32_t>::max()) {
  return memo::integer_option<Int>(option, text, low, high);
}

double parse_number(std::string_view option, const std::string& text) {
  const std::optional<double> v = memo::detail::parse_decimal(text);
  if (!v) throw usage_error(std::string(option) + " " + memo::detail::decimal_problem(text));
  if (*v < 0.0) {
    throw usage_error(std::string(option) + " '" + memo::detail::quote(text) + "' is not a non-negative number");
  }
  return *v;
}

/// The ranks mpirun started this process among (1 without a launcher).
int launched_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    if (const char* value = std::getenv(name)) return std::max(1, std::atoi(value));
  }
  return 1;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    o.given.emplace(arg);
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw usage_error(std::string(arg) + " needs a value");
      return argv[++i];
    };
    auto path = [&]() -> std::string {
      std::string text = value();
      if (text.empty()) throw usage_error(std::string(arg) + " '' is not a file name");
      return text;
    };
    if (arg == "--help") {
      std::fputs(usage, stdout);
      // Among several ranks the others may be waiting to start MPI with
      // this one: a non-zero status makes mpirun end them instead of
      // leaving them to wait forever.
      if (launched_ranks() > 1) {
        std::fprintf(stderr, "train_gpt: --help on one of %d ranks: ending the job\n", launched_ranks());
        std::exit(2);
      }
      std::exit(memo::finish_report("train_gpt", 0));
    } else if (arg == "--json") {
      o.json = true;
    } else if (arg == "--layers") {
      o.layers = parse_int<std::int64_t>(arg, value(), 1), o.shape_given = true;
    } else if (arg == "--channels") {
      o.channels = parse_int<std::int64_t>(arg, value(), 1), o.shape_given = true;
    } else if (arg == "--heads") {
      o.heads = parse_int<std::int64_t>(arg, value(), 1), o.shape_given = true;
    } else if (arg == "--context") {
      o.context = parse_int<std::int64_t>(arg, value(), 2);
    } else if (arg == "--attention-chunk") {
      o.attention_chunk = parse_int<std::int64_t>(arg, value(), 1);
    } else if (arg == "--steps") {
      o.steps = parse_int<std::int64_t>(arg, value(), 1);
    } else if (arg == "--log-every") {
      o.log_every = parse_int<std::int64_t>(arg, value(), 1);
    } else if (arg == "--lr") {
      o.lr = parse_number(arg, value());
    } else if (arg == "--weight-decay") {
      o.weight_decay = parse_number(arg, value());
    } else if (arg == "--seed") {
      o.seed = parse_int<std::uint64_t>(arg, value(), 0, std::numeric_limits<std::uint64_t>::max());
    } else if (arg == "--init-std") {
      const std::string text = value();
      o.init_std = parse_number(arg, text);
      // GPT-2 starts from 0.02; a spread above 1 is no initialisation anyone
      // trains from, and far above it fp32 overflows without a finite loss
      // ever telling (the layernorms' variance).
      if (!(*o.init_std > 0.0 && *o.init_std <= 1.0)) {
        throw usage_error("--init-std '" + memo::detail::quote(text) + "' is not a number in (0, 1]");
      }
    } else if (arg == "--task") {
      const std::string text = value();
      if (text != "recall" && text != "copy") throw usage_error("--task '" + memo::detail::quote(text) + "' is not 'recall' or 'copy'");
      o.task = text == "recall" ? builtin_task::recall : builtin_task::copy;
    } else if (arg == "--keys") {
      o.keys = parse_int<std::int64_t>(arg, value(), 1, 65536);
    } else if (arg == "--values") {
      o.values = parse_int<std::int64_t>(arg, value(), 2, 65536);
    } else if (arg == "--copy-vocab") {
      o.copy_vocab = parse_int<std::int64_t>(arg, value(), 2, 65536);
    } else if (arg == "--data") {
      o.data = path();
    } else if (arg == "--checkpoint-in") {
      o.checkpoint_in = path();
    } else if (arg == "--checkpoint-out") {
      o.checkpoint_out = path();
    } else if (arg == "--alpha") {
      const std::string text = value();
      o.alpha.reset(), o.alpha_auto = false, o.alpha_list.clear();
      if (text == "auto") {
        o.alpha_auto = true;
      } else if (text.find(',') != std::string::npos) {
        for (std::size_t begin = 0; begin <= text.size();) {
          const std::size_t end = std::min(text.find(',', begin), text.size());
          const std::string item = text.substr(begin, end - begin);
          const std::string where = "--alpha '" + memo::detail::quote(text) + "': ratio " +
                                    std::to_string(o.alpha_list.size()) + " ('" + memo::detail::quote(item) + "')";
          double a = 2.0;
          try {
            a = parse_number(arg, item);
          } catch (const usage_error&) {
            a = 2.0;  // reported below, with its place in the list
          }
          if (a > 1.0) throw usage_error(where + " is not a number in [0, 1]");
          o.alpha_list.push_back(a);
          begin = end + 1;
        }
      } else {
        const double a = parse_number(arg, text);
        if (a > 1.0) throw usage_error("--alpha '" + memo::detail::quote(text) + "' is not 'auto' or a number in [0, 1]");
        o.alpha = a;
      }
    } else if (arg == "--kv-offload") {
      const std::string text = value();
      if (text != "on" && text != "off") throw usage_error("--kv-offload '" + memo::detail::quote(text) + "' is not 'on' or 'off'");
      o.kv_offload = text == "on";
    } else if (arg == "--device-budget") {
      const std::string text = value();
      const auto bytes = memo::detail::parse_bytes(text);
      if (!bytes || *bytes == 0) {
        throw usage_error("--device-budget '" + memo::detail::quote(text) +
                          "' is not a positive byte count (digits, optionally KiB, MiB, GiB or TiB)");
      }
      o.device_budget = *bytes;
    } else if (arg == "--timeline") {
      o.timeline = path();
    } else if (arg == "--print-plan") {
      o.print_plan = true;
    } else if (arg == "--sp") {
      o.sp = parse_int<int>(arg, value(), 1, 4096);
    } else if (arg == "--pp") {
      o.pp = parse_int<int>(arg, value(), 1, 4096);
    } else if (arg == "--subsequences") {
      o.subsequences = parse_int<int>(arg, value(), 1, 1 << 20);
    } else if (arg == "--partition") {
      const std::string text = value();
      if (text != "balanced" && text != "equal") {
        throw usage_error("--partition '" + memo::detail::quote(text) + "' is not 'balanced' or 'equal'");
      }
      o.equal_subsequences = text == "equal";
    } else if (arg == "--sequence-chunk") {
      o.sequence_chunk = parse_int<std::int64_t>(arg, value(), 1);
    } else if (arg == "--overlap-reduction") {
      const std::string text(value());
      if (text != "on" && text != "off") {
        throw usage_error("--overlap-reduction '" + memo::detail::quote(text) + "' is not 'on' or 'off'");
      }
      o.overlap_reduction = text == "on";
    } else if (arg == "--verify-collectives") {
      o.verify_collectives = true;
    } else if (arg == "--comm-timeout") {
      // At most 2^31 - 1 ms, what mpi_communicator's timeout takes.
      o.comm_timeout_seconds = parse_int<std::int64_t>(arg, value(), 0, 2147483);
    } else if (arg == "--offload-kv") {
      throw usage_error("unknown option '--offload-kv' (host-resident K/V is --kv-offload on)");
    } else if (arg == "--device-memory" || arg == "--memory-budget") {
      throw usage_error("unknown option '" + std::string(arg) + "' (a device-memory budget is --device-budget BYTES)");
    } else {
      throw usage_error("unknown option '" + memo::detail::quote(arg) + "'");
    }
  }
  if (o.shape_given && !o.checkpoint_in.empty()) {
    throw usage_error("--checkpoint-in fixes the model's shape: drop --layers/--channels/--heads");
  }
  // An option that would be ignored is an error: the user meant something.
  auto refuse = [&](std::initializer_list<std::string_view> names, const std::string& why) {
    for (const std::string_view name : names) {
      if (o.given.contains(name)) throw usage_error(std::string(name) + " " + why);
    }
  };
  if (!o.data.empty()) {
    refuse({"--task", "--keys", "--values", "--copy-vocab"},
           "describes the built-in data: it does not apply with --data");
  }
  if (o.task == builtin_task::copy) refuse({"--keys", "--values"}, "describes the recall task, not --task copy");
  if (o.task == builtin_task::recall) refuse({"--copy-vocab"}, "describes the copy task: add --task copy");
  if (std::max(o.sp, 1) * std::max(o.pp, 1) == 1 && launched_ranks() == 1) {
    refuse({"--subsequences", "--partition", "--sequence-chunk", "--comm-timeout", "--overlap-reduction",
            "--verify-collectives"},
           "applies across ranks only: start more than one rank (mpirun -np P), or add --sp or --pp above 1");
    if (!o.alpha_list.empty()) {
      throw usage_error("--alpha with a list gives one offload ratio per subsequence, which applies across ranks "
                        "only: start more than one rank (mpirun -np P), or give one --alpha");
    }
  }
  // An output that is also an input would destroy it (a checkpoint may be
  // rewritten in place: it is read before the new one replaces it).
  // A device (such as /dev/null) may be both; a path that cannot be
  // resolved is not claimed to be another.
  const auto same_file = [](const std::string& a, const std::string& b) { return memo::names_same_file(a, b); };
  const std::pair<const char*, const std::string*> inputs[] = {{"--data", &o.data}, {"--checkpoint-in", &o.checkpoint_in}};
  for (const auto& [output, out_path] :
       {std::pair{"--checkpoint-out", &o.checkpoint_out}, std::pair{"--timeline", &o.timeline}}) {
    for (const auto& [input, in_path] : inputs) {
      if (std::string_view(output) == "--checkpoint-out" && std::string_view(input) == "--checkpoint-in") continue;
      if (same_file(*out_path, *in_path)) {
        throw usage_error(std::string(output) + " '" + memo::detail::shown_path(*out_path) + "' is the " + input +
                          " file: writing it would destroy it");
      }
    }
  }
  if (same_file(o.checkpoint_out, o.timeline)) {
    throw usage_error("--checkpoint-out and --timeline name the same file '" + memo::detail::shown_path(o.timeline) + "'");
  }
  // With --json stdout holds exactly one JSON object; a file written there
  // would be mixed into it.
  for (const auto& [output, path] :
       {std::pair{"--checkpoint-out", &o.checkpoint_out}, std::pair{"--timeline", &o.timeline}}) {
    if (o.json && memo::names_standard_output(*path)) {
      throw usage_error(std::string(output) + " '" + memo::detail::shown_path(*path) +
                        "' is standard output, where --json prints the run: write the file elsewhere");
    }
  }
  if (o.data.empty()) {
    // The task's own checks, reported as usage errors.
    try {
      if (o.task == builtin_task::recall) {
        memo::recall_task{o.context, static_cast<std::int32_t>(o.keys), static_cast<std::int32_t>(o.values), 0}
            .validate();
      } else {
        memo::copy_task{o.context, static_cast<std::int32_t>(o.copy_vocab), 0}.validate();
      }
    } catch (const memo::error& e) {
      throw usage_error(e.message());
    }
  }
  if (o.channels % o.heads != 0) {
    throw usage_error("--channels " + std::to_string(o.channels) + " is not a multiple of --heads " +
                      std::to_string(o.heads));
  }
  if (o.attention_chunk > o.context) {
    throw usage_error("--attention-chunk " + std::to_string(o.attention_chunk) +
                      " is longer than --context " + std::to_string(o.context));
  }
  return o;
}

/// How the skeletal tensors are kept: alpha (unset: no offload) and why.
struct memory_choice {
  std::optional<double> alpha;
  std::string reason;
};

memory_choice plan_memory(memo::host_backend& backend, const memo::gpt2_config& config, const options& o) {
  if (o.alpha) return {o.alpha, "given"};
  if (!o.alpha_auto) return {std::nullopt, "no offload"};
#if MEMO_HAS_LPSOLVE
  memo::device_profile profile = memo::measure_host_profile(backend);
  if (profile.host_memory_bytes == 0) {
    // An unlimited host backend: the LP's host row gets half the machine.
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    profile.host_memory_bytes = pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) *
                                                            static_cast<std::uint64_t>(page) / 2
                                                      : std::uint64_t{1} << 32;
  }
  // With host K/V the attention moves every layer's Q, K and V itself, and
  // reads them back chunk by chunk.
  const memo::transformer_layer layer =
      memo::gpt2_transformer_layer(config, o.context, memo::gpt2_qkv_skeletal_for(o.kv_offload),
                                   memo::gpt2_chunk_or_default(o.attention_chunk, o.context));
  const auto problem = memo::alpha_problem::from_layer(layer, profile, config.num_layers);
  const memo::alpha_solution solution = memo::solve_alpha(problem);
  char text[160];
  std::snprintf(text, sizeof text, "LP, bound by %s; T_layer %.3g s, %.3g GB/s to host, host budget %s",
                memo::to_string(solution.binding), problem.layer_forward_seconds,
                problem.bandwidth_bytes_per_second / 1e9,
                memo::format_bytes(problem.host_budget_bytes).c_str());
  return {solution.alpha, text};
#else
  (void)backend, (void)config;
  throw memo::error("--alpha auto needs the alpha LP, which needs lp_solve (memo::lpsolve); give --alpha X");
#endif
}

template <class Model>
void print_plan(const Model& model, const memory_choice& choice,
                const memo::caching_allocator_report& caching) {
  const auto& p = model.memory_plan();
  const double lb = static_cast<double>(p.flat_lower_bound_bytes);
  std::printf("memory plan: arena %s = bi-level peak %s vs flat lower bound %s (+%.1f%%); "
              "a caching allocator would reserve %s\n",
              memo::format_bytes(model.activation_bytes()).c_str(),
              memo::format_bytes(p.plan.peak_bytes).c_str(), memo::format_bytes(p.flat_lower_bound_bytes).c_str(),
              lb > 0 ? 100.0 * (static_cast<double>(p.plan.peak_bytes) - lb) / lb : 0.0,
              memo::format_bytes(caching.reserved_peak_bytes).c_str());
  std::uint64_t block = 0;
  for (const auto& s : p.sections) block = std::max(block, s.peak_bytes);
  std::printf("  %zu buffers in the step's trace; layer backward block %s (%zu level-1 solve%s), "
              "rounding buffers (%zu) %s\n",
              model.step_trace().problem.buffers.size(), memo::format_bytes(block).c_str(), p.level1_solves,
              p.level1_solves == 1 ? "" : "s", model.rounding_buffer_count(),
              memo::format_bytes(model.rounding_buffer_bytes()).c_str());
  const auto& skeletal = model.skeletal_plan();
  if (choice.alpha) {
    std::printf("skeletal offload: alpha %.4f (%s), %.4f after rounding; %zu swapped layers, "
                "%s offloaded and %s recomputed per swapped layer\n",
                *choice.alpha, choice.reason.c_str(), skeletal.effective_alpha(), model.swapped_layers(),
                memo::format_bytes(skeletal.offloaded_bytes_per_layer()).c_str(),
                memo::format_bytes(skeletal.recomputed_bytes_per_layer()).c_str());
  } else {
    std::printf("skeletal offload: none (every layer's skeletal tensors stay on the device)\n");
  }
  std::printf("host memory: %s pinned for the offloaded skeletal tensors%s\n",
              memo::format_bytes(model.host_offload_bytes()).c_str(),
              model.kv_offload() ? " and every layer's attention Q, K and V" : "");
}

template <class Model>
void write_plan_json(memo::json_writer& j, const Model& model, const memory_choice& plan,
                     const memo::caching_allocator_report& caching) {
  const auto& bilevel = model.memory_plan();
  j.begin_object();
  j.field("arena_bytes", model.activation_bytes());
  j.field("bilevel_peak_bytes", bilevel.plan.peak_bytes);
  j.field("flat_lower_bound_bytes", bilevel.flat_lower_bound_bytes);
  j.field("caching_allocator_reserved_bytes", caching.reserved_peak_bytes);
  j.field("trace_buffers", model.step_trace().problem.buffers.size());
  j.field("rounding_buffers", model.rounding_buffer_count());
  j.field("rounding_buffer_bytes", model.rounding_buffer_bytes());
  j.key("alpha");
  if (plan.alpha) {
    j.value(*plan.alpha);
  } else {
    j.null();
  }
  j.field("alpha_reason", plan.reason);
  j.field("effective_alpha", model.skeletal_plan().effective_alpha());
  j.field("swapped_layers", model.swapped_layers());
  j.field("kv_offload", model.kv_offload());
  j.field("host_bytes", model.host_offload_bytes());
  j.end_object();
}

/// Writes `measured` (the last step, when one ran) and the simulated step
/// of the same model on this machine's measured profile into one Chrome
/// trace, one process each, so the two compare row by row.
template <class Model>
void write_timeline(const std::string& path, const Model& model, const std::optional<memo::timeline>& measured,
                    memo::host_backend& backend) {
  const memo::timeline simulated =
      memo::simulate_memo_step(model.step_config(), memo::measure_host_profile(backend)).trace;
  std::vector<const memo::timeline*> timelines;
  if (measured) timelines.push_back(&*measured);
  timelines.push_back(&simulated);
  memo::write_chrome_trace(path, timelines);
}

/// Rounds the vocabulary up to a multiple of 64, as llm.c pads 50257 to 50304.
std::int32_t padded(std::int64_t vocab) { return static_cast<std::int32_t>((vocab + 63) / 64 * 64); }

/// Where the training windows come from: a built-in task, generated window
/// by window (window k is sequence k), or an llm.c token file.
class training_data {
 public:
  explicit training_data(const options& o)
      : recall_{o.context, static_cast<std::int32_t>(o.keys), static_cast<std::int32_t>(o.values), o.seed},
        copy_{o.context, static_cast<std::int32_t>(o.copy_vocab), o.seed},
        task_(o.data.empty() ? std::optional<builtin_task>(o.task) : std::nullopt) {}

  [[nodiscard]] bool builtin() const noexcept { return task_.has_value(); }
  [[nodiscard]] std::int64_t vocab() const noexcept {
    return *task_ == builtin_task::recall ? recall_.vocab() : copy_.vocab;
  }
  /// Opens the token file (its ids checked against the model's vocabulary).
  void open(const options& o, std::int32_t vocab_size) {
    if (!builtin()) {
      loader_.emplace(memo::token_window_loader::from_file(o.data, o.context, memo::window_order::shuffled,
                                                           o.seed, vocab_size));
    }
  }
  void next(std::int64_t step, std::span<std::int32_t> inputs, std::span<std::int32_t> targets) {
    if (!builtin()) {
      loader_->next(inputs, targets);
    } else if (*task_ == builtin_task::recall) {
      memo::fill_task_window(recall_, static_cast<std::uint64_t>(step), inputs, targets);
    } else {
      memo::fill_task_window(copy_, static_cast<std::uint64_t>(step), inputs, targets);
    }
  }
  /// The targets a model can predict (answers, copies), and the far part of
  /// them; none for a token file.
  [[nodiscard]] std::optional<memo::position_range> predictable() const {
    if (!builtin()) return std::nullopt;
    return *task_ == builtin_task::recall ? memo::recall_task_answer_targets(recall_)
                                          : memo::copy_task_predictable_targets(copy_);
  }
  [[nodiscard]] std::optional<memo::position_range> far() const {
    if (!builtin() || *task_ != builtin_task::recall) return std::nullopt;
    const auto range = memo::recall_task_far_answer_targets(recall_);
    return range.size() > 0 ? std::optional(range) : std::nullopt;
  }
  /// The loss of a model that knows the task's rules but not the sequence:
  /// log V for an answer, log vocab for a copy.
  [[nodiscard]] double chance_loss() const {
    return std::log(static_cast<double>(*task_ == builtin_task::recall ? recall_.values : copy_.vocab));
  }
  /// The recall task's answer loss from the values' frequencies alone (no
  /// query matched to its key's facts); none for the other data.
  [[nodiscard]] std::optional<double> frequency_loss() const {
    if (!builtin() || *task_ != builtin_task::recall) return std::nullopt;
    return memo::recall_task_frequency_loss(recall_);
  }
  [[nodiscard]] std::string describe(const options& o) const {
    if (!builtin()) return o.data;
    if (*task_ == builtin_task::recall) {
      return "built-in recall task, " + std::to_string(recall_.keys) + " keys bound to " +
             std::to_string(recall_.values) + " values per sequence (vocabulary " + std::to_string(vocab()) +
             "); facts in the first " + std::to_string(recall_.first_half()) + " tokens, queries after";
    }
    return "built-in copy task, vocabulary " + std::to_string(copy_.vocab) + "; the last " +
           std::to_string(o.context - copy_.first_half()) + " tokens repeat the first";
  }
  [[nodiscard]] const char* name() const noexcept {
    return !builtin() ? "file" : *task_ == builtin_task::recall ? "recall_task" : "copy_task";
  }
  [[nodiscard]] const char* predictable_name() const noexcept {
    return *task_ == builtin_task::recall ? "answer loss" : "copied-half loss";
  }

 private:
  memo::recall_task recall_;
  memo::copy_task copy_;
  std::optional<builtin_task> task_;
  std::optional<memo::token_window_loader> loader_;
};

bool across_ranks(const options& o) { return o.sp > 0 || o.pp > 0 || launched_ranks() > 1; }

#if MEMO_HAS_MPI
/// SPPO's offload ratios for `shape` (section 5.2, pipeline/sppo_offload.hpp):
/// each subsequence offloads what one subsequence's compute hides at this
/// machine's device-to-host bandwidth, within the host memory. Rank 0
/// measures its profile and every rank takes its ratios, so all agree (a
/// failure there hands every rank NaN ratios, which the model refuses on
/// every rank before any collective; rank 0 prints the cause).
std::vector<double> sppo_alpha_auto(const memo::gpt2_config& config, const memo::gpt2_parallel_shape& shape,
                                    bool kv_offload, memo::mpi_communicator& world) {
#if MEMO_HAS_LPSOLVE
  std::vector<double> alpha(static_cast<std::size_t>(shape.subsequences), 0.0);
  if (world.rank() == 0) try {
    memo::host_backend backend;
    memo::device_profile profile = memo::measure_host_profile(backend);
    memo::sppo_offload_problem problem;
    std::int64_t rows = 0;
    for (int j = 0; j < shape.subsequences; ++j) {
      const auto [r0, r1] = shape.rows(j);
      problem.tokens.push_back(static_cast<std::uint64_t>(r1 - r0));
      rows += r1 - r0;
    }
    // Every skeletal tensor may go (the attention keeps its own K/V); with
    // host K/V the blocks keep no qkv.
    const memo::skeletal_layout layout =
        memo::gpt2_skeletal_layout(config, 1, memo::gpt2_qkv_skeletal_for(kv_offload));
    for (const auto& t : layout.tensors()) problem.other_bytes_per_token += t.bytes_per_token;
    problem.layers = static_cast<int>(shape.stage_layers);
    const memo::transformer_layer mean =
        memo::gpt2_transformer_layer(config, std::max<std::int64_t>(1, rows / shape.subsequences));
    problem.compute_seconds = profile.compute_seconds(memo::gpt_layer_cost_of(mean).forward_flops);
    problem.bandwidth_bytes_per_second = profile.device_to_host_bytes_per_second;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    // An unlimited host backend: the host gets half the machine.
    std::uint64_t host = profile.host_memory_bytes;
    if (host == 0) {
      host = pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) / 2
                                   : std::uint64_t{1} << 32;
    }
    problem.host_budget_bytes = host / static_cast<std::uint64_t>(world.size());
    alpha = memo::plan_sppo_offload(problem).alpha;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt: rank 0: --alpha auto: %s\n", memo::message_of(e).c_str());
    alpha.assign(alpha.size(), std::numeric_limits<double>::quiet_NaN());
  }
  MPI_Bcast(alpha.data(), static_cast<int>(alpha.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return alpha;
#else
  (void)config, (void)shape, (void)kv_offload, (void)world;
  throw memo::error("--alpha auto needs SPPO's offload LP, which needs lp_solve (memo::lpsolve); give --alpha X");
#endif
}
#endif

/// train_gpt under mpirun: every rank reads the same data and trains its
/// part of the model (memo/model/gpt2_parallel_training.hpp).
int run_across_ranks(const options& o, const memo::gpt2_config& config, training_data& data,
                     const std::optional<memo::gpt2_checkpoint>& checkpoint, double init_std) {
  if (o.device_budget || !o.timeline.empty() || o.print_plan) {
    throw usage_error("--device-budget, --timeline and --print-plan are single-rank options; "
                      "drop them with --sp/--pp");
  }
#if MEMO_HAS_MPI
  memo::mpi_environment environment(nullptr, nullptr);
  // Every rank fails alike here (ranks that disagree on
  // --verify-collectives): each says so before any of them ends.
  std::optional<memo::mpi_communicator> made;
  try {
    made.emplace(MPI_COMM_WORLD, memo::mpi_communicator::options{.timeout = std::chrono::seconds(o.comm_timeout_seconds),
                                                                .verify_calls = o.verify_collectives});
  } catch (const memo::error& e) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const bool verify = std::string_view(e.what()).find("verify_calls") != std::string_view::npos;
    std::fprintf(stderr, "train_gpt: rank %d: %s%s\n", rank, memo::message_of(e).c_str(),
                 verify ? " (give --verify-collectives to every rank, or to none)" : "");
    std::fflush(stderr);
    MPI_Barrier(MPI_COMM_WORLD);
    return 1;
  }
  memo::mpi_communicator& world = *made;
  const int pp = o.pp > 0 ? o.pp : 1;
  const int sp = o.sp > 0 ? o.sp : std::max(1, world.size() / pp);
  memo::gpt2_parallel_options parallel{.context = o.context,
                                       .sequence_parallel = sp,
                                       .pipeline_stages = pp,
                                       .subsequences = o.subsequences,
                                       .balanced_subsequences = !o.equal_subsequences,
                                       .layout_chunk = o.sequence_chunk,
                                       .attention_chunk = o.attention_chunk,
                                       .kv_offload = o.kv_offload,
                                       .overlap_gradient_reduction = o.overlap_reduction};
  memo::host_backend backend;
  // First, that every rank was given the same flags (the model's options
  // and those that make its offload ratios): a rank given others would
  // fail the checks below alone, or issue other collectives. Then the same
  // checks on every rank: a shape that does not split is an error each
  // rank prints; all exit once all have printed (mpirun ends the whole job
  // at the first rank that exits with an error).
  try {
    std::vector<memo::agreed_value> flags = memo::gpt2_parallel_agreement(config, parallel);
    flags.push_back(memo::agreed_value::of_optional_real("--alpha", o.alpha));
    flags.push_back(memo::agreed_value::of_reals("--alpha list", o.alpha_list));
    flags.push_back({"--alpha auto", o.alpha_auto, memo::agreed_value::kind::boolean});
    memo::expect_ranks_agree(backend, world, flags,
                             "train_gpt: the ranks were given different flags (every rank must be given the same)");
    if (world.size() == 1 && sp * pp > 1) {
      throw memo::error("--sp " + std::to_string(sp) + " --pp " + std::to_string(pp) + " need " +
                        std::to_string(sp * pp) + " ranks: start them with mpirun -np " + std::to_string(sp * pp));
    }
    const memo::gpt2_parallel_shape shape = memo::gpt2_parallel_shape::resolve(config, parallel, world.size());
    // SPPO's offload ratios (the model checks them, naming any bad one).
    if (o.alpha) {
      parallel.subsequence_offload = std::vector<double>(static_cast<std::size_t>(shape.subsequences), *o.alpha);
    }
    if (!o.alpha_list.empty()) parallel.subsequence_offload = o.alpha_list;
    if (o.alpha_auto) parallel.subsequence_offload = sppo_alpha_auto(config, shape, o.kv_offload, world);
    if (parallel.subsequence_offload) {
      (void)memo::gpt2_parallel_shape::resolve(config, parallel, world.size());
      if (world.rank() == 0 && !o.json) {
        std::string ratios;
        for (const double a : *parallel.subsequence_offload) ratios += (ratios.empty() ? "" : " ") + std::to_string(a);
        std::printf("SPPO offload ratios per subsequence: {%s} (%s)\n", ratios.c_str(),
                    o.alpha_auto ? "auto: SPPO section 5.2 on rank 0's measured profile" : "given");
      }
    }
  } catch (const memo::error& e) {
    std::fprintf(stderr, "train_gpt: rank %d: %s\n", world.rank(), memo::message_of(e).c_str());
    std::fflush(stderr);
    MPI_Barrier(MPI_COMM_WORLD);
    return 1;
  }
  memo::gpt2_parallel_training run{
      .steps = o.steps,
      .log_every = o.log_every,
      .adamw = {.learning_rate = o.lr, .weight_decay = o.weight_decay},
      .seed = o.seed,
      .init_std = init_std,
      .parameters = checkpoint ? std::span<const float>(checkpoint->parameters) : std::span<const float>(),
      .predictable = data.predictable(),
      .predictable_label = data.builtin() ? data.predictable_name() : "predictable loss",
      .predictable_key = data.builtin() && o.task == builtin_task::recall ? "answer_loss" : "copied_half_loss",
      .far = data.far(),
      .data_name = data.describe(o),
      .checkpoint_out = o.checkpoint_out,
      .json = o.json};
  try {
    std::int64_t step = 0;
    memo::train_gpt2_parallel(backend, world, config, parallel, run,
                              [&](std::span<std::int32_t> in, std::span<std::int32_t> tg) { data.next(step++, in, tg); });
  } catch (const std::exception& e) {
    // Past the checks every rank made alike, a failure may leave the other
    // ranks inside a collective: end the whole job rather than hang it.
    std::fprintf(stderr, "train_gpt: rank %d: %s\n", world.rank(), memo::message_of(e).c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 0;
#else
  (void)config, (void)data, (void)checkpoint, (void)init_std;
  throw memo::error("--sp/--pp train across MPI ranks, but this train_gpt was built without MPI (memo::mpi)");
#endif
}

int run(const options& o) {
  using clock = std::chrono::steady_clock;
  constexpr std::int32_t gpt2_vocab = 50257;  // llm.c token files
  training_data data(o);

  // A checkpoint or a timeline that cannot be written (a directory, a
  // missing directory, no permission) is reported now, not after the whole
  // training run. A device or a FIFO is written in place at the end (a
  // probe would end a reader's input early); its errors are reported then.
  for (const auto& [option, out] : {std::pair{"--checkpoint-out", &o.checkpoint_out},
                                     std::pair{"--timeline", &o.timeline}}) {
    if (out->empty()) continue;
    std::error_code ec;
    const auto status = std::filesystem::status(*out, ec);
    if (!std::filesystem::exists(status) || std::filesystem::is_regular_file(status) ||
        std::filesystem::is_directory(status)) {
      try {
        memo::atomic_file_writer probe(*out);
      } catch (const memo::error& e) {
        throw memo::error(std::string(option) + ": " + e.message());
      }
    }
  }

  // The model's shape and first parameters.
  std::optional<memo::gpt2_checkpoint> checkpoint;
  memo::gpt2_config config;
  if (!o.checkpoint_in.empty()) {
    checkpoint = memo::read_gpt2_checkpoint(o.checkpoint_in, o.context);
    config = checkpoint->config;
    // The format holds any float; training from a NaN or an infinity only
    // diverges at the first step, far from the cause.
    memo::expect_finite_parameters(*checkpoint, o.checkpoint_in);
  } else {
    const std::int64_t vocab = data.builtin() ? data.vocab() : gpt2_vocab;
    config = {static_cast<std::int32_t>(o.context), static_cast<std::int32_t>(vocab), padded(vocab),
              static_cast<std::int32_t>(o.layers), static_cast<std::int32_t>(o.heads),
              static_cast<std::int32_t>(o.channels)};
  }
  config.validate("train_gpt");
  if (data.builtin() && data.vocab() > config.vocab_size) {
    throw memo::error("the built-in task needs " + std::to_string(data.vocab()) + " token ids, checkpoint '" +
                      o.checkpoint_in + "' has a vocabulary of " + std::to_string(config.vocab_size));
  }
  data.open(o, config.vocab_size);
  const auto predictable = data.predictable();
  const auto far = data.far();
  // GPT-2's 0.02 at its 768 channels, scaled by sqrt(768 / C): every width
  // starts with GPT-2's variance at the output of each linear layer.
  const double init_std = o.init_std.value_or(0.02 * std::sqrt(768.0 / static_cast<double>(config.channels)));
  if (across_ranks(o)) return run_across_ranks(o, config, data, checkpoint, init_std);

  memo::host_backend backend;
  // alpha: given, from the LP (MEMO eq. 1-3) on this machine, or no offload.
  const auto plan = plan_memory(backend, config, o);
  memo::gpt2_model<memo::host_backend> model(
      backend, config,
      {.context = o.context, .attention_chunk = o.attention_chunk, .offload_alpha = plan.alpha,
       .kv_offload = o.kv_offload});
  const std::uint64_t device_need = model.parameter_state_bytes() + model.activation_bytes();
  if (o.device_budget && device_need > *o.device_budget) {
    throw memo::error("--device-budget " + std::to_string(*o.device_budget) +
                      " bytes is below what the plan needs: " + std::to_string(device_need) +
                      " bytes (parameters+gradients+AdamW " + std::to_string(model.parameter_state_bytes()) +
                      " + planned arena " + std::to_string(model.activation_bytes()) +
                      "); try a smaller --context or --alpha");
  }
  const memo::caching_allocator_report caching = memo::simulate_caching_allocator(model.step_trace().problem);
  if (checkpoint) {
    model.set_parameters(checkpoint->parameters);
  } else {
    model.initialize(o.seed, init_std);
  }
  const memo::ops::adamw_config adamw{.learning_rate = o.lr, .weight_decay = o.weight_decay};

  if (!o.json) {
    std::printf("model: L=%d C=%d NH=%d V=%d (padded %d), %llu parameters", config.num_layers,
                config.channels, config.num_heads, config.vocab_size, config.padded_vocab_size,
                static_cast<unsigned long long>(model.parameter_count()));
    if (checkpoint) {
      std::printf(", from %s\n", o.checkpoint_in.c_str());
    } else {
      std::printf(", initialised N(0, %.4g)\n", init_std);
    }
    std::printf("data: %s; context %lld\n", data.describe(o).c_str(), static_cast<long long>(o.context));
    std::printf("chunks: attention %lld tokens, loss %lld tokens\n",
                static_cast<long long>(model.attention_chunk()), static_cast<long long>(model.loss_chunk()));
    std::printf("device memory: parameters+gradients+AdamW %s, activations %s\n",
                memo::format_bytes(model.parameter_state_bytes()).c_str(),
                memo::format_bytes(model.activation_bytes()).c_str());
  }
  if (o.print_plan) {
    if (o.json) {
      memo::json_writer j;
      write_plan_json(j, model, plan, caching);
      std::printf("%s\n", j.str().c_str());
    } else {
      print_plan(model, plan, caching);
    }
    // No step runs: the timeline is the simulated step alone.
    if (!o.timeline.empty()) write_timeline(o.timeline, model, std::nullopt, backend);
    return 0;
  }
  if (!o.json) print_plan(model, plan, caching);
  // From here the device peak is the steps' (the model's setup and the
  // profile measured above are not part of a step).
  backend.device_memory().reset_peak();

  std::vector<std::int32_t> inputs(static_cast<std::size_t>(o.context));
  std::vector<std::int32_t> targets(inputs.size());
  std::vector<double> losses, predictable_losses, far_losses;
  const auto start = clock::now();
  // A progress line every `log_every` steps: the losses are means over the
  // steps since the last line (one step's answers are noisy).
  const std::int64_t log_every = o.log_every > 0 ? o.log_every : std::max<std::int64_t>(1, o.steps / 25);
  double interval_seconds = 0, interval_loss = 0, interval_predictable = 0, interval_far = 0;
  std::int64_t interval_steps = 0;
  auto format = [](bool has, double value) {
    char text[32] = "-";
    if (has) std::snprintf(text, sizeof text, "%.4f", value);
    return std::string(text);
  };
  for (std::int64_t step = 1; step <= o.steps; ++step) {
    data.next(step - 1, inputs, targets);
    // The last step is measured for the timeline: events around each
    // layer's forward, recompute, backward, offload and prefetch.
    if (step == o.steps && !o.timeline.empty()) model.record_timeline(true);
    const auto t0 = clock::now();
    const float loss = model.train_step(inputs, targets, adamw);
    if (!std::isfinite(loss)) throw memo::training_diverged(step, loss, adamw, !o.checkpoint_out.empty());
    interval_seconds += std::chrono::duration<double>(clock::now() - t0).count();
    losses.push_back(loss);
    if (predictable) predictable_losses.push_back(model.mean_loss(*predictable));
    if (far) far_losses.push_back(model.mean_loss(*far));
    interval_loss += loss;
    interval_predictable += predictable ? predictable_losses.back() : 0.0;
    interval_far += far ? far_losses.back() : 0.0;
    ++interval_steps;
    if (!o.json && (step % log_every == 0 || step == o.steps)) {
      const double n = static_cast<double>(interval_steps);
      std::printf("step %5lld  loss %.4f  %s %s", static_cast<long long>(step), interval_loss / n,
                  predictable ? data.predictable_name() : "predictable loss",
                  format(predictable.has_value(), interval_predictable / n).c_str());
      if (far) std::printf(" (far %s)", format(true, interval_far / n).c_str());
      std::printf("  %6.0f tokens/s  %6.1f ms/step  device peak %s\n",
                  n * static_cast<double>(o.context) / interval_seconds, interval_seconds / n * 1e3,
                  memo::format_bytes(backend.device_memory().peak_bytes()).c_str());
      std::fflush(stdout);
      interval_seconds = interval_loss = interval_predictable = interval_far = 0;
      interval_steps = 0;
    }
  }
  const double total = std::chrono::duration<double>(clock::now() - start).count();
  const double tokens_per_second = static_cast<double>(o.steps * o.context) / total;

  if (!o.checkpoint_out.empty()) {
    std::vector<float> parameters(model.parameter_count());
    model.get_parameters(parameters);
    memo::write_gpt2_checkpoint(o.checkpoint_out, config, parameters);
  }
  if (!o.timeline.empty()) write_timeline(o.timeline, model, model.last_step_timeline(), backend);

  // The mean of the last tenth of the steps (at least one): a single step's
  // answers are too few to read a final figure from.
  auto tail_mean = [](const std::vector<double>& v) {
    const std::size_t n = std::max<std::size_t>(1, v.size() / 10);
    double sum = 0;
    for (std::size_t i = v.size() - n; i < v.size(); ++i) sum += v[i];
    return sum / static_cast<double>(n);
  };
  auto head_mean = [](const std::vector<double>& v) {
    const std::size_t n = std::max<std::size_t>(1, v.size() / 10);
    double sum = 0;
    for (std::size_t i = 0; i < n; ++i) sum += v[i];
    return sum / static_cast<double>(n);
  };
  if (o.json) {
    memo::json_writer j;
    j.begin_object();
    j.key("model").begin_object();
    j.field("layers", config.num_layers).field("channels", config.channels);
    j.field("heads", config.num_heads).field("vocab", config.vocab_size);
    j.field("padded_vocab", config.padded_vocab_size);
    j.field("parameters", model.parameter_count()).end_object();
    j.field("data", data.builtin() ? std::string(data.name()) : o.data);
    j.field("context", o.context).field("loss_chunk", model.loss_chunk());
    j.field("attention_chunk", model.attention_chunk());
    j.field("steps", o.steps).field("lr", o.lr).field("weight_decay", o.weight_decay);
    j.field("seed", o.seed);
    j.key("init_std");
    if (checkpoint) {
      j.null();
    } else {
      j.value(init_std);
    }
    j.field("parameter_state_bytes", model.parameter_state_bytes());
    j.field("activation_bytes", model.activation_bytes());
    j.field("device_peak_bytes", backend.device_memory().peak_bytes());
    j.key("memory_plan");
    write_plan_json(j, model, plan, caching);
    j.field("seconds", total).field("tokens_per_second", tokens_per_second);
    j.field("loss", losses);
    using series = std::optional<std::span<const double>>;  // null where the data has none
    const bool recall = data.builtin() && o.task == builtin_task::recall;
    j.field("answer_loss", recall ? series(predictable_losses) : std::nullopt);
    j.field("far_answer_loss", recall && far.has_value() ? series(far_losses) : std::nullopt);
    j.field("copied_half_loss", data.builtin() && !recall ? series(predictable_losses) : std::nullopt);
    j.field("chance_loss", data.builtin() ? std::optional(data.chance_loss()) : std::nullopt);
    j.field("frequency_loss", data.frequency_loss());
    if (!o.checkpoint_out.empty()) j.field("checkpoint_out", o.checkpoint_out);
    if (!o.timeline.empty()) j.field("timeline", o.timeline);
    j.end_object();
    std::printf("%s\n", j.str().c_str());
  } else {
    std::printf("done: %lld steps in %.1f s (%.0f tokens/s); loss %.4f -> %.4f", static_cast<long long>(o.steps),
                total, tokens_per_second, head_mean(losses), tail_mean(losses));
    if (predictable) {
      std::printf("; %s %.4f -> %.4f", data.predictable_name(), head_mean(predictable_losses),
                  tail_mean(predictable_losses));
      if (far) std::printf(" (far %.4f -> %.4f)", head_mean(far_losses), tail_mean(far_losses));
      std::printf("; chance %.4f", data.chance_loss());
      if (const auto f = data.frequency_loss()) std::printf(", value frequencies alone %.4f", *f);
    }
    std::printf(" (first and last tenth of the steps)\n");
    if (!o.checkpoint_out.empty()) std::printf("checkpoint written to %s\n", o.checkpoint_out.c_str());
    if (!o.timeline.empty()) {
      std::printf("timeline (the last step measured, beside the simulated step) written to %s\n", o.timeline.c_str());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return memo::run_command("train_gpt", usage, [&] { return run(parse(argc, argv)); });
}
