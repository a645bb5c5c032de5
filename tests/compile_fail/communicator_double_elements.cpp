// expect: communicator_element
// Communicators move float and int32 elements only; a double buffer is
// rejected where the call is written, naming the constraint.
#include <span>
#include <vector>

#include "memo/backend/self_communicator.hpp"

int main() {
  memo::host_backend backend;
  memo::self_communicator comm;
  auto stream = backend.make_stream("s");
  std::vector<double> data(4);
  comm.all_reduce(backend, stream, std::span<const double>(data), std::span<double>(data));
}
