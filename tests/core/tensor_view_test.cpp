#include "memo/core/tensor_view.hpp"

#include <doctest/doctest.h>

#include <numeric>
#include <vector>

TEST_CASE("tensor_view: contiguous row-major indexing matches manual offsets") {
  std::vector<float> data(2 * 3 * 4);
  std::iota(data.begin(), data.end(), 0.0f);
  auto view = memo::tensor_view<float, 3>::contiguous(data.data(), {2, 3, 4});  // [batch, seq, dim]
  CHECK(view.size() == 24);
  CHECK(view.size_bytes() == 24 * sizeof(float));
  CHECK(view.stride(0) == 12);
  CHECK(view.stride(1) == 4);
  CHECK(view.stride(2) == 1);
  CHECK(view.is_contiguous());
  for (int b = 0; b < 2; ++b)
    for (int s = 0; s < 3; ++s)
      for (int d = 0; d < 4; ++d) CHECK(view(b, s, d) == static_cast<float>(b * 12 + s * 4 + d));
}

TEST_CASE("tensor_view: a token slice addresses the same elements") {
  std::vector<int> data(10 * 8);
  std::iota(data.begin(), data.end(), 0);
  auto tokens = memo::tensor_view<int, 2>::contiguous(data.data(), {10, 8});  // [tokens, hidden]
  auto middle = tokens.slice(3, 4);
  CHECK(middle.extent(0) == 4);
  CHECK(middle.extent(1) == 8);
  for (int t = 0; t < 4; ++t)
    for (int h = 0; h < 8; ++h) CHECK(middle(t, h) == tokens(t + 3, h));
}

TEST_CASE("tensor_view: a transposed view is not contiguous and reads transposed") {
  std::vector<int> data = {1, 2, 3, 4, 5, 6};
  memo::tensor_view<int, 2> t(data.data(), {3, 2}, {1, 3});  // transpose of [2, 3]
  CHECK_FALSE(t.is_contiguous());
  CHECK(t(0, 1) == 4);
  CHECK(t(2, 0) == 3);
}

TEST_CASE("tensor_view: expect_shape names both shapes") {
  std::vector<float> data(6);
  auto view = memo::tensor_view<float, 2>::contiguous(data.data(), {2, 3});
  CHECK_NOTHROW(view.expect_shape({2, 3}));
  CHECK_THROWS_WITH_AS(view.expect_shape({3, 2}, "q"),
                       doctest::Contains("q has shape [2, 3], expected [3, 2]"), memo::error);
  memo::tensor_view<const float, 2> read_only = view;
  CHECK(read_only.data() == data.data());
}
