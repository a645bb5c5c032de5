#include "memo/model/gpt2_config.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "io_test_support.hpp"

namespace {

using memo::gpt2_tensor;
using memo_test::contains;
using memo_test::error_of;

// L=2, C=8, NH=2, V=10, Vp=16, maxT=12.
memo::gpt2_config tiny() { return {12, 10, 16, 2, 2, 8}; }

}  // namespace

TEST_CASE("gpt2_config: parameter offsets of a tiny model match a hand-computed table") {
  // Worked by hand from the shapes, C = 8, L = 2, Vp = 16, maxT = 12:
  //   name      shape          count            offset
  //   wte       [16, 8]        128              0
  //   wpe       [12, 8]         96            128
  //   ln1w      [2, 8]          16            224
  //   ln1b      [2, 8]          16            240
  //   qkvw      [2, 24, 8]     384            256
  //   qkvb      [2, 24]         48            640
  //   attprojw  [2, 8, 8]      128            688
  //   attprojb  [2, 8]          16            816
  //   ln2w      [2, 8]          16            832
  //   ln2b      [2, 8]          16            848
  //   fcw       [2, 32, 8]     512            864
  //   fcb       [2, 32]         64           1376
  //   fcprojw   [2, 8, 32]     512           1440
  //   fcprojb   [2, 8]          16           1952
  //   lnfw      [8]              8           1968
  //   lnfb      [8]              8           1976
  //   total                                  1984
  struct expected_row {
    const char* name;
    std::vector<std::int64_t> shape;
    std::uint64_t count, offset;
  };
  const expected_row expected[] = {
      {"wte", {16, 8}, 128, 0},          {"wpe", {12, 8}, 96, 128},
      {"ln1w", {2, 8}, 16, 224},         {"ln1b", {2, 8}, 16, 240},
      {"qkvw", {2, 24, 8}, 384, 256},    {"qkvb", {2, 24}, 48, 640},
      {"attprojw", {2, 8, 8}, 128, 688}, {"attprojb", {2, 8}, 16, 816},
      {"ln2w", {2, 8}, 16, 832},         {"ln2b", {2, 8}, 16, 848},
      {"fcw", {2, 32, 8}, 512, 864},     {"fcb", {2, 32}, 64, 1376},
      {"fcprojw", {2, 8, 32}, 512, 1440}, {"fcprojb", {2, 8}, 16, 1952},
      {"lnfw", {8}, 8, 1968},            {"lnfb", {8}, 8, 1976},
  };
  const memo::gpt2_parameter_table table = memo::gpt2_parameter_layout(tiny());
  for (std::size_t i = 0; i < memo::gpt2_tensor_count; ++i) {
    CAPTURE(i);
    const auto& t = table.tensors[i];
    CHECK(t.name == expected[i].name);
    REQUIRE(t.rank == expected[i].shape.size());
    for (std::size_t d = 0; d < t.rank; ++d) CHECK(t.shape[d] == expected[i].shape[d]);
    CHECK(t.count == expected[i].count);
    CHECK(t.offset == expected[i].offset);
  }
  CHECK(table.total == 1984);
  CHECK(table.bytes(4) == 1984 * 4);
  CHECK(table[gpt2_tensor::fcw].offset == 864);
}

TEST_CASE("gpt2_config: GPT-2 124M has llm.c's parameter count") {
  // llm.c reports num_parameters: 124475904 for gpt2_124M.bin (Vp = 50304);
  // checked here also against the closed form Vp C + maxT C + L (12 C^2 + 13 C) + 2 C.
  const memo::gpt2_config gpt2{1024, 50257, 50304, 12, 12, 768};
  const std::uint64_t C = 768, L = 12;
  const std::uint64_t closed_form = 50304 * C + 1024 * C + L * (12 * C * C + 13 * C) + 2 * C;
  CHECK(closed_form == 124475904);
  CHECK(memo::gpt2_parameter_layout(gpt2).total == closed_form);
  CHECK(gpt2.head_size() == 64);
}

TEST_CASE("gpt2_config: views address each tensor at its offset with its shape") {
  const auto config = tiny();
  const auto table = memo::gpt2_parameter_layout(config);
  std::vector<float> buffer(table.total, 0.0f);
  const auto v = memo::view_gpt2_parameters(config, std::span<float>(buffer));
  CHECK(v.wte.data() == buffer.data());
  CHECK(v.qkvw.data() == buffer.data() + 256);
  CHECK(v.lnfb.data() == buffer.data() + 1976);
  CHECK(v.qkvw.extents() == std::array<std::int64_t, 3>{2, 24, 8});
  CHECK(v.fcprojw.extents() == std::array<std::int64_t, 3>{2, 8, 32});
  CHECK(v.fcb.extents() == std::array<std::int64_t, 2>{2, 32});
  CHECK(v.lnfw.extents() == std::array<std::int64_t, 1>{8});

  // Element (l, i, j) of a 3-d tensor is at offset + (l * rows + i) * cols + j.
  v.fcprojw(1, 3, 17) = 5.0f;
  CHECK(buffer[1440 + (1 * 8 + 3) * 32 + 17] == 5.0f);
  v.qkvb(1, 23) = 7.0f;
  CHECK(buffer[640 + 1 * 24 + 23] == 7.0f);

  // Writing every element through the views touches each buffer element
  // exactly once: the sixteen views tile the buffer.
  std::vector<int> touched(buffer.size(), 0);
  std::vector<float> tags(buffer.size());
  for (std::size_t i = 0; i < tags.size(); ++i) tags[i] = static_cast<float>(i);
  auto mark = [&](auto view) {
    const float* base = buffer.data();
    for (std::int64_t k = 0; k < view.size(); ++k) ++touched[static_cast<std::size_t>(view.data() - base + k)];
    CHECK(view.is_contiguous());
  };
  mark(v.wte), mark(v.wpe), mark(v.ln1w), mark(v.ln1b), mark(v.qkvw), mark(v.qkvb);
  mark(v.attprojw), mark(v.attprojb), mark(v.ln2w), mark(v.ln2b), mark(v.fcw), mark(v.fcb);
  mark(v.fcprojw), mark(v.fcprojb), mark(v.lnfw), mark(v.lnfb);
  for (std::size_t i = 0; i < touched.size(); ++i) {
    CAPTURE(i);
    CHECK(touched[i] == 1);
  }

  // A read-only buffer gives read-only views.
  const std::vector<float>& constant = buffer;
  const auto cv = memo::view_gpt2_parameters(config, std::span<const float>(constant));
  CHECK(cv.fcprojw(1, 3, 17) == 5.0f);
}

TEST_CASE("gpt2_config: a layer's views are its rows of the per-layer tensors") {
  const auto config = tiny();
  std::vector<float> buffer(memo::gpt2_parameter_layout(config).total);
  const auto v = memo::view_gpt2_parameters(config, std::span<float>(buffer));
  CHECK(v.layers() == 2);
  const auto layer1 = v.layer(1);
  // Layer 1 of qkvw [2, 24, 8] starts 24 * 8 elements into the tensor (offset 256).
  CHECK(layer1.qkvw.data() == buffer.data() + 256 + 24 * 8);
  CHECK(layer1.qkvw.extents() == std::array<std::int64_t, 2>{24, 8});
  CHECK(layer1.fcprojw.extents() == std::array<std::int64_t, 2>{8, 32});
  CHECK(layer1.fcb.extents() == std::array<std::int64_t, 1>{32});
  CHECK(layer1.ln2b.data() == buffer.data() + 848 + 8);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 32; ++j) CHECK(&layer1.fcprojw(i, j) == &v.fcprojw(1, i, j));
  CHECK(v.layer(0).attprojb.data() == buffer.data() + 816);
  CHECK(contains(error_of([&] { (void)v.layer(2); }), "layer 2 does not exist; the model has 2 layers"));
  CHECK(contains(error_of([&] { (void)v.layer(-1); }), "layer -1 does not exist"));
}

TEST_CASE("gpt2_config: a buffer of the wrong size is an error naming both counts") {
  std::vector<float> buffer(1983);
  const auto message = error_of([&] { (void)memo::view_gpt2_parameters(tiny(), std::span<float>(buffer)); });
  CHECK(contains(message, "1984"));
  CHECK(contains(message, "1983"));
}

TEST_CASE("gpt2_config: invalid fields are errors naming the field and value") {
  auto with = [](auto change) {
    memo::gpt2_config c = tiny();
    change(c);
    return error_of([&] { c.validate(); });
  };
  CHECK(error_of([] { tiny().validate(); }).empty());
  CHECK(!tiny().problem().has_value());

  auto m = with([](auto& c) { c.channels = 0; });
  CHECK(contains(m, "channels (C) is 0"));
  m = with([](auto& c) { c.num_layers = -3; });
  CHECK(contains(m, "num_layers (L) is -3"));
  m = with([](auto& c) { c.max_seq_len = 0; });
  CHECK(contains(m, "max_seq_len (maxT) is 0"));
  m = with([](auto& c) { c.padded_vocab_size = 9; });
  CHECK(contains(m, "padded_vocab_size (Vp) 9 is smaller than vocab_size (V) 10"));
  m = with([](auto& c) { c.num_heads = 3; });
  CHECK(contains(m, "channels (C) 8 is not a multiple of num_heads (NH) 3"));
  // Fields each valid but whose products overflow: C^2 L alone is ~2^93.
  m = with([](auto& c) {
    c.channels = 2147483647;
    c.num_heads = 1;
    c.num_layers = 2147483647;
  });
  CHECK(contains(m, "overflows"));
  CHECK(contains(m, "C=2147483647"));
  // The largest legal embedding still fits, and its count is exact.
  memo::gpt2_config wide{1, 1, 2147483647, 1, 1, 1};
  CHECK(memo::gpt2_parameter_layout(wide).total == 2147483647ull + 1 + 12 + 13 + 2);
}

TEST_CASE("gpt2_config: a pipeline stage's layout holds its layers and only the ends it uses") {
  const memo::gpt2_config c{16, 10, 12, 6, 2, 8};  // maxT 16, V 10, Vp 12, L 6, NH 2, C 8
  const std::uint64_t C = 8, per_layer = 12 * C * C + 13 * C;
  using g = memo::gpt2_tensor;
  struct stage {
    bool embedding, head;
    std::uint64_t wte, wpe, lnf;
  };
  for (const stage s : {stage{true, false, 12 * C, 16 * C, 0}, stage{false, false, 0, 0, 0},
                        stage{false, true, 12 * C, 0, C}, stage{true, true, 12 * C, 16 * C, C}}) {
    CAPTURE(s.embedding);
    CAPTURE(s.head);
    const auto t = memo::gpt2_stage_parameter_layout(c, 2, s.embedding, s.head);
    CHECK(t[g::wte].count == s.wte);
    CHECK(t[g::wpe].count == s.wpe);
    CHECK(t[g::lnfw].count == s.lnf);
    CHECK(t[g::lnfb].count == s.lnf);
    CHECK(t[g::qkvw].count == 2 * 3 * C * C);
    CHECK(t.total == 2 * per_layer + s.wte + s.wpe + 2 * s.lnf);
    // Offsets in llm.c's order, back to back.
    std::uint64_t offset = 0;
    for (const auto& info : t.tensors) {
      CHECK(info.offset == offset);
      offset += info.count;
    }
    std::vector<float> buffer(t.total);
    const auto v = memo::view_gpt2_parameters(t, std::span<float>(buffer));
    CHECK(v.layers() == 2);
    CHECK(v.wte.extent(0) == static_cast<std::int64_t>(s.wte / C));
    CHECK(v.layer(1).fcprojb.data() == buffer.data() + t[g::fcprojb].offset + C);
  }
  // Every layer and both ends: the whole model's layout.
  const auto whole = memo::gpt2_stage_parameter_layout(c, 6, true, true);
  const auto model = memo::gpt2_parameter_layout(c);
  CHECK(whole.total == model.total);
  for (std::size_t i = 0; i < memo::gpt2_tensor_count; ++i) CHECK(whole.tensors[i].offset == model.tensors[i].offset);
  CHECK_THROWS_WITH(memo::gpt2_stage_parameter_layout(c, 7, true, true), doctest::Contains("7 layers for a model of 6"));
}
