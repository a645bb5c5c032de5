#include <memo/memo.hpp>

#include <cstdio>

int main() {
  memo::dsa_problem problem;
  problem.buffers = {{1, 100, 0, 2}, {2, 50, 1, 3}};
  const memo::dsa_plan plan{{0, 100}, 150};
  if (!memo::validate(problem, plan)) return 1;
  std::printf("memo %s from conan: lower bound %llu bytes\n", MEMO_VERSION_STRING,
              static_cast<unsigned long long>(memo::lower_bound_bytes(problem)));
  return 0;
}
