// expect: satisfaction of .*Backend<B>
// A template constrained on memo::Backend rejects a type that is not one,
// and the diagnostic names the concept.
#include "memo/backend/concepts.hpp"

template <memo::Backend B>
void run_on(B&) {}

struct my_gpu {};

int main() {
  my_gpu gpu;
  run_on(gpu);
}
