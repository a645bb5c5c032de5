// libFuzzer target: the request-trace parser. Any input either parses into a
// trace that passes the problem checks, round-trips through write_trace and
// gets a valid greedy plan, or raises memo::error. Anything else (a crash, a
// sanitizer report, another exception, a failed round trip) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "memo/plan/greedy.hpp"
#include "memo/plan/trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  memo::memory_trace trace;
  try {
    trace = memo::parse_trace(text, "fuzz");
  } catch (const memo::error&) {
    return 0;
  }
  memo::check_problem(trace.problem);  // a parsed trace is always a valid problem
  const auto back = memo::parse_trace(memo::write_trace(trace), "round trip");
  if (!(back.problem.buffers == trace.problem.buffers) || !(back.sections == trace.sections)) std::abort();
  if (trace.problem.buffers.size() <= 200) {
    try {
      const auto r = memo::greedy_by_size_solver{}.solve(trace.problem);
      if (!memo::validate(trace.problem, r.plan)) std::abort();
    } catch (const memo::error&) {
      // byte counts that overflow 64 bits when stacked
    }
  }
  return 0;
}
