// memo-project: will this context fit on my cluster, with which settings,
// at what MFU (MEMO 5.3-5.4, FPDT 5, SPPO 7; the model is in
// include/memo/project/, its fidelity in docs/projections.md).
//
//   memo-project --model 7b|13b|30b|65b|8b|L,C,H,V[,F[,KV]][,swiglu] --gpus N
//                [--gpus-per-node G] --profile a800|a100|a100x4|h100|h200|FILE
//                --seq LEN|max [--strategy memo|fpdt|sppo|recompute|ulysses-zero3|all]
//                [--time-limit S] [--json] [--tp N] [--cp N] [--sp N] [--pp N] [--dp N]
//                [--subsequences N] [--alpha X] [--chunk LEN]
//
// LEN is a token count with an optional K (x1024) or M (x1048576) suffix.
// For each strategy the tool prints the settings chosen (TP/CP/SP/PP/DP,
// N subsequences, alpha or the range of alpha_i, chunk), the per-GPU memory
// breakdown (planned arena against a caching allocator's reserve), host
// memory per node, where the step's time goes, tokens/GPU/s, MFU (and HFU,
// which counts recomputation), and every resource exceeded with its need
// and capacity: device memory per GPU and host memory per node in the
// order they run out (the first is the one whose shortest failing length,
// on the 64K grid, is shortest), and the host link when offload outlasts
// the compute it hides behind (which slows the step rather than stops
// it). A
// Megatron or Ulysses setting may leave GPUs idle when that reaches
// further (said as "on 4 GPUs, 1 idle"); SPPO uses every GPU or says why
// no setting applies.
// `--seq max` searches the longest fitting sequence (64K grid, up to 1024M
// tokens; an answer at that bound says longer ones may fit too), starting
// at the shortest length where the strategy's rules admit a setting (SPPO's
// N >= PP subsequences of 2K need PP x 2K tokens); when even that length
// does not fit, the answer says it is the shortest tried and names the
// first resource to run out there.
// `--strategy all` puts them side by side and marks the best: the longest
// with --seq max, else the highest MFU among those that fit. `--time-limit`
// (600 s by default) bounds the whole run: a run that reaches it stops
// there, even inside one long simulation, with an error saying which
// strategy and length it was projecting. The papers'
// ablations (recompute-planned, swap-planned, sppo-recompute) are accepted
// by name too.
// --tp ... --chunk fix settings instead of searching them (projection.hpp's
// `settings_pin`; a --chunk longer than the sequence is one chunk of all
// of it): a named strategy without such a setting is a usage
// error; `--strategy all` projects only the strategies with every setting
// given and names the others.
// Errors go to stderr (with --json, also as {"error": ..., "exit_status":
// ...} on stdout); exit status 1 for bad input (a profile file, a model
// shape), 2 for a bad command line, 3 when the sequence fits under no
// strategy asked for.
// smoke-args: --model 7b --gpus 8 --profile a800 --seq max --strategy all --json
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "memo/core/json.hpp"
#include "memo/core/command_line.hpp"
#include "memo/core/report_output.hpp"
#include "memo/project/strategy.hpp"

namespace {

namespace mp = memo::project;

using memo::usage_error;

const char* const usage_text =
    "usage: memo-project --model 7b|13b|30b|65b|8b|L,C,H,V[,F[,KV]][,swiglu] --gpus N [--gpus-per-node G]\n"
    "                    --profile a800|a100|a100x4|h100|h200|FILE --seq LEN|max\n"
    "                    [--strategy memo|fpdt|sppo|recompute|ulysses-zero3|all] [--time-limit S] [--json]\n"
    "                    [--tp N] [--cp N] [--sp N] [--pp N] [--dp N] [--subsequences N] [--alpha X] [--chunk LEN]\n"
    "LEN: tokens, optionally with K (x1024) or M (x1048576), e.g. 512K. A profile FILE named like a preset\n"
    "is read when given with a directory, e.g. ./h100.\n"
    "--tp ... --chunk fix settings instead of searching them: TP, CP, DP (memo, recompute; PP with recompute,\n"
    "alpha with memo), SP, DP (ulysses-zero3, fpdt; the chunk with fpdt), SP, PP, DP, N (sppo). With --strategy all\n"
    "only the strategies that have every setting given are projected.\n";

struct arguments {
  std::string model, profile, seq, strategy = "all";
  std::optional<int> gpus, gpus_per_node;
  mp::settings_pin pin;  ///< --tp, --cp, --sp, --pp, --dp, --subsequences, --alpha, --chunk
  int time_limit_seconds = 600;
  bool json = false, help = false;
};

using memo::detail::quote;

constexpr double max_tokens = 1099511627776.0;  // 2^40, what a projection accepts
constexpr double search_grid = 65536, search_limit = 1024.0 * 1048576;

/// A whole number in [1, `high`]; otherwise a usage error naming the option,
/// the value and the range.
int positive_int(const std::string& option, const std::string& v, int high) {
  const auto n = memo::detail::parse_integer<long long>(v);
  if (!n || *n < 1 || *n > high) {
    throw usage_error(option + " '" + quote(v) + "' is not a whole number from 1 to " + std::to_string(high));
  }
  return static_cast<int>(*n);
}

/// A token count with an optional K or M suffix, at most 2^40; otherwise a
/// usage error naming `option` and the value.
double parse_length(const std::string& v, const std::string& option = "--seq") {
  std::string digits = v;
  double unit = 1;
  if (!digits.empty() && (digits.back() == 'K' || digits.back() == 'k')) unit = 1024, digits.pop_back();
  else if (!digits.empty() && (digits.back() == 'M' || digits.back() == 'm')) unit = 1048576, digits.pop_back();
  const auto n = memo::detail::parse_integer<std::int64_t>(digits);
  // Digits (after at most one '+') that do not parse: too many of them.
  const std::string_view body = std::string_view(digits).substr(digits.starts_with('+') ? 1 : 0);
  const bool all_digits = !body.empty() && body.find_first_not_of("0123456789") == std::string_view::npos;
  if ((!n && all_digits) || (n && *n >= 1 && static_cast<double>(*n) * unit > max_tokens)) {
    throw usage_error(option + " '" + quote(v) + "' is longer than 2^40 (1099511627776) tokens");
  }
  if (!n || *n < 1) {
    throw usage_error(option + " '" + quote(v) + "' is not " + (option == "--seq" ? "'max' or " : "") +
                      "a positive token count (e.g. 131072, 128K, 1M)");
  }
  return static_cast<double>(*n) * unit;
}

/// The command-line option of a settings_pin field ("--tp", "--chunk").
std::string option_of(std::string_view field) { return "--" + std::string(field); }

/// The settings_pin field an option sets ("--tp"), or nullptr.
const mp::settings_pin::field* pinned_field(const std::string& arg) {
  return arg.starts_with("--") ? mp::settings_pin::find(std::string_view(arg).substr(2)) : nullptr;
}

/// The strategies `--strategy all` projects: those with every setting pinned.
std::vector<mp::strategy> pinned_strategies(const mp::settings_pin& pin) {
  std::vector<mp::strategy> out;
  for (auto k : mp::public_strategies()) {
    if (mp::inapplicable_pins(k, pin).empty()) out.push_back(k);
  }
  return out;
}

arguments parse_arguments(int argc, char** argv) {
  arguments a;
  std::vector<std::string> seen;
  auto need = [&](int& i) -> std::string {
    const std::string option = argv[i];
    if (i + 1 >= argc) throw usage_error(option + " needs a value");
    const std::string value = argv[++i];
    if (value.empty()) throw usage_error(option + " needs a value, got an empty one");
    if (value.starts_with("--")) throw usage_error(option + " needs a value, got the option '" + quote(value) + "'");
    return value;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.starts_with("--")) {
      if (std::find(seen.begin(), seen.end(), arg) != seen.end()) {
        throw usage_error("option '" + quote(arg) + "' given more than once");
      }
      seen.push_back(arg);
    }
    if (arg == "--model") a.model = need(i);
    else if (arg == "--gpus") a.gpus = positive_int(arg, need(i), mp::max_cluster_gpus);
    else if (arg == "--gpus-per-node") a.gpus_per_node = positive_int(arg, need(i), mp::max_cluster_gpus);
    else if (arg == "--profile") a.profile = need(i);
    else if (arg == "--seq") a.seq = need(i);
    else if (arg == "--strategy") a.strategy = need(i);
    else if (arg == "--time-limit") a.time_limit_seconds = positive_int(arg, need(i), 1 << 30);
    else if (const auto* f = pinned_field(arg)) {
      // --tp, --cp, --sp, --pp, --dp, --subsequences: whole numbers; --alpha a fraction; --chunk a length.
      const std::string v = need(i);
      if (f->whole) {
        a.pin.*(f->whole) = positive_int(arg, v, 1 << 20);
      } else if (f->name == "chunk") {
        a.pin.chunk_tokens = parse_length(v, arg);
      } else {
        const auto x = memo::detail::parse_decimal(v);
        if (!x) throw usage_error(arg + " " + memo::detail::decimal_problem(v));
        if (*x < 0.0 || *x > 1.0) throw usage_error(arg + " '" + quote(v) + "' is not a number from 0 to 1");
        a.pin.alpha = *x;
      }
    }
    else if (arg == "--json") a.json = true;
    else if (arg == "--help" || arg == "-h") a.help = true;
    else throw usage_error("unknown argument '" + quote(arg) + "'");
  }
  if (a.help) return a;
  if (a.model.empty()) throw usage_error("--model is required");
  if (!a.gpus) throw usage_error("--gpus is required");
  if (a.profile.empty()) throw usage_error("--profile is required");
  if (a.seq.empty()) throw usage_error("--seq is required");
  if (a.seq != "max") parse_length(a.seq);
  if (a.strategy != "all" && !mp::parse_strategy(a.strategy)) {
    throw usage_error("unknown strategy '" + quote(a.strategy) + "' (" + mp::strategy_names() + " or all)");
  }
  if (a.strategy != "all") {
    const auto kind = *mp::parse_strategy(a.strategy);
    const auto foreign = mp::inapplicable_pins(kind, a.pin);
    if (!foreign.empty()) {
      std::string have, options;
      for (const auto f : mp::pin_fields(kind)) have += (have.empty() ? "" : ", ") + option_of(f);
      for (const auto f : foreign) options += (options.empty() ? "" : ", ") + option_of(f);
      throw usage_error(options + (foreign.size() > 1 ? " are not settings of " : " is not a setting of ") +
                        a.strategy + " (its settings: " + have + ")");
    }
  } else if (!a.pin.empty() && pinned_strategies(a.pin).empty()) {
    std::string which;
    for (const auto f : a.pin.given()) {
      std::string strategies;
      for (auto k : mp::public_strategies()) {
        if (mp::inapplicable_pins(k, a.pin.only(f)).empty()) {
          strategies += (strategies.empty() ? "" : ", ") + std::string(mp::strategy_name(k));
        }
      }
      which += (which.empty() ? "" : "; ") + option_of(f) + ": " + strategies;
    }
    throw usage_error("no strategy has every setting given (" + which + ")");
  }
  return a;
}

std::string gib_text(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", bytes / static_cast<double>(memo::gib));
  return text;
}

std::string tokens_text(double s) {
  char text[32];
  if (std::fmod(s, 1048576) == 0) std::snprintf(text, sizeof text, "%.0fM", s / 1048576);
  else if (std::fmod(s, 1024) == 0) std::snprintf(text, sizeof text, "%.0fK", s / 1024);
  else std::snprintf(text, sizeof text, "%.0f", s);
  return text;
}

/// One strategy's answer: the projection (with --seq max, the longest that
/// fits, else the one at the shortest length searched, which shows what runs
/// out), or why no setting applies.
struct row {
  mp::strategy kind;
  std::optional<mp::projection> result;
  std::string no_setting;     ///< why no setting applies, when none does
  /// Every setting at the length is too large to count in 64 bits (more
  /// than any memory holds): why, naming one.
  std::string uncountable;
  bool capped = false;        ///< --seq max reached the search's upper bound
  /// --seq max found nothing that fits: `result` is the projection at the
  /// shortest length the search tried, which already does not fit.
  bool nothing_fits = false;
  [[nodiscard]] bool fits() const { return result && result->fits(); }
};

/// The range of SPPO's per-subsequence offload ratios.
std::pair<double, double> alpha_range(const mp::projection& p) {
  if (p.chosen.alpha_i.empty()) return {p.chosen.alpha, p.chosen.alpha};
  const auto [low, high] = std::minmax_element(p.chosen.alpha_i.begin(), p.chosen.alpha_i.end());
  return {*low, *high};
}

/// A byte count as a JSON integer (the library bounds every one below 2^64).
std::uint64_t bytes(double x) { return mp::byte_count(x, "a reported figure"); }

/// One exceeded resource with its need and capacity, in the units a reader
/// compares it with: "device memory 110.6 of 80.0 GiB per GPU".
std::string shortfall_text(const mp::shortfall& f) {
  char text[160];
  if (f.resource == mp::resource::device_memory) {
    std::snprintf(text, sizeof text, "device memory %s of %s GiB per GPU", gib_text(f.need).c_str(),
                  gib_text(f.capacity).c_str());
  } else if (f.resource == mp::resource::host_memory) {
    std::snprintf(text, sizeof text, "host memory %s of %s GiB per node", gib_text(f.need).c_str(),
                  gib_text(f.capacity).c_str());
  } else {
    std::snprintf(text, sizeof text, "host link %.1f of %.1f GB/s per GPU to hide the offload", f.need / 1e9,
                  f.capacity / 1e9);
  }
  return text;
}

/// Why --seq max has no answer for a strategy, said the same in the text
/// and the JSON: the shortest length tried, why the search started there,
/// and the first resource that runs out there (the projection's `limit`,
/// with its need and capacity). A bare "not even 64K fits" read as if some
/// shorter length had been tried, or, for SPPO, as if 64K had been.
std::string nothing_fits_text(const row& r) {
  const auto& p = *r.result;
  std::string text = "does not fit even at " + tokens_text(p.sequence) + ", the shortest length tried";
  if (p.sequence > search_grid) text += " (no setting applies below it)";
  const auto first = std::find_if(p.shortfalls.begin(), p.shortfalls.end(),
                                  [&](const mp::shortfall& f) { return f.resource == p.limit; });
  if (first != p.shortfalls.end()) {
    text += "; the first resource to run out there: " + shortfall_text(*first);
  } else if (p.limit) {
    text += "; the first resource to run out there: " + std::string(mp::to_string(*p.limit));
  }
  return text;
}

void write_json(memo::json_writer& j, const row& r, int gpus) {
  j.begin_object().field("strategy", std::string(mp::strategy_name(r.kind)));
  if (!r.uncountable.empty()) {
    j.field("fits", false).field("limit", "every setting is too large to count").field("reason", r.uncountable)
        .end_object();
    return;
  }
  if (!r.result) {
    j.field("fits", false).field("limit", "no setting applies to this GPU count and length")
        .field("reason", r.no_setting).end_object();
    return;
  }
  const auto& p = *r.result;
  const auto& d = p.device;
  const auto [alpha_low, alpha_high] = alpha_range(p);
  j.field("fits", p.fits()).field("sequence", bytes(p.sequence));
  if (r.capped) j.field("search_limit_reached", true);
  if (!p.fits()) j.field("limit", mp::to_string(*p.limit));
  if (r.nothing_fits) j.field("shortest_tried", bytes(p.sequence)).field("message", nothing_fits_text(r));
  // Every resource exceeded, the first memory to run out first; the host
  // link's figures are bytes per second per GPU, the memories' bytes.
  j.key("limits").begin_array();
  for (const auto& f : p.shortfalls) {
    j.begin_object().field("resource", mp::to_string(f.resource)).field("need", bytes(f.need));
    j.field("capacity", bytes(f.capacity));
    if (f.runs_out_at > 0) j.field("runs_out_at", bytes(f.runs_out_at));
    j.end_object();
  }
  j.end_array();
  j.field("link_bound", p.link_bound());
  j.key("settings").begin_object();
  j.field("tp", p.chosen.tp).field("cp", p.chosen.cp).field("sp", p.chosen.sp).field("pp", p.chosen.pp);
  j.field("dp", p.chosen.dp).field("subsequences", p.chosen.subsequences).field("multiplexed", p.chosen.multiplexed);
  j.field("alpha", p.chosen.alpha).field("alpha_min", alpha_low).field("alpha_max", alpha_high);
  j.field("chunk_tokens", bytes(p.chosen.chunk_tokens));
  j.field("gpus_used", p.chosen.gpus()).field("gpus_idle", gpus - p.chosen.gpus());
  j.end_object();
  // Each part rounded to a whole byte, and the sums made of the rounded
  // parts, so the printed figures add up.
  const std::uint64_t arena = memo::checked_add(bytes(d.skeletal), bytes(d.transient));
  const std::uint64_t reserve = bytes(d.caching_reserve);
  std::uint64_t total = d.planned ? arena : reserve;
  for (const double part : {d.params, d.grads, d.optimizer, d.framework}) total = memo::checked_add(total, bytes(part));
  j.key("device_bytes").begin_object().field("params", bytes(d.params)).field("grads", bytes(d.grads))
      .field("optimizer", bytes(d.optimizer)).field("skeletal", bytes(d.skeletal))
      .field("transient", bytes(d.transient)).field("framework", bytes(d.framework))
      .field("planned_arena", arena).field("caching_reserve", reserve)
      .field("allocator", d.planned ? "planned" : "caching").field("total", total)
      .field("capacity", bytes(p.device_capacity)).end_object();
  j.key("step").begin_object().field("seconds", p.step_seconds).field("compute", p.time.compute)
      .field("recompute", p.time.recompute).field("communication", p.time.communication)
      .field("offload_stall", p.time.offload_stall).field("bubble", p.time.bubble)
      .field("pipeline_fill", p.time.pipeline_fill).end_object();
  j.field("host_bytes_per_node", bytes(p.host_per_node)).field("host_capacity_bytes", bytes(p.host_capacity))
      .field("tokens_per_gpu_per_second", p.tokens_per_gpu_per_second).field("mfu", p.mfu).field("hfu", p.hfu)
      .end_object();
}

void write_text(const row& r, bool best, int gpus) {
  std::cout << (best ? "* " : "  ") << mp::strategy_name(r.kind) << ": ";
  if (!r.uncountable.empty()) {
    std::cout << "does not fit: every setting is too large to count: " << r.uncountable << "\n";
    return;
  }
  if (!r.result) {
    std::cout << "no setting applies to this GPU count and length: " << r.no_setting << "\n";
    return;
  }
  const auto& p = *r.result;
  const auto& d = p.device;
  // What runs out, in the order it does: "host memory runs out (at 512K),
  // then device memory (at 768K)"; the host link after them.
  std::string out_of;
  for (const auto& f : p.shortfalls) {
    if (!f.is_memory()) continue;
    const std::string name(mp::to_string(f.resource));
    out_of += out_of.empty() ? name + " runs out" : ", then " + name;
    if (f.runs_out_at > 0 && f.runs_out_at < p.sequence) out_of += " (at " + tokens_text(f.runs_out_at) + ")";
  }
  if (!out_of.empty() && p.link_bound()) out_of += "; the host link cannot hide the offload";
  if (r.nothing_fits) {
    std::cout << nothing_fits_text(r) << "\n";
  } else {
    std::cout << tokens_text(p.sequence) << (p.fits() ? " fits" : " does not fit: " + out_of)
              << (r.capped ? " (the search stops there: longer sequences may fit too)" : "") << "\n";
  }
  std::printf("    settings: TP %d CP %d SP %d PP %d DP %d", p.chosen.tp, p.chosen.cp, p.chosen.sp, p.chosen.pp,
              p.chosen.dp);
  const bool pipeline = p.kind == mp::strategy::sppo || p.kind == mp::strategy::sppo_recompute;
  if (p.chosen.subsequences > 1 || pipeline) std::printf(" N %d", p.chosen.subsequences);
  const auto [alpha_low, alpha_high] = alpha_range(p);
  if (!p.chosen.alpha_i.empty()) {
    std::printf(" alpha_i %.3f..%.3f", alpha_low, alpha_high);
  } else if (p.kind == mp::strategy::memo || p.kind == mp::strategy::swap_planned) {
    std::printf(" alpha %.3f", p.chosen.alpha);
  }
  if (p.chosen.chunk_tokens > 0) std::printf(" chunk %s", tokens_text(p.chosen.chunk_tokens).c_str());
  if (pipeline && p.chosen.pp > 1) std::printf(p.chosen.multiplexed ? ", multiplexed" : ", plain pipeline");
  if (p.chosen.gpus() < gpus) std::printf(" (on %d GPUs, %d idle)", p.chosen.gpus(), gpus - p.chosen.gpus());
  std::printf("\n    GPU GiB: params %s grads %s optimizer %s skeletal %s transient %s framework %s\n",
              gib_text(d.params).c_str(), gib_text(d.grads).c_str(), gib_text(d.optimizer).c_str(),
              gib_text(d.skeletal).c_str(), gib_text(d.transient).c_str(), gib_text(d.framework).c_str());
  std::printf("             planned arena %s, caching reserve %s (%s paid); total %s of %s\n",
              gib_text(d.planned_arena).c_str(), gib_text(d.caching_reserve).c_str(),
              d.planned ? "planned" : "caching", gib_text(d.total()).c_str(), gib_text(p.device_capacity).c_str());
  std::printf("    host GiB per node: %s of %s\n", gib_text(p.host_per_node).c_str(), gib_text(p.host_capacity).c_str());
  std::printf("    step %.2f s: compute %.2f, recompute %.2f, exposed communication %.2f, offload stall %.2f, "
              "bubble %.2f",
              p.step_seconds, p.time.compute, p.time.recompute, p.time.communication, p.time.offload_stall,
              p.time.bubble);
  // Only FPDT has a chunk pipeline; other strategies keep their line as it was.
  if (p.time.pipeline_fill > 0) std::printf(", pipeline fill and drain %.2f", p.time.pipeline_fill);
  std::printf("\n");
  std::printf("    %.0f tokens/GPU/s, MFU %.2f%%, HFU %.2f%%%s\n", p.tokens_per_gpu_per_second, 100 * p.mfu,
              100 * p.hfu, p.link_bound() ? "; the host link is the bottleneck (offload outlasts compute)" : "");
  if (!p.shortfalls.empty()) {
    std::string line;
    for (const auto& f : p.shortfalls) {
      line += (line.empty() ? "" : "; ") + shortfall_text(f);
      if (f.runs_out_at > 0 && f.runs_out_at < p.sequence) line += " (runs out at " + tokens_text(f.runs_out_at) + ")";
    }
    std::printf("    exceeded: %s\n", line.c_str());
  }
}

void print_error(bool json, const std::string& message, int status);

/// Bounds the whole run by --time-limit: a thread that, once the limit
/// passes before the projections are done, reports which strategy and
/// length were being projected and ends the process (a single simulation
/// can outlast any check made between projections).
class time_limit {
 public:
  time_limit(int seconds, bool json)
      : seconds_(seconds), json_(json), deadline_(std::chrono::steady_clock::now() + std::chrono::seconds(seconds)),
        watcher_([this] { watch(); }) {}
  time_limit(const time_limit&) = delete;
  time_limit& operator=(const time_limit&) = delete;
  ~time_limit() { done(); }

  /// What the run is doing now, for the message ("reading the profile ...").
  void doing(std::string what) {
    const std::lock_guard lock(mutex_);
    doing_ = std::move(what);
  }
  void at(mp::strategy kind, double tokens) {
    doing("projecting " + std::string(mp::strategy_name(kind)) + " at " + tokens_text(tokens) + " tokens");
  }
  /// The projections are done: the limit no longer applies.
  void done() {
    {
      const std::lock_guard lock(mutex_);
      finished_ = true;
    }
    changed_.notify_all();
    if (watcher_.joinable()) watcher_.join();
  }

 private:
  void watch() {
    std::unique_lock lock(mutex_);
    if (changed_.wait_until(lock, deadline_, [this] { return finished_; })) return;
    // The lock stays held: the main thread cannot start printing a report.
    print_error(json_,
                "time limit of " + std::to_string(seconds_) + " s reached while " + doing_ +
                    " (raise it with --time-limit)",
                1);
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(1);
  }

  int seconds_;
  bool json_;
  std::chrono::steady_clock::time_point deadline_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool finished_ = false;
  std::string doing_ = "starting";
  std::thread watcher_;
};

int run(const arguments& a) {
  time_limit limit(a.time_limit_seconds, a.json);
  limit.doing("reading the model '" + quote(a.model) + "'");
  const auto model = mp::parse_model_shape(a.model);
  limit.doing("reading the profile '" + quote(a.profile) + "'");
  mp::cluster c{mp::load_cluster_profile(a.profile), *a.gpus, 0};
  c.gpus_per_node = a.gpus_per_node.value_or(c.profile.gpus_per_node);
  const bool search = a.seq == "max";
  const std::vector<mp::strategy> kinds =
      a.strategy == "all" ? pinned_strategies(a.pin) : std::vector<mp::strategy>{*mp::parse_strategy(a.strategy)};
  std::vector<mp::strategy> left_out;  // --strategy all: those without every pinned setting
  if (a.strategy == "all") {
    for (auto k : mp::public_strategies()) {
      if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) left_out.push_back(k);
    }
  }
  std::vector<row> rows;
  for (auto k : kinds) {
    auto project = [&](double s, bool simulate) {
      limit.at(k, s);
      return mp::project(k, model, c, s, simulate, a.pin);
    };
    row r{k, {}, {}, {}, false};
    auto probe = [&](double s) { return project(s, false); };
    // The search starts where the strategy's rules first admit a setting.
    const std::optional<double> shortest =
        search ? mp::shortest_with_setting(probe, search_grid, search_limit) : std::nullopt;
    const double first = search ? shortest.value_or(search_grid) : parse_length(a.seq);
    // A length at which no setting can be counted needs more than any
    // memory: that strategy does not fit (exit status 3, as with `all`),
    // and the other strategies are still answered.
    auto counted = [&](double s) -> std::optional<mp::projection> {
      try {
        return project(s, true);
      } catch (const mp::uncountable_projection& e) {
        r.uncountable = e.message();
        return std::nullopt;
      }
    };
    if (!search) {
      r.result = counted(first);
    } else if (shortest) {
      r.result = mp::longest_fitting_from([&](double s) { return project(s, true); }, probe, search_grid,
                                          search_limit, *shortest);
    }
    if (search && r.result) r.capped = r.result->sequence + search_grid > search_limit;
    // Nothing fits: the shortest length searched says what runs out first.
    if (search && !r.result) {
      r.result = counted(first);
      r.nothing_fits = r.result.has_value();
    }
    if (!r.uncountable.empty()) {
      rows.push_back(std::move(r));
      continue;
    }
    if (r.result && !r.result->fits()) {
      limit.doing("finding where each resource of " + std::string(mp::strategy_name(k)) + " runs out");
      mp::order_shortfalls(*r.result, model, c, search_grid, a.pin);
    }
    if (!r.result) r.no_setting = mp::no_setting_reason(k, model, c, first, a.pin);
    rows.push_back(std::move(r));
  }
  limit.done();
  int best = -1;
  for (int i = 0; i < static_cast<int>(rows.size()); ++i) {
    if (!rows[i].fits()) continue;
    if (best < 0) {
      best = i;
      continue;
    }
    const auto& r = *rows[i].result;
    const auto& b = *rows[best].result;
    if (search ? (r.sequence > b.sequence || (r.sequence == b.sequence && r.mfu > b.mfu)) : r.mfu > b.mfu) best = i;
  }
  if (a.json) {
    memo::json_writer j;
    j.begin_object().field("model", model.name).field("layers", model.layers).field("hidden", model.hidden)
        .field("heads", model.heads).field("vocab", model.vocab).field("gpus", c.gpus)
        .field("gpus_per_node", c.gpus_per_node).field("profile", c.profile.name)
        .field("search", search);
    if (search) j.field("search_grid", bytes(search_grid)).field("search_limit", bytes(search_limit));
    if (!a.pin.empty()) {
      // The settings fixed on the command line, and the strategies left out for not having them.
      // Keys as in "settings": the chunk is "chunk_tokens" there too.
      j.key("pinned").begin_object();
      for (const auto& f : mp::settings_pin::fields) {
        if (!f.given(a.pin)) continue;
        if (f.whole) j.field(f.name, *(a.pin.*(f.whole)));
        else if (f.name == "chunk") j.field("chunk_tokens", bytes(*a.pin.chunk_tokens));
        else j.field(f.name, *(a.pin.*(f.number)));
      }
      j.end_object();
      j.key("left_out").begin_array();
      for (auto k : left_out) j.value(std::string(mp::strategy_name(k)));
      j.end_array();
    }
    j.key("strategies").begin_array();
    for (const auto& r : rows) write_json(j, r, c.gpus);
    j.end_array();
    if (best >= 0) j.field("best", std::string(mp::strategy_name(rows[best].kind)));
    else j.key("best").null();
    j.end_object();
    std::cout << j.str() << "\n";
  } else {
    std::printf("model %s (%d layers, hidden %d, %d heads, vocab %d) on %d GPU(s), %d per node, profile %s\n",
                model.name.c_str(), model.layers, model.hidden, model.heads, model.vocab, c.gpus, c.gpus_per_node,
                quote(c.profile.name).c_str());
    if (!a.pin.empty()) {
      std::string out;
      for (auto k : left_out) out += (out.empty() ? "" : ", ") + std::string(mp::strategy_name(k));
      std::printf("settings fixed: %s%s%s\n", a.pin.text().c_str(),
                  out.empty() ? "" : "; left out (no such setting): ", out.c_str());
    }
    if (search) std::cout << "longest sequence that fits (64K grid, up to 1024M):\n";
    for (int i = 0; i < static_cast<int>(rows.size()); ++i) {
      write_text(rows[i], i == best && rows.size() > 1, c.gpus);
    }
  }
  return best >= 0 ? 0 : 3;
}

void print_error(bool json, const std::string& message, int status) {
  if (json) {
    memo::json_writer j;
    j.begin_object().field("error", message).field("exit_status", status).end_object();
    std::fputs((j.str() + "\n").c_str(), stdout);
    std::fflush(stdout);  // the JSON first, then the message on stderr
  }
  std::fputs(("memo-project: " + std::string(status == 2 ? "" : "error: ") + message + "\n").c_str(), stderr);
  if (status == 2) std::fputs(usage_text, stderr);
}

bool json_requested(int argc, char** argv) {
  return std::find(argv + 1, argv + argc, std::string("--json")) != argv + argc;
}

int finish(int status) { return memo::finish_report("memo-project", status); }

}  // namespace

int main(int argc, char** argv) {
  memo::report_broken_pipes();
  try {
    const auto args = parse_arguments(argc, argv);
    if (args.help) {
      std::cout << usage_text;
      return finish(0);
    }
    return finish(run(args));
  } catch (const usage_error& e) {
    print_error(json_requested(argc, argv), e.message(), 2);
    return finish(2);
  } catch (const memo::error& e) {
    print_error(json_requested(argc, argv), e.message(), 1);
    return finish(1);
  } catch (const std::exception& e) {
    print_error(json_requested(argc, argv), e.what(), 1);
    return finish(1);
  }
}
