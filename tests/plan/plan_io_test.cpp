#include "memo/plan/plan_io.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "memo/plan/greedy.hpp"

TEST_CASE("plan io: a result as json") {
  memo::dsa_result r;
  r.solver = "x";
  r.plan.peak_bytes = 12;
  r.lower_bound_bytes = 8;
  r.seconds = 0.25;
  memo::json_writer j;
  memo::write_json(j, r);
  CHECK(j.str() ==
        R"({"solver":"x","peak_bytes":12,"lower_bound_bytes":8,"peak_over_lower_bound":1.5,"proven_optimal":false,"seconds":0.25})");
}

TEST_CASE("plan io: svg has one rectangle per buffer and the load curve") {
  memo::dsa_problem p;
  p.buffers = {{1, 4, 0, 2, 1}, {2, 2, 1, 4, 1}, {3, 4, 2, 5, 1}};
  const auto r = memo::greedy_by_size_solver{}.solve(p);
  const auto svg = memo::plan_svg(p, r.plan, "t<1>");
  auto count = [&](std::string_view what) {
    std::size_t n = 0;
    for (auto pos = svg.find(what); pos != std::string::npos; pos = svg.find(what, pos + 1)) ++n;
    return n;
  };
  CHECK(count("<rect x=") == 3);
  CHECK(count("<polyline") == 1);
  CHECK(count("t&lt;1&gt;") == 1);
  CHECK(svg.starts_with("<svg"));
  CHECK(svg.ends_with("</svg>\n"));
  CHECK(svg.find("id 2: 2 B at offset") != std::string::npos);
}

TEST_CASE("plan io: svg of a plan whose peak is near 2^64") {
  // The axis tick at the peak is computed in double, where 2^64 - 9 rounds
  // to 2^64; it is drawn as the largest byte count, not converted out of
  // range.
  memo::dsa_problem p;
  p.buffers = {{1, ~std::uint64_t{0} - 8, 0, 2, 1}};
  const auto r = memo::greedy_by_size_solver{}.solve(p);
  const auto svg = memo::plan_svg(p, r.plan);
  CHECK(svg.ends_with("</svg>\n"));
  CHECK(memo::detail::svg_bytes(18446744073709551616.0) == ~std::uint64_t{0});
  CHECK(memo::detail::svg_bytes(-1.0) == 0);
  CHECK(memo::detail::svg_bytes(4096.0) == 4096);
}
