// memo/core/lp_solve.hpp
//
// A small owning wrapper over lp_solve 5.5, the MIP/LP solver MEMO's paper
// uses for both of its optimisation problems (the offload fraction alpha of
// section 4.1 and the memory plan of section 4.2). Requires the
// `memo::lpsolve` CMake component.
//
// The wrapper exists for two reasons: the `lprec*` must be freed on every
// path, exceptions included, and every lp_solve status must become either a
// result the caller inspects (`lp_outcome`) or a `memo::error` naming the
// status, never an ignored integer. Columns are 0-based here (lp_solve's are
// 1-based); rows are added whole, sparse, with `add_row`.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <source_location>
#include <span>
#include <string>
#include <vector>

#include <lpsolve/lp_lib.h>

#include "memo/core/error.hpp"

// lp_lib.h defines short macros that collide with ordinary identifiers in
// user code; memo reads the values it needs and removes the names.
namespace memo::detail {
inline constexpr int lp_le = LE;
inline constexpr int lp_ge = GE;
inline constexpr int lp_eq = EQ;
inline constexpr int lp_optimal = OPTIMAL;
inline constexpr int lp_suboptimal = SUBOPTIMAL;
inline constexpr int lp_infeasible = INFEASIBLE;
inline constexpr int lp_unbounded = UNBOUNDED;
inline constexpr int lp_degenerate = DEGENERATE;
inline constexpr int lp_numfailure = NUMFAILURE;
inline constexpr int lp_userabort = USERABORT;
inline constexpr int lp_timeout = TIMEOUT;
inline constexpr int lp_presolved = PRESOLVED;
inline constexpr int lp_nomemory = NOMEMORY;
inline constexpr int lp_neutral = NEUTRAL;
}  // namespace memo::detail
#undef LE
#undef GE
#undef EQ
#undef OF
#undef FR
#undef TRUE
#undef FALSE
#undef AUTOMATIC
#undef DEF_INFINITY
#undef REAL

namespace memo {

enum class lp_sense { less_equal, greater_equal, equal };

/// What a solve produced. `optimal` and `feasible` (a time limit hit after an
/// incumbent was found) carry a solution; the others do not.
enum class lp_outcome { optimal, feasible, infeasible, unbounded, timed_out };

inline const char* to_string(lp_outcome outcome) {
  switch (outcome) {
    case lp_outcome::optimal: return "optimal";
    case lp_outcome::feasible: return "feasible (not proven optimal)";
    case lp_outcome::infeasible: return "infeasible";
    case lp_outcome::unbounded: return "unbounded";
    case lp_outcome::timed_out: return "timed out without a solution";
  }
  return "unknown";
}

/// The name of an lp_solve status code, for messages.
inline const char* lp_status_name(int status) {
  switch (status) {
    case NOMEMORY: return "NOMEMORY";
    case NOTRUN: return "NOTRUN";
    case OPTIMAL: return "OPTIMAL";
    case SUBOPTIMAL: return "SUBOPTIMAL";
    case INFEASIBLE: return "INFEASIBLE";
    case UNBOUNDED: return "UNBOUNDED";
    case DEGENERATE: return "DEGENERATE";
    case NUMFAILURE: return "NUMFAILURE";
    case USERABORT: return "USERABORT";
    case TIMEOUT: return "TIMEOUT";
    case PRESOLVED: return "PRESOLVED";
    case PROCFAIL: return "PROCFAIL";
    case PROCBREAK: return "PROCBREAK";
    case FEASFOUND: return "FEASFOUND";
    case NOFEASFOUND: return "NOFEASFOUND";
    default: return "unknown lp_solve status";
  }
}

/// Throws a `memo::error` in the "lp_solve" domain unless `ok` holds.
inline void check_lp_solve(bool ok, const char* call,
                           std::source_location where = std::source_location::current()) {
  if (!ok) throw error(std::string("lp_solve call ") + call + " failed", "lp_solve", 0, where);
}

class lp_model {
 public:
  /// A model with `columns` continuous variables in [0, +inf) and no rows.
  explicit lp_model(int columns) : columns_(columns) {
    expects(columns > 0, "an LP needs at least one column");
    lp_ = make_lp(0, columns);
    check_lp_solve(lp_ != nullptr, "make_lp");
    set_verbose(lp_, detail::lp_neutral);
    set_add_rowmode(lp_, 1);
  }
  lp_model(const lp_model&) = delete;
  lp_model& operator=(const lp_model&) = delete;
  lp_model(lp_model&& other) noexcept : lp_(other.lp_), columns_(other.columns_) {
    other.lp_ = nullptr;
  }
  lp_model& operator=(lp_model&& other) noexcept {
    std::swap(lp_, other.lp_);
    std::swap(columns_, other.columns_);
    return *this;
  }
  ~lp_model() {
    if (lp_ != nullptr) delete_lp(lp_);
  }

  [[nodiscard]] int columns() const noexcept { return columns_; }
  [[nodiscard]] static double infinity() noexcept { return 1e30; }

  void set_bounds(int column, double lower, double upper) {
    check_column(column);
    check_lp_solve(set_lowbo(lp_, column + 1, lower) != 0, "set_lowbo");
    check_lp_solve(set_upbo(lp_, column + 1, upper) != 0, "set_upbo");
  }
  void set_integer(int column, bool integer = true) {
    check_column(column);
    check_lp_solve(set_int(lp_, column + 1, integer ? 1 : 0) != 0, "set_int");
  }
  void set_binary(int column) {
    check_column(column);
    check_lp_solve(::set_binary(lp_, column + 1, 1) != 0, "set_binary");
  }
  void set_name(int column, const std::string& name) {
    check_column(column);
    check_lp_solve(set_col_name(lp_, column + 1, const_cast<char*>(name.c_str())) != 0,
                   "set_col_name");
  }

  /// Adds the row  sum(values[k] * x[columns[k]])  (sense)  rhs.
  void add_row(std::span<const int> columns, std::span<const double> values, lp_sense sense,
               double rhs) {
    expects(columns.size() == values.size(), "add_row: columns and values differ in length");
    std::vector<int> ones_based(columns.size());
    for (std::size_t k = 0; k < columns.size(); ++k) {
      check_column(columns[k]);
      ones_based[k] = columns[k] + 1;
    }
    const int type = sense == lp_sense::less_equal    ? detail::lp_le
                     : sense == lp_sense::greater_equal ? detail::lp_ge
                                                        : detail::lp_eq;
    check_lp_solve(add_constraintex(lp_, static_cast<int>(columns.size()),
                                    const_cast<double*>(values.data()), ones_based.data(),
                                    type, rhs) != 0,
                   "add_constraintex");
  }

  /// Sets the objective  sum(values[k] * x[columns[k]])  and its direction.
  void set_objective(std::span<const int> columns, std::span<const double> values,
                     bool maximise) {
    expects(columns.size() == values.size(), "set_objective: columns and values differ");
    std::vector<int> ones_based(columns.size());
    for (std::size_t k = 0; k < columns.size(); ++k) {
      check_column(columns[k]);
      ones_based[k] = columns[k] + 1;
    }
    check_lp_solve(set_obj_fnex(lp_, static_cast<int>(columns.size()),
                                const_cast<double*>(values.data()), ones_based.data()) != 0,
                   "set_obj_fnex");
    if (maximise) {
      set_maxim(lp_);
    } else {
      set_minim(lp_);
    }
  }

  /// Wall-clock limit in whole seconds (lp_solve's granularity); 0 = none.
  void set_time_limit_seconds(long seconds) { set_timeout(lp_, seconds); }

  /// Stops branch-and-bound as soon as a solution at least this good is found
  /// (used with a proven lower bound: reaching it proves optimality).
  void set_break_at(double objective) { set_break_at_value(lp_, objective); }

  /// Solves; maps every status to an outcome or a memo::error.
  lp_outcome solve(std::source_location where = std::source_location::current()) {
    set_add_rowmode(lp_, 0);
    const int status = ::solve(lp_);
    switch (status) {
      case OPTIMAL:
      case PRESOLVED: return lp_outcome::optimal;
      case SUBOPTIMAL: return lp_outcome::feasible;  // break-at-first / break-at-value
      case INFEASIBLE: return lp_outcome::infeasible;
      case UNBOUNDED: return lp_outcome::unbounded;
      case TIMEOUT:
      case USERABORT: return has_incumbent() ? lp_outcome::feasible : lp_outcome::timed_out;
      default:
        throw error(std::string("lp_solve failed with ") + lp_status_name(status), "lp_solve",
                    status, where);
    }
  }

  /// The objective of the solution `solution()` returns (after a MIP search,
  /// not the search's bound).
  [[nodiscard]] double objective() const { return get_objective(lp_); }
  [[nodiscard]] std::vector<double> solution() const {
    std::vector<double> values(static_cast<std::size_t>(columns_));
    check_lp_solve(get_variables(lp_, values.data()) != 0, "get_variables");
    return values;
  }

  /// The raw handle, for lp_solve calls this wrapper does not cover.
  [[nodiscard]] lprec* native() noexcept { return lp_; }

 private:
  void check_column(int column) const {
    expects(column >= 0 && column < columns_, [&] {
      return "LP column " + std::to_string(column) + " outside [0, " + std::to_string(columns_) +
             ")";
    });
  }
  [[nodiscard]] bool has_incumbent() const {
    const double value = get_working_objective(lp_);
    return std::isfinite(value) && std::fabs(value) < 1e29;
  }

  lprec* lp_ = nullptr;
  int columns_ = 0;
};

}  // namespace memo
