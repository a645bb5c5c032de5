// expect: satisfaction of .*Communicator<C>
// A template constrained on memo::Communicator rejects a type that is not
// one (here a backend), and the diagnostic names the concept.
#include "memo/backend/communicator.hpp"
#include "memo/backend/host_backend.hpp"

template <memo::Communicator C>
void run_with(C&) {}

int main() {
  memo::host_backend backend;
  run_with(backend);
}
