// memo-plan: plans the addresses of every buffer of a memory-request trace
// (MEMO section 4.2) and shows what the plan saves against a caching
// allocator.
//
//   memo-plan [--solver greedy|mip|exact|bilevel|all] [--capacity BYTES]
//             [--time-limit S] [--layers N] [--out plan.csv] [--svg plan.svg]
//             [--json] [--no-dominance] [--no-section-bounds]
//             [--no-alignment-bounds] [--no-symmetry] [--no-decomposition]
//             [--no-restarts] [--no-tight-branching] [--no-transpositions]
//             [--threads N] TRACE
//
// The --no-* flags turn off one part of the exact search (memo::exact_options;
// docs/dsa-solvers.md says what each buys), for it and for the bi-level
// planner's levels; the answers stay exact, only slower to reach. --threads
// gives the exact search N threads (exact_options::threads): N - 1 run
// restarts beside the complete searches.
//
// TRACE is a request trace (`malloc id bytes` / `free id bytes`, optional
// section markers) or DSA benchmark CSV (`id,lower,upper,size[,alignment]`);
// see docs/planning.md. With --layers N, TRACE is one layer's trace (a
// `layer 0 forward` and a `layer 0 backward` section, plus the model's
// other requests before, between and after them) and the model planned is
// that layer stacked N times: forward of layers 0..N-1, backward of layers
// N-1..0. The tool prints a table (or, with --json, one JSON
// object): buffers, lower bound, each solver's peak, peak / lower bound,
// whether it is proven optimal, and its time, beside the reserved peak of a
// simulated caching allocator. The best plan found is validated, then
// written as CSV (`id,offset,size,lower,upper`) and as an SVG picture.
// --time-limit bounds the whole run, reading and the heuristics included:
// the finish (validating and writing the best plan) is held back, sized
// from a timed sweep of the input; every solver gets what is left (the
// online heap first with all of it, then the other heuristics, the MIP a
// third, the exact search half of the rest when the bi-level planner
// follows); optional steps (the caching-allocator baseline, a heuristic or
// the exact search whose setup alone would not fit) are skipped with a
// note rather than take the plan's time; and the MIP, the exact search and the
// bi-level planner run on a thread of their own that is abandoned, not
// waited for, if it has not returned in time. `--solver all` skips
// the MIP on problems far beyond it (more than 200 buffers or 5,000
// time-overlapping pairs) and says so; `--solver mip` runs it regardless.
// The JSON reports the process's peak resident memory (getrusage) and,
// when the exact search runs, its switches in effect ("exact_switches").
// Errors go to stderr (with --json, also as {"error": ..., "exit_status": ...}
// on stdout); the exit status is 1 for bad input, a failed solve or a failed
// write (of the plan, the picture or the report), and 2 for a bad command
// line: an option given twice, or --out / --svg naming the input or each
// other. An input without buffers is an error.
#include <sys/resource.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <thread>
#include <exception>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memo/core/atomic_file.hpp"
#include "memo/core/json.hpp"
#include "memo/core/command_line.hpp"
#include "memo/core/report_output.hpp"
#include "memo/plan/bilevel_planner.hpp"
#include "memo/plan/caching_allocator.hpp"
#include "memo/plan/dsa_problem.hpp"
#include "memo/plan/exact_solver.hpp"
#include "memo/plan/greedy.hpp"
#include "memo/plan/plan_io.hpp"
#include "memo/plan/trace.hpp"
#if MEMO_HAS_LPSOLVE
#include "memo/plan/mip_solver.hpp"
#endif

namespace {

using memo::usage_error;

struct arguments {
  std::string solver = "all";
  std::optional<std::uint64_t> capacity_bytes;
  double time_limit_seconds = 10.0;
  std::optional<std::int64_t> layers;
  std::string out;
  std::string svg;
  bool json = false;
  std::string exact_switch_given;  // the first --no-* switch or --threads, if any
  bool help = false;
  memo::exact_options exact;
  std::string input;
};

// The exact search's switches, each turned off by --no-<name>.
struct exact_switch {
  const char* flag;
  bool memo::exact_options::*field;
};
constexpr exact_switch exact_switches[] = {
    {"--no-dominance", &memo::exact_options::dominance},
    {"--no-section-bounds", &memo::exact_options::section_bounds},
    {"--no-alignment-bounds", &memo::exact_options::alignment_bounds},
    {"--no-symmetry", &memo::exact_options::symmetry},
    {"--no-decomposition", &memo::exact_options::decomposition},
    {"--no-restarts", &memo::exact_options::restarts},
    {"--no-tight-branching", &memo::exact_options::tight_branching},
    {"--no-transpositions", &memo::exact_options::transpositions},
};

// A switch's name in the JSON report: the exact_options field it turns off
// ("--no-section-bounds" -> "section_bounds"), derived from the flag so the
// table above stays the one list of switches.
std::string switch_key(const exact_switch& sw) {
  std::string key(std::string_view(sw.flag).substr(std::string_view("--no-").size()));
  std::replace(key.begin(), key.end(), '-', '_');
  return key;
}

// Whether `--solver` runs the exact search (flat, or as the bi-level
// planner's levels): only then do its switches mean anything.
bool runs_exact_search(const std::string& solver) { return solver != "greedy" && solver != "mip"; }

const char* const usage_text =
    "usage: memo-plan [--solver greedy|mip|exact|bilevel|all] [--capacity BYTES]\n"
    "                 [--time-limit S] [--layers N] [--out plan.csv] [--svg plan.svg]\n"
    "                 [--json] [--no-dominance] [--no-section-bounds]\n"
    "                 [--no-alignment-bounds] [--no-symmetry] [--no-decomposition]\n"
    "                 [--no-restarts] [--no-tight-branching] [--no-transpositions]\n"
    "                 [--threads N] TRACE\n"
    "TRACE: a request trace (malloc/free lines) or DSA CSV (id,lower,upper,size).\n"
    "--layers N: TRACE is one layer (sections 'layer 0 forward' and 'layer 0 backward');\n"
    "            plan the model made of N such layers.\n"
    "--no-*: turn off one part of the exact search (memo::exact_options); the answers\n"
    "        stay exact, only slower to reach.\n"
    "--threads N: the exact search's threads (default 1, deterministic); N - 1 more run\n"
    "        restarts beside it (none with --no-restarts), which finds tightly packed plans\n"
    "        sooner; each takes its own working memory.\n";

// What the user typed, as an error message shows it: control bytes
// escaped and long values cut, like the tokens of an input file.
std::string shown(std::string_view value) { return memo::detail::quote(value); }
std::string shown_path(const std::string& path) { return memo::detail::shown_path(path); }

arguments parse_arguments(int argc, char** argv) {
  arguments a;
  auto need = [&](int& i) -> std::string {
    if (i + 1 >= argc) throw usage_error(shown(argv[i]) + " needs a value");
    return argv[++i];
  };
  std::vector<std::string> seen;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    // An option given twice would silently drop one of its values (an
    // --out path, a capacity): refused instead.
    if (arg.size() > 2 && arg.starts_with("--")) {
      if (std::find(seen.begin(), seen.end(), arg) != seen.end()) {
        throw usage_error("option '" + shown(arg) + "' given more than once");
      }
      seen.push_back(arg);
    }
    if (arg == "--solver") {
      a.solver = need(i);
      if (a.solver != "greedy" && a.solver != "mip" && a.solver != "exact" &&
          a.solver != "bilevel" && a.solver != "all") {
        throw usage_error("unknown solver '" + shown(a.solver) + "' (greedy, mip, exact, bilevel or all)");
      }
    } else if (arg == "--capacity") {
      const std::string v = need(i);
      const auto bytes = memo::detail::parse_bytes(v);
      if (!bytes && memo::detail::is_byte_count_syntax(v)) {
        throw usage_error("--capacity '" + shown(v) + "' is too large for 64 bits (at most " +
                          std::to_string(std::numeric_limits<std::uint64_t>::max()) + " bytes)");
      }
      if (!bytes || *bytes == 0) {
        throw usage_error("--capacity '" + shown(v) +
                          "' is not a positive byte count (digits, optionally KiB/MiB/GiB/TiB)");
      }
      a.capacity_bytes = *bytes;
    } else if (arg == "--time-limit") {
      const std::string v = need(i);
      const std::optional<double> seconds = memo::detail::parse_decimal(v);
      if (!seconds || *seconds < 0.0) {
        throw usage_error("--time-limit '" + shown(v) + "' is not a non-negative number of seconds");
      }
      a.time_limit_seconds = *seconds;
    } else if (arg == "--layers") {
      const std::string v = need(i);
      const auto n = memo::detail::parse_integer<std::int64_t>(v);
      if (!n && !v.empty() && v.find_first_not_of("0123456789") == std::string::npos) {
        throw usage_error("--layers " + memo::detail::integer_problem<std::int64_t>(v));
      }
      if (!n || *n < 1) throw usage_error("--layers '" + shown(v) + "' is not a positive layer count");
      a.layers = *n;
    } else if (arg == "--threads") {
      const std::string v = need(i);
      const auto n = memo::detail::parse_integer<std::int64_t>(v);
      if (!n || *n < 1 || *n > 256) {
        throw usage_error("--threads '" + shown(v) + "' is not a thread count from 1 to 256");
      }
      a.exact.threads = static_cast<unsigned>(*n);
      if (a.exact_switch_given.empty()) a.exact_switch_given = arg;
    } else if (arg == "--out") {
      a.out = need(i);
    } else if (arg == "--svg") {
      a.svg = need(i);
    } else if (arg == "--json") {
      a.json = true;
    } else if (arg == "--help" || arg == "-h") {
      a.help = true;
    } else if (const auto* sw = std::find_if(std::begin(exact_switches), std::end(exact_switches),
                                             [&](const exact_switch& x) { return arg == x.flag; });
               sw != std::end(exact_switches)) {
      a.exact.*(sw->field) = false;
      if (a.exact_switch_given.empty()) a.exact_switch_given = arg;
    } else if (!arg.empty() && arg[0] == '-') {
      std::string known;
      if (arg.starts_with("--no-")) {
        for (const auto& x : exact_switches) known += std::string(known.empty() ? "" : ", ") + x.flag;
        known = " (the exact search's switches are " + known + ")";
      }
      throw usage_error("unknown option '" + shown(arg) + "'" + known);
    } else if (a.input.empty()) {
      a.input = arg;
    } else {
      throw usage_error("more than one input file ('" + shown_path(a.input) + "', '" + shown_path(arg) + "')");
    }
  }
  if (a.input.empty() && !a.help) throw usage_error("no input trace given");
  if (!a.exact_switch_given.empty() && !runs_exact_search(a.solver)) {
    throw usage_error(a.exact_switch_given + " tunes the exact search, which --solver " + a.solver +
                      " does not run (use exact, bilevel or all)");
  }
  // Nothing the user gave is overwritten: the plan and the picture go to
  // files other than the input and other than each other.
  const auto same_file = [](const std::string& x, const std::string& y) { return memo::names_same_file(x, y); };
  if (!a.input.empty()) {
    for (const auto* option : {&a.out, &a.svg}) {
      if (!option->empty() && same_file(*option, a.input)) {
        throw usage_error(std::string(option == &a.out ? "--out" : "--svg") + " '" + shown_path(*option) +
                          "' is the input file; it would be overwritten");
      }
    }
  }
  if (!a.out.empty() && !a.svg.empty() && same_file(a.out, a.svg)) {
    throw usage_error("--out and --svg name the same file '" + shown_path(a.out) + "'");
  }
  // With --json stdout holds exactly one JSON object; a file written there
  // would be mixed into it.
  for (const auto* option : {&a.out, &a.svg}) {
    if (a.json && memo::names_standard_output(*option)) {
      throw usage_error(std::string(option == &a.out ? "--out" : "--svg") + " '" + shown_path(*option) +
                        "' is standard output, where --json prints its report: write the file elsewhere");
    }
  }
  return a;
}

struct row {
  std::string solver;
  std::optional<memo::dsa_result> result;
  std::string failure;  // set when the solver raised an error
  std::string skipped;  // set when the solver was not run, and why
  bool proven_infeasible = false;  // the failure is a proof that the capacity is too small
};

using clock_type = std::chrono::steady_clock;

// Set when a solver was abandoned at the time limit: its thread still runs,
// so the process ends with _Exit once the report is out (nothing it holds
// is shared with the main thread, and no destructor must wait for it).
bool abandoned_a_solver = false;

// Runs `fn` (which owns everything it reads) on a thread of its own and
// waits for it until `until`. A solver that has not returned by then is
// abandoned rather than waited for: the library's solvers honour their time
// limits, and this makes the run's bound hold even for a step of one that
// does not. Errors `fn` raises are raised here.
template <class T, class Fn>
std::optional<T> run_bounded(clock_type::time_point until, Fn fn) {
  auto task = std::make_shared<std::packaged_task<T()>>(std::move(fn));
  auto result = task->get_future();
  std::thread worker([task] { (*task)(); });
  if (result.wait_until(until) != std::future_status::ready) {
    worker.detach();
    abandoned_a_solver = true;
    return std::nullopt;
  }
  worker.join();  // a finished solver's thread ends here, not during exit
  return result.get();
}

// The MIP's size: one binary per pair of buffers that share an instant.
// Counted by a sweep (frees first), not by trying every pair.
std::uint64_t overlapping_pairs(const memo::dsa_problem& problem) {
  std::uint64_t pairs = 0;
  std::uint64_t live = 0;
  for (const auto& e : memo::detail::timeline_events(problem.buffers)) {
    if (e.is_malloc) {
      pairs += live;
      ++live;
    } else {
      --live;
    }
  }
  return pairs;
}

// The largest problem `--solver all` gives to the MIP; past it lp_solve
// spends the whole time limit building and relaxing a model it cannot solve.
constexpr std::size_t mip_max_buffers = 200;
constexpr std::uint64_t mip_max_pairs = 5000;

std::uint64_t peak_rss_bytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

std::string ratio_text(std::uint64_t value, std::uint64_t bound) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4f",
                bound == 0 ? 1.0 : static_cast<double>(value) / static_cast<double>(bound));
  return text;
}

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f s", s);
  return text;
}

std::string pad(std::string text, std::size_t width) {
  text.append(text.size() < width ? width - text.size() : 1, ' ');
  return text;
}

template <class Fn>
row run(std::string name, Fn&& fn) {
  row r;
  r.solver = std::move(name);
  try {
    r.result = fn();
    r.solver = r.result->solver.empty() ? r.solver : r.result->solver;
  } catch (const memo::capacity_infeasible& e) {
    r.failure = e.message();
    r.proven_infeasible = true;
  } catch (const memo::error& e) {
    r.failure = e.message();
  }
  return r;
}

// The trace to plan: the input itself, or with --layers the model made by
// stacking the input's layer. The capacity is checked against the model.
memo::memory_trace read_input(const arguments& args, const memo::parse_options& parse) {
  if (!args.layers) return memo::read_problem_file(args.input, parse);
  const memo::memory_trace layer = memo::read_problem_file(args.input);
  memo::memory_trace model;
  try {
    model = memo::stack_layer_trace(layer, *args.layers);
  } catch (const memo::error& e) {
    throw memo::error(shown_path(args.input) + ": --layers " + std::to_string(*args.layers) + ": " + e.message());
  }
  model.problem.capacity_bytes = parse.capacity_bytes;
  memo::detail::check_capacity(model.problem,
                               shown_path(args.input) + " x " + std::to_string(*args.layers) + " layers");
  return model;
}

int plan(const arguments& args, clock_type::time_point started) {
  const double limit_seconds = std::min(args.time_limit_seconds, 1e7);
  auto after = [&](double seconds) {
    return started + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds));
  };
  auto seconds_until = [](clock_type::time_point when) {
    return std::max(0.0, std::chrono::duration<double>(when - clock_type::now()).count());
  };
  memo::parse_options parse;
  parse.capacity_bytes = args.capacity_bytes;
  // Reading is bounded by the limit too (a FIFO without a writer blocks in
  // open(); an endless stream is read up to max_input_bytes): it may take
  // the limit plus half a second of the second the run may overrun by, so a
  // zero limit still reads a small input and gets the heuristics' plans.
  auto read = run_bounded<memo::memory_trace>(after(limit_seconds + 0.5),
                                              [args, parse] { return read_input(args, parse); });
  if (!read) {
    throw memo::error(shown_path(args.input) + ": reading did not finish within the time limit of " +
                      seconds_text(args.time_limit_seconds) + " (+ 0.5 s); abandoned");
  }
  // Shared: a solver abandoned at the time limit keeps its own reference.
  const auto shared_trace = std::make_shared<const memo::memory_trace>(std::move(*read));
  const memo::memory_trace& trace = *shared_trace;
  const memo::dsa_problem& problem = trace.problem;
  if (problem.buffers.empty()) {
    throw memo::error(shown_path(args.input) + ": no buffers to plan (the input holds no malloc request or CSV row)");
  }
  memo::check_problem(problem);
  // Every step whose cost grows with the input is budgeted in units of one
  // sweep over the timeline (a sort of its 2n requests), timed here on the
  // lower bound, which is such a sweep: the plan's validation costs about
  // one, writing its CSV about two, its picture about twenty-five, the
  // caching-allocator simulation about three and the online heap about
  // six, its own checks and validation included (measured at 10^6 buffers). Being timed, not assumed, the units
  // follow the machine and its load.
  const auto sweep_started = clock_type::now();
  const std::uint64_t bound = memo::lower_bound_bytes(problem);
  const double sweep_seconds =
      std::max(1e-5, std::chrono::duration<double>(clock_type::now() - sweep_started).count());
  const double validate_sweeps = 1.5;  // with a margin, as every estimate below
  const double heap_sweeps = 6.0;
  const double exact_setup_sweeps = 20.0;  // measured 15
  // What follows the solvers (validating the best plan, writing it and the
  // report) is held back from them. The estimate has a quarter for margin;
  // the second the run may overrun its limit by covers a worse misestimate.
  const double finish_sweeps = 1.0 + (args.out.empty() ? 0.0 : 2.0) + (args.svg.empty() ? 0.0 : 25.0);
  const double finish_seconds = 0.05 + 1.25 * sweep_seconds * finish_sweeps;
  auto before_end = [&](double seconds) {
    return after(limit_seconds) -
           std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds));
  };
  const auto finish_by = before_end(finish_seconds);
  // The online heap, the plan of last resort, may run until the finish
  // estimated without its margin would end half a second past the limit:
  // a run that needs it then ends inside the second the run may overrun
  // by, rather than without a plan. A heap that is done sooner (the usual
  // case) leaves the rest to the others, who keep inside the limit.
  const double heap_finish_seconds = 0.02 + sweep_seconds * (finish_sweeps + 1.0);
  const auto heap_until = before_end(heap_finish_seconds - 0.5);
  // Every solver but the online heap stops by this instant: a tenth of the
  // limit is also kept for waiting on a solver thread and for the report.
  const auto deadline =
      finish_by - std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(limit_seconds * 0.1));
  // How long the main thread waits for a solver running on its own thread:
  // a little past the solvers' deadline, still inside the limit.
  const auto wait_until =
      deadline + std::chrono::duration_cast<clock_type::duration>(
                     std::chrono::duration<double>(limit_seconds * 0.03));
  auto bounded = [&](const std::string& name, auto solve) -> memo::dsa_result {
    auto result = run_bounded<memo::dsa_result>(wait_until, std::move(solve));
    if (!result) throw memo::error(name + ": did not return within the time limit; abandoned");
    return std::move(*result);
  };
  // An optional step (the caching-allocator baseline, the MIP's pair count)
  // runs only when the time left before the solvers' deadline covers it, so
  // it never takes the time of a plan; otherwise the report says why not.
  auto skip_reason = [&](double sweeps, const char* what, double left) -> std::string {
    const double needed = sweeps * sweep_seconds;
    if (needed <= left || needed < 1e-3) return {};  // a step under a millisecond always runs
    return std::string("skipped: ") + what + " takes about " + seconds_text(needed) + " here and " +
           seconds_text(left) + " of the time limit was left for it";
  };

  // A heuristic's time: until `until`, less the validation it does after
  // its deadline.
  auto until = [&](clock_type::time_point when, double fraction) {
    memo::dsa_solve_options o;
    o.time_limit_seconds = std::max(0.0, seconds_until(when) * fraction - validate_sweeps * sweep_seconds);
    return o;
  };
  auto remaining = [&] {
    memo::dsa_solve_options o;
    o.time_limit_seconds = seconds_until(deadline);
    return o;
  };
  const bool all = args.solver == "all";
  std::vector<row> rows;
  std::optional<memo::dsa_plan> greedy_best;
  auto remember = [&](const row& r) {
    if (r.result && (!greedy_best || r.result->plan.peak_bytes < greedy_best->peak_bytes)) {
      greedy_best = r.result->plan;
    }
  };
  const bool heuristics = all || args.solver == "greedy" || args.solver == "mip" || args.solver == "exact";
  // The online heap is O(n log n) and runs first, with all the time left
  // before the finish, so a plan exists whenever one can be had in time;
  // the other steps share what it leaves.
  std::optional<row> heap;
  bool heap_failed = false;
  const double heap_started_seconds = std::chrono::duration<double>(clock_type::now() - started).count();
  if (heuristics) {
    heap = run("best-fit-heap", [&] { return memo::best_fit_heap_solver{}.solve(problem, [&] {
      memo::dsa_solve_options o;
      o.time_limit_seconds = seconds_until(heap_until);
      return o;
    }()); });
    remember(*heap);
    heap_failed = !heap->result;
  }
  // The baseline is a simulation for comparison: when it cannot run (its
  // 512-byte rounding of a size near 2^64 overflows) or there is no time
  // for it, the plan is still made and the report says why it is missing.
  std::optional<memo::caching_allocator_report> caching;
  std::string caching_failure = skip_reason(4.0, "the simulation", seconds_until(deadline));
  if (caching_failure.empty()) {
    try {
      caching = memo::simulate_caching_allocator(problem);
    } catch (const memo::error& e) {
      caching_failure = e.message();
    }
  }
  if (heuristics) {
    // The heuristics also seed the MIP and the exact search. Best fit
    // among time neighbours scans the neighbours, which on traces with very
    // many buffers live at once is what runs out of time; they share what
    // the heap left (then the solvers below split what they leave). With
    // --solver all they keep back most of it for the exact search, unless
    // the time left already cannot cover its setup (it will be skipped).
    // The table keeps its order.
    // One whose share does not cover even its setup (the checks and the
    // placement index, about four sweeps) is skipped: it could not finish.
    auto heuristic = [&](const char* name, auto solver, double fraction) {
      const memo::dsa_solve_options o = until(deadline, fraction);
      std::string why = skip_reason(4.0, "its setup alone", o.time_limit_seconds);
      if (why.empty()) {
        rows.push_back(run(name, [&] { return solver.solve(problem, o); }));
        remember(rows.back());
      } else {
        rows.push_back({name, std::nullopt, "", std::move(why)});
      }
    };
    const bool keep_for_exact = all && skip_reason(exact_setup_sweeps, "", seconds_until(deadline)).empty();
    heuristic("greedy-size", memo::greedy_by_size_solver{}, keep_for_exact ? 0.25 : 0.5);
    heuristic("first-fit", memo::first_fit_solver{}, keep_for_exact ? 0.3 : 1.0);
    rows.push_back(std::move(*heap));
  }
  const bool bilevel_follows = (all || args.solver == "bilevel") && !trace.sections.empty();
  // A solver's share: `fraction` of the time left.
  auto share = [&](double fraction) {
    memo::dsa_solve_options o = remaining();
    o.time_limit_seconds *= fraction;
    o.warm_start = greedy_best;
    return o;
  };
  if (all || args.solver == "mip") {
#if MEMO_HAS_LPSOLVE
    // The pair count decides only for --solver all; past the buffer limit
    // it is shown when there is time to count it.
    std::optional<std::uint64_t> pairs;
    if (all && (problem.buffers.size() <= mip_max_buffers || skip_reason(validate_sweeps, "", seconds_until(deadline)).empty())) {
      pairs = overlapping_pairs(problem);
    }
    if (all && (problem.buffers.size() > mip_max_buffers || *pairs > mip_max_pairs)) {
      row skipped;
      skipped.solver = "mip";
      skipped.skipped = "skipped: " + std::to_string(problem.buffers.size()) + " buffers, " +
                        (pairs ? std::to_string(*pairs) : std::string("uncounted")) +
                        " overlapping pairs, beyond the MIP (--solver all runs it up to " +
                        std::to_string(mip_max_buffers) + " buffers and " + std::to_string(mip_max_pairs) +
                        " pairs; --solver mip runs it anyway)";
      rows.push_back(std::move(skipped));
    } else {
      rows.push_back(run("mip", [&] {
        return bounded("mip", [shared_trace, o = share(all ? 1.0 / 3.0 : 1.0)] {
          return memo::mip_solver{}.solve(shared_trace->problem, o);
        });
      }));
    }
#else
    if (!all) throw memo::error("this memo-plan was built without lp_solve: the mip solver is unavailable");
    rows.push_back({"mip", std::nullopt, "not available: built without lp_solve", ""});
#endif
  }
  std::optional<memo::dsa_result> flat_exact;
  if (all || args.solver == "exact" || args.solver == "bilevel") {
    // Its setup (the tables and its own greedy plans, about fifteen sweeps
    // at 10^6 buffers) is not cut by its deadline: with less time than that
    // it is skipped rather than abandoned still running.
    const auto o = share(bilevel_follows ? 0.5 : 1.0);
    std::string why = skip_reason(exact_setup_sweeps, "the exact search's setup", o.time_limit_seconds);
    if (why.empty()) {
      rows.push_back(run("exact", [&] {
        return bounded("exact", [shared_trace, o, exact = args.exact] {
          return memo::exact_solver(exact).solve(shared_trace->problem, o);
        });
      }));
      if (rows.back().result) flat_exact = rows.back().result;
    } else {
      rows.push_back({"exact", std::nullopt, "", std::move(why)});
    }
  }
  std::optional<memo::bilevel_result> bilevel;
  if (all || args.solver == "bilevel") {
    if (trace.sections.empty()) {
      if (!all) {
        throw memo::error(shown_path(args.input) +
                          ": the bi-level planner needs section markers ('section begin <name>' / "
                          "'section end <name>') and this input has none");
      }
      rows.push_back({"bilevel", std::nullopt, "", "not run: the input has no sections"});
    } else {
      rows.push_back(run("bilevel", [&] {
        bilevel = run_bounded<memo::bilevel_result>(wait_until, [shared_trace, o = remaining(), exact = args.exact] {
          memo::bilevel_planner<> planner{memo::exact_solver(exact), memo::exact_solver(exact)};
          return planner.plan(*shared_trace, o);
        });
        if (!bilevel) throw memo::error("bilevel: did not return within the time limit; abandoned");
        memo::dsa_result r;
        r.plan = bilevel->plan;
        r.lower_bound_bytes = bilevel->flat_lower_bound_bytes;
        r.proven_optimal = r.plan.peak_bytes == r.lower_bound_bytes;
        r.seconds = bilevel->seconds;
        r.solver = "bilevel";
        return r;
      }));
    }
  }

  // The best plan: least peak, proven first on ties, then table order.
  const row* best = nullptr;
  for (const auto& r : rows) {
    if (!r.result) continue;
    if (best == nullptr || r.result->plan.peak_bytes < best->result->plan.peak_bytes ||
        (r.result->plan.peak_bytes == best->result->plan.peak_bytes && r.result->proven_optimal &&
         !best->result->proven_optimal)) {
      best = &r;
    }
  }
  if (best == nullptr) {
    std::string reasons;
    for (const auto& r : rows) reasons += "\n  " + r.solver + ": " + (r.skipped.empty() ? r.failure : r.skipped);
    const auto proof = std::find_if(rows.begin(), rows.end(), [](const row& r) { return r.proven_infeasible; });
    if (proof != rows.end()) {
      // An answer, not a lack of time: no limit would give a plan.
      throw memo::error("capacity " + std::to_string(*problem.capacity_bytes) + " bytes is infeasible (proven by " +
                        proof->solver + "):" + reasons);
    }
    std::string message = "no solver produced a plan within the time limit of " +
                          seconds_text(args.time_limit_seconds) + ":" + reasons;
    if (heap_failed) {
      // What a limit that lets the heap finish would be: the time spent
      // before it, the heap with its own checks, and the finish.
      const double needed = heap_started_seconds + heap_sweeps * sweep_seconds + heap_finish_seconds;
      message += "\n  reading and checking took " + seconds_text(heap_started_seconds) +
                 "; the online heap needs about " + seconds_text(heap_sweeps * sweep_seconds) +
                 " and validating and writing the plan about " + seconds_text(heap_finish_seconds) +
                 ": a --time-limit of about " + seconds_text(std::ceil(needed * 10.0) / 10.0) +
                 " would give a plan";
    }
    throw memo::error(message);
  }
  memo::require_valid(problem, best->result->plan, best->solver);
  if (!args.out.empty()) memo::write_text_file(args.out, memo::write_plan_csv(problem, best->result->plan));
  if (!args.svg.empty()) {
    memo::write_text_file(args.svg, memo::plan_svg(problem, best->result->plan,
                                                   args.input + " (" + best->solver + ")"));
  }

  if (args.json) {
    memo::json_writer j;
    j.begin_object().field("input", args.input).field("layers", args.layers);
    j.field("buffers", problem.buffers.size());
    j.key("never_freed").begin_array();
    for (const auto id : trace.never_freed) j.value(id);
    j.end_array();
    j.field("sections", trace.sections.size());
    j.field("lower_bound_bytes", bound);
    j.field("capacity_bytes", args.capacity_bytes);
    j.key("caching_allocator");
    if (caching) {
      j.begin_object()
          .field("reserved_peak_bytes", caching->reserved_peak_bytes)
          .field("allocated_peak_bytes", caching->allocated_peak_bytes)
          .field("segments", caching->segments)
          .field("reserved_over_lower_bound",
                 bound == 0 ? 1.0
                            : static_cast<double>(caching->reserved_peak_bytes) / static_cast<double>(bound))
          .end_object();
    } else {
      j.begin_object().field("error", caching_failure).end_object();
    }
    // The switches in effect, so a report says which search produced its
    // figures (a run with --no-restarts is slower, not wrong, and its time
    // is only comparable with others run alike).
    if (runs_exact_search(args.solver)) {
      j.key("exact_switches").begin_object();
      for (const auto& sw : exact_switches) j.field(switch_key(sw), args.exact.*(sw.field));
      j.end_object();
      j.field("exact_threads", static_cast<std::uint64_t>(args.exact.threads));
    }
    j.key("solvers").begin_array();
    for (const auto& r : rows) {
      if (r.result) {
        memo::write_json(j, *r.result);
      } else if (!r.skipped.empty()) {
        j.begin_object().field("solver", r.solver).field("skipped", r.skipped).end_object();
      } else {
        j.begin_object().field("solver", r.solver).field("error", r.failure).end_object();
      }
    }
    j.end_array();
    if (bilevel) {
      j.key("bilevel")
          .begin_object()
          .field("peak_bytes", bilevel->plan.peak_bytes)
          .field("flat_lower_bound_bytes", bilevel->flat_lower_bound_bytes)
          .field("level2_lower_bound_bytes", bilevel->level2_lower_bound_bytes)
          .field("level2_proven_optimal", bilevel->level2_proven_optimal)
          .field("sections", bilevel->sections.size())
          .field("level1_solves", bilevel->level1_solves)
          .field("skeletal_buffers", bilevel->skeletal_ids.size())
          .field("outside_buffers", bilevel->outside_ids.size())
          .field("level1_seconds", bilevel->level1_seconds)
          .field("level2_seconds", bilevel->level2_seconds)
          .field("seconds", bilevel->seconds);
      j.field("flat_exact_peak_bytes",
              flat_exact ? std::optional(flat_exact->plan.peak_bytes) : std::nullopt);
      j.field("flat_exact_seconds", flat_exact ? std::optional(flat_exact->seconds) : std::nullopt);
      j.end_object();
    }
    j.field("best", best->solver);
    auto path = [](const std::string& p) { return p.empty() ? std::nullopt : std::optional(p); };
    j.field("out", path(args.out)).field("svg", path(args.svg));
    j.field("seconds", std::chrono::duration<double>(clock_type::now() - started).count());
    j.field("peak_rss_bytes", peak_rss_bytes());
    j.end_object();
    std::cout << j.str() << "\n";
    return 0;
  }

  std::cout << "memo-plan: " << shown_path(args.input);
  if (args.layers) std::cout << ", its layer stacked " << *args.layers << " times";
  std::cout << "\n";
  std::cout << "  buffers            " << problem.buffers.size();
  if (!trace.sections.empty()) std::cout << " in " << trace.sections.size() << " sections";
  std::cout << "\n";
  std::cout << "  lower bound        " << memo::format_bytes(bound) << " (" << bound << " bytes)\n";
  if (args.capacity_bytes) {
    std::cout << "  capacity           " << memo::format_bytes(*args.capacity_bytes) << " ("
              << *args.capacity_bytes << " bytes)\n";
  }
  if (caching) {
    std::cout << "  caching allocator  reserved peak " << memo::format_bytes(caching->reserved_peak_bytes)
              << " = " << ratio_text(caching->reserved_peak_bytes, bound) << " x lower bound ("
              << caching->segments << " segments)\n";
  } else {
    std::cout << "  caching allocator  not simulated: " << caching_failure << "\n";
  }
  if (!trace.never_freed.empty()) {
    std::cout << "  note: " << trace.never_freed.size()
              << " buffer(s) never freed, live to the end of the trace: ids";
    std::size_t shown = 0;
    for (const auto id : trace.never_freed) {
      if (shown++ == 10) {
        std::cout << " ...";
        break;
      }
      std::cout << ' ' << id;
    }
    std::cout << "\n";
  }
  // The peak column is as wide as its widest entry (a peak near 2^64 bytes
  // is millions of TiB), so the columns after it stay aligned.
  std::size_t peak_width = 14;
  for (const auto& r : rows) {
    if (r.result) peak_width = std::max(peak_width, memo::format_bytes(r.result->plan.peak_bytes).size() + 2);
  }
  if (caching) peak_width = std::max(peak_width, memo::format_bytes(caching->reserved_peak_bytes).size() + 2);
  std::cout << "\n  " << pad("solver", 15) << pad("peak", peak_width) << pad("peak/LB", 11) << pad("proven", 8)
            << "time\n";
  for (const auto& r : rows) {
    std::cout << "  " << pad(r.solver, 15);
    if (r.result) {
      std::cout << pad(memo::format_bytes(r.result->plan.peak_bytes), peak_width)
                << pad(ratio_text(r.result->plan.peak_bytes, bound), 11)
                << pad(r.result->proven_optimal ? "yes" : "no", 8) << seconds_text(r.result->seconds)
                << "\n";
    } else {
      std::cout << (r.skipped.empty() ? r.failure : r.skipped) << "\n";
    }
  }
  if (caching) {
    std::cout << "  " << pad("caching-alloc", 15) << pad(memo::format_bytes(caching->reserved_peak_bytes), peak_width)
              << pad(ratio_text(caching->reserved_peak_bytes, bound), 11) << pad("-", 8) << "(reserved)\n";
  }
  if (bilevel) {
    std::cout << "\n  bilevel: " << bilevel->sections.size() << " sections, " << bilevel->level1_solves
              << " level-1 solves, " << bilevel->skeletal_ids.size() << " skeletal and "
              << bilevel->outside_ids.size() << " outside buffers; level 1 "
              << seconds_text(bilevel->level1_seconds) << ", level 2 "
              << seconds_text(bilevel->level2_seconds) << "; peak "
              << ratio_text(bilevel->plan.peak_bytes, bound) << " x flat lower bound";
    if (flat_exact) {
      std::cout << "; flat exact " << ratio_text(flat_exact->plan.peak_bytes, bound) << " x in "
                << seconds_text(flat_exact->seconds);
    }
    std::cout << "\n";
  }
  std::cout << "\n  best: " << best->solver << ", " << memo::format_bytes(best->result->plan.peak_bytes)
            << " (validated)";
  if (!args.out.empty()) std::cout << "; plan written to " << shown_path(args.out);
  if (!args.svg.empty()) std::cout << "; picture written to " << shown_path(args.svg);
  std::cout << "\n";
  std::cout << "  run: " << seconds_text(std::chrono::duration<double>(clock_type::now() - started).count())
            << ", peak resident memory " << memo::format_bytes(peak_rss_bytes()) << "\n";
  return 0;
}

}  // namespace

// The report itself must reach its reader: a failed write to stdout is an
// error like a failed write of the plan.
int finish(int status) {
  status = memo::finish_report("memo-plan", status);
  if (abandoned_a_solver) {
    std::cerr.flush();
    std::_Exit(status);
  }
  return status;
}

// With --json, an error is also one JSON object on stdout ({"error": ...,
// "exit_status": ...}), so a reader parsing stdout always gets JSON.
int fail(int argc, char** argv, const std::string& message, int status) {
  if (std::find(argv + 1, argv + argc, std::string("--json")) != argv + argc) {
    memo::json_writer j;
    j.begin_object().field("error", message).field("exit_status", status).end_object();
    std::cout << j.str() << "\n";
    std::cout.flush();
  }
  return status;
}

int main(int argc, char** argv) {
  const auto started = clock_type::now();
#if defined(__GLIBC__)
  // One malloc arena for every thread: the solvers run on threads of their
  // own, and memory the heuristics freed is then reused by the exact search
  // instead of sitting in another arena (the peak resident memory reported
  // is the run's, so this is what a user sees per buffer).
  mallopt(M_ARENA_MAX, 1);
#endif
  memo::report_broken_pipes();
  try {
    const arguments args = parse_arguments(argc, argv);
    if (args.help) {
      std::cout << usage_text;
      return finish(0);
    }
    return finish(plan(args, started));
  } catch (const usage_error& e) {
    const int status = fail(argc, argv, e.message(), 2);
    std::cerr << "memo-plan: " << e.message() << "\n" << usage_text;
    return finish(status);
  } catch (const memo::error& e) {
    const int status = fail(argc, argv, e.message(), 1);
    std::cerr << "memo-plan: error: " << e.message() << "\n";
    return finish(status);
  } catch (const std::exception& e) {
    const int status = fail(argc, argv, e.what(), 1);
    std::cerr << "memo-plan: error: " << e.what() << "\n";
    return finish(status);
  }
}
