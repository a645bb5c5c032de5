// expect: T must be trivially copyable
// A planned arena holds raw device bytes: a view's element type must be trivially copyable.
#include <string>

#include "memo/backend/memory_resource.hpp"
#include "memo/plan/planned_arena.hpp"

int main() {
  memo::host_memory_resource device("device");
  const auto trace = memo::parse_trace("malloc 0 64\nfree 0 64\n");
  memo::planned_arena arena(device, trace, memo::dsa_plan{{0}, 64});
  (void)arena.view<std::string>(0, {2});
}
