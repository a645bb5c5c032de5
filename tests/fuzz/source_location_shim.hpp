// Force-included into the fuzz targets only. clang 14 (the clang with
// libFuzzer here) lacks the builtin that libstdc++ 12's std::source_location
// needs, so <source_location> declares nothing under it. This fills the gap
// with clang's older builtins, for this one build; the library itself is
// compiled by g++ with the real std::source_location.
#pragma once
#include <cstdint>
#include <source_location>

#ifndef __cpp_lib_source_location
namespace std {
struct source_location {
  static constexpr source_location current(const char* file = __builtin_FILE(),
                                           const char* function = __builtin_FUNCTION(),
                                           std::uint_least32_t line = __builtin_LINE()) noexcept {
    source_location where;
    where.file_ = file;
    where.function_ = function;
    where.line_ = line;
    return where;
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }
  constexpr std::uint_least32_t line() const noexcept { return line_; }
  constexpr std::uint_least32_t column() const noexcept { return 0; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  std::uint_least32_t line_ = 0;
};
}  // namespace std
#endif
