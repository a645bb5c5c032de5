#include "memo/project/sppo.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace mp = memo::project;

namespace {
// 8 layers, h = 64, 4 heads, f = 256, V = 100: a layer is 12 h^2 = 49152 parameters.
const mp::model_shape small{"small", 8, 64, 4, 100};

mp::cluster node(int gpus, double link = 1e15, double host = 1e15) {
  return {{"t", 1e12, 0.5, 0.25, link, 1e11, 1e10, 1e15, host, 4}, gpus, 4};
}
}  // namespace

TEST_CASE("sppo: the subsequence counts keep s/N in [2K, 16K] and N >= PP") {
  for (double s : {65536.0, 1048576.0, 4194304.0}) {
    for (int pp : {1, 4, 16}) {
      for (int n : mp::detail::sppo_subsequence_counts(s, pp)) {
        CHECK(n >= pp);
        CHECK(s / n <= 16384);
        CHECK(s / n >= 2048);
      }
    }
  }
  const auto counts = mp::detail::sppo_subsequence_counts(1048576, 4);
  CHECK(counts == std::vector<int>{64, 128, 256});
  CHECK(mp::detail::sppo_subsequence_counts(4096, 4).empty());  // 4 subsequences of 1K: too short
}

TEST_CASE("sppo: settings obey section 6.1's restrictions") {
  const auto all = mp::detail::sppo_settings(mp::strategy::sppo, small, node(16), 131072);
  REQUIRE_FALSE(all.empty());
  for (const auto& r : all) {
    CHECK(4 % r.chosen.sp == 0);                       // SP inside a node
    CHECK(r.chosen.sp * r.chosen.pp == 16);            // every GPU, no data parallelism
    CHECK(8 % r.chosen.pp == 0);                       // whole layers per stage
    CHECK(r.chosen.subsequences >= r.chosen.pp);
    CHECK(static_cast<int>(r.chosen.alpha_i.size()) == r.chosen.subsequences);
  }
  // Not whole nodes (6 GPUs, 4 a node): copies of pipelines up to a node,
  // as many as the GPUs hold (4 GPUs: one; 2: three; 1: six), as many as
  // 1, 2, 4, ... copies to a node give (2 GPUs: one to a node, 2; 1 GPU,
  // the partial node holding 2: one to a node 2, two 4), or one with the
  // rest idle.
  const auto copies = mp::detail::sppo_settings(mp::strategy::sppo, small, node(6), 131072);
  REQUIRE_FALSE(copies.empty());
  std::map<int, std::set<int>> counts;  // GPUs of a copy -> the DP tried
  for (const auto& r : copies) {
    const int gpus = r.chosen.sp * r.chosen.pp;
    CAPTURE(gpus);
    REQUIRE((gpus == 1 || gpus == 2 || gpus == 4));  // PP divides 8 layers, SP 4 heads
    counts[gpus].insert(r.chosen.dp);
    CHECK(8 % r.chosen.pp == 0);
  }
  CHECK(counts[4] == std::set<int>{1});
  CHECK(counts[2] == std::set<int>{1, 2, 3});
  CHECK(counts[1] == std::set<int>{1, 2, 4, 6});
  // A pinned DP: any count the GPUs hold, none beyond.
  mp::settings_pin three;
  three.sp = 1, three.pp = 2, three.dp = 3;
  const auto pinned = mp::detail::sppo_settings(mp::strategy::sppo, small, node(6), 131072, true, nullptr, three);
  REQUIRE_FALSE(pinned.empty());
  for (const auto& r : pinned) CHECK(r.chosen.dp == 3);
  three.dp = 4;
  std::string why;
  CHECK(mp::detail::sppo_settings(mp::strategy::sppo, small, node(6), 131072, true, &why, three).empty());
  CHECK_MESSAGE(why.find("DP at most as many as the GPUs hold") != std::string::npos, why);
}

TEST_CASE("sppo: copies spread over the nodes, and a node's copies share its host memory") {
  // 10 GPUs of 4 a node: 2 whole nodes and a partial one of 2. Copies of
  // one GPU: a whole node holds 4, the partial 2; spread as evenly as they
  // fit, 3 copies take one a node, 6 two, 8 three on the whole nodes (the
  // partial keeps 2), 10 all.
  const mp::cluster ten = node(10);
  const mp::detail::sppo_copy_placement one_gpu(ten, 1);
  CHECK(one_gpu.copies(1) == 3);
  CHECK(one_gpu.copies(2) == 6);
  CHECK(one_gpu.copies(4) == 10);
  const int expected_per_node[] = {0, 1, 1, 1, 2, 2, 2, 3, 3, 4, 4};  // 1..10 copies
  for (int replicas = 1; replicas <= 10; ++replicas) {
    CAPTURE(replicas);
    CHECK(one_gpu.per_node(replicas) == expected_per_node[replicas]);
  }
  CHECK(mp::detail::sppo_copy_counts(ten, 1) == std::vector<int>{10, 6, 3, 1});
  CHECK(mp::detail::sppo_copy_counts(ten, 2) == std::vector<int>{5, 3, 1});
  CHECK(mp::detail::sppo_copy_counts(ten, 4) == std::vector<int>{2, 1});
  CHECK(mp::detail::sppo_copy_counts(ten, 8) == std::vector<int>{1});  // on whole nodes
  // The host memory of a node is what its copies offload: with 12 GPUs of
  // 4 a node, three copies of 2 GPUs take one a node and offload what one
  // copy alone does, at three times the tokens; six take two a node and
  // offload twice that.
  const mp::cluster host = node(12, 1e15, 1e15);
  const double inf = std::numeric_limits<double>::infinity();
  auto copies_of = [&](int replicas) {
    return mp::detail::sppo(mp::strategy::sppo, small, host, 65536, 1, 2, 8, inf, {}, replicas);
  };
  const auto alone = copies_of(1), spread = copies_of(3), paired = copies_of(6);
  CHECK(alone.host_per_node > 0);
  CHECK(spread.host_per_node == doctest::Approx(alone.host_per_node));
  CHECK(paired.host_per_node == doctest::Approx(2 * alone.host_per_node));
  CHECK(spread.tokens_per_gpu_per_second == doctest::Approx(3 * alone.tokens_per_gpu_per_second));
}

TEST_CASE("sppo: one stage's step is its work, by hand from the FLOPs") {
  // PP = 1 (SP 4 on one node): no bubble and no hand-off; forward and
  // backward of every subsequence run back to back on the stage.
  const double s = 65536;
  const int n = 8;
  const auto r = mp::detail::sppo(mp::strategy::sppo, small, node(4), s, 4, 1, n);
  const double h = 64, layers = 8, P_layer = 49152;
  // Over all subsequences the causal pairs sum to s (s + 1) / 2.
  const double gemm = layers * 2 * P_layer * s / 4 / (1e12 * 0.5);
  const double attention = layers * 4 * h * (s * (s + 1) / 2) / 4 / (1e12 * 0.25);
  const double comm = layers * 4 * 0.75 * s * h * 2 / 1e11;  // four collectives of [s_j, h], 3/4 crossing
  const double overhead = 2 * n * layers * mp::sppo_layer_overhead;
  const double classifier = 3 * 2 * s * h * 100 / 4 / (1e12 * 0.5);
  CHECK(r.time.bubble == doctest::Approx(0).epsilon(1e-9));
  CHECK(r.step_seconds == doctest::Approx(3 * gemm + 3.5 * attention + 2 * comm + overhead + classifier));
  // Megatron-LM on the same pipeline recomputes every forward.
  const auto again = mp::detail::sppo(mp::strategy::sppo_recompute, small, node(4), s, 4, 1, n);
  CHECK(again.time.recompute == doctest::Approx(gemm + attention + comm + overhead / 2));
  CHECK(again.step_seconds > r.step_seconds);
  CHECK(again.hfu > again.mfu);
}

TEST_CASE("sppo: memory with everything offloaded, by hand") {
  // A fast link and a large host: every alpha_i is 1 and a subsequence's
  // other activations leave while the next one computes, so the device holds
  // the K/V of every subsequence so far plus the subsequence computing
  // (section 5.2's M_i), and the K/V gradients for the backward.
  const double s = 65536;
  const int n = 8, sp = 4;
  const auto r = mp::detail::sppo(mp::strategy::sppo, small, node(4), s, sp, 1, n);
  for (double a : r.chosen.alpha_i) CHECK(a == doctest::Approx(1.0));
  const double layers = 8, h = 64;
  const double kv_per_token = 2 * h * 2 / sp;                     // K and V, bf16, split over SP
  const double other_per_token = (32 * h + 8 + 8 + 4 * 4) / sp - kv_per_token;  // core's skeletal table
  const auto part = memo::flops_balanced_partition(65536, n, {static_cast<std::uint64_t>(49152 / (2 * 64)), 1});
  double worst = 0, kv = 0;
  for (std::size_t j = 0; j < part.count(); ++j) {
    kv += kv_per_token * static_cast<double>(part.tokens(j));
    worst = std::max(worst, other_per_token * static_cast<double>(part.tokens(j)) + kv);
  }
  CHECK(r.device.skeletal == doctest::Approx(layers * worst + layers * kv_per_token * s));
  // Host: every subsequence's other activations, 4 GPUs.
  CHECK(r.host_per_node == doctest::Approx(4 * layers * other_per_token * s));
  // A host of nothing: alpha_i = 0, everything stays on the device.
  const auto kept = mp::detail::sppo(mp::strategy::sppo, small, node(4, 1e15, 1), s, sp, 1, n);
  for (double a : kept.chosen.alpha_i) CHECK(a == doctest::Approx(0.0));
  CHECK(kept.device.skeletal == doctest::Approx(layers * (other_per_token + 2 * kv_per_token) * s));
}

TEST_CASE("sppo: a setting whose states and K/V overflow the device is reported without simulating") {
  mp::cluster c = node(4);
  c.profile.device_memory_bytes = 1e6;
  const auto r = mp::detail::sppo(mp::strategy::sppo, small, c, 1 << 20, 4, 1, 64);
  CHECK(r.limit == mp::resource::device_memory);
  CHECK(r.step_seconds > 0);
}

TEST_CASE("sppo: a setting that does not fit is timed by the closed form, not simulated") {
  // Two stages of SP 4 over 64 subsequences of 1M tokens, Megatron-LM on
  // the pipeline (no multiplexing): simulated while it fits, section 3.3's
  // closed form T = (PP - 1 + N) / N x the work once it does not (the
  // memory does not depend on the schedule).
  const double s = 1 << 20;
  const int n = 64;
  const double classifier = 3 * 2 * s * 64 * 100 / 4 / (1e12 * 0.5);
  auto pipeline = [&](const mp::projection& r) {
    const double work = r.time.compute - classifier + r.time.communication + r.time.recompute;
    return (2 - 1 + n) / double(n) * work;
  };
  mp::cluster c = node(8, 1e15, 1);
  c.profile.inter_node_bytes_per_second = 1e6;  // the stages' hand-offs cross a slow network
  const auto simulated = mp::detail::sppo(mp::strategy::sppo_recompute, small, c, s, 4, 2, n);
  REQUIRE(simulated.fits());
  // The simulator times the hand-offs, the closed form does not, so the
  // check below can tell the two apart.
  CHECK(std::abs(simulated.step_seconds - classifier - pipeline(simulated)) > 1e-3 * simulated.step_seconds);
  // States and K/V fit the device (the setting is not hopeless), the rest does not.
  c.profile.device_memory_bytes = simulated.device.total() - 1;
  const auto r = mp::detail::sppo(mp::strategy::sppo_recompute, small, c, s, 4, 2, n);
  REQUIRE(r.limit == mp::resource::device_memory);
  CHECK(r.device.skeletal == doctest::Approx(simulated.device.skeletal));
  CHECK(r.step_seconds - classifier == doctest::Approx(pipeline(r)));
}

TEST_CASE("sppo: when no setting applies, the reason says which rule and where") {
  std::string why;
  // 1K tokens: no N of 2K-16K tokens, on any pipeline; 6 GPUs are not whole nodes either.
  CHECK(mp::detail::sppo_settings(mp::strategy::sppo, small, node(6), 1024, true, &why).empty());
  CHECK(why.find("one pipeline over every GPU needs whole nodes (6 GPUs are not a multiple of 4) (every SP)") !=
        std::string::npos);
  CHECK(why.find("no subsequence count N with 2048 to 16384 tokens each") != std::string::npos);
  // 12 GPUs: SP 4 leaves PP 3, which does not divide 8 layers (so copies of
  // smaller pipelines run instead, but not at 1K tokens).
  CHECK(mp::detail::sppo_settings(mp::strategy::sppo, small, node(12), 1024, true, &why).empty());
  CHECK(why.find("PP must divide the layers (8) (SP 4 PP 3)") != std::string::npos);
  // 16 GPUs at 4K tokens: no N of 2K-16K tokens reaches N >= PP (one
  // pipeline over every GPU exists, so no copies of a shallower one run).
  CHECK(mp::detail::sppo_settings(mp::strategy::sppo, small, node(16), 4096, true, &why).empty());
  CHECK(why.find("no subsequence count N with 2048 to 16384 tokens each") != std::string::npos);
  CHECK(why.find("copies") == std::string::npos);
}

TEST_CASE("sppo: a setting that cannot fit before the schedule still reports its host memory") {
  // 7B on 8 GPUs at 512K as SP 1 x PP 8, N 128: 18 B x (4 layers + the
  // classifier) plus K/V and their gradients (2 x 4 x 16384 B x 512K) exceed
  // 80 GiB, the path that skips the simulation. With a link that hides any
  // offload and ample host memory, every subsequence offloads all but K/V:
  // 131216 - 16384 = 114832 B per token and layer, 4 layers, 512K tokens,
  // 8 GPUs per node: 1926561267712 bytes (1794.25 GiB).
  mp::cluster c{mp::load_cluster_profile("a800"), 8, 8};
  c.profile.host_link_bytes_per_second = 1e15;
  c.profile.host_memory_bytes = 4.0 * 1099511627776.0;
  const auto r = mp::detail::sppo(mp::strategy::sppo, mp::parse_model_shape("7b"), c, 512 * 1024, 1, 8, 128);
  CHECK_FALSE(r.fits());
  CHECK(r.limit == mp::resource::device_memory);
  CHECK(r.host_per_node == doctest::Approx(1926561267712.0));
  REQUIRE(r.chosen.alpha_i.size() == 128);
  CHECK(r.chosen.alpha_i.front() == doctest::Approx(1.0));
}

TEST_CASE("sppo: the shorter of the plain and the multiplexed pipeline is kept, and says which") {
  // PP 4 of SP 4 over 8 subsequences: the plain pipeline idles (PP - 1) / N
  // = 3/8 of the work. Over a network that costs nothing, multiplexing
  // fills that bubble; over a slow one each split piece's exchange across
  // nodes costs more than the bubble, and the plain pipeline is kept.
  const double s = 65536;
  const int n = 8;
  auto bubble_share = [&](const mp::projection& r) {
    return r.time.bubble / (r.step_seconds - r.time.bubble);
  };
  mp::cluster fast = node(16);
  fast.profile.inter_node_bytes_per_second = 1e18;
  const auto filled = mp::detail::sppo(mp::strategy::sppo, small, fast, s, 4, 4, n);
  REQUIRE(filled.fits());
  CHECK(filled.chosen.multiplexed);
  CHECK(bubble_share(filled) < 0.5 * 3.0 / n);
  mp::cluster slow = node(16);
  slow.profile.inter_node_bytes_per_second = 1e6;
  const auto kept = mp::detail::sppo(mp::strategy::sppo, small, slow, s, 4, 4, n);
  REQUIRE(kept.fits());
  CHECK_FALSE(kept.chosen.multiplexed);
  // Megatron-LM on the pipeline never multiplexes.
  CHECK_FALSE(mp::detail::sppo(mp::strategy::sppo_recompute, small, fast, s, 4, 4, n).chosen.multiplexed);
  // Each pipeline alone: the shorter is the one kept, on either network.
  const double inf = std::numeric_limits<double>::infinity();
  for (const mp::cluster& c : {fast, slow}) {
    const auto plain =
        mp::detail::sppo(mp::strategy::sppo, small, c, s, 4, 4, n, inf, mp::detail::sppo_pipeline::plain);
    const auto split =
        mp::detail::sppo(mp::strategy::sppo, small, c, s, 4, 4, n, inf, mp::detail::sppo_pipeline::multiplexed);
    CHECK_FALSE(plain.chosen.multiplexed);
    CHECK(split.chosen.multiplexed);
    const auto kept_here = mp::detail::sppo(mp::strategy::sppo, small, c, s, 4, 4, n);
    CHECK(kept_here.step_seconds == doctest::Approx(std::min(plain.step_seconds, split.step_seconds)));
    // Multiplexed, the busiest stage also holds what it computes for the
    // others (split_helper_bytes, worked by hand below), and nothing else
    // changes.
    CHECK(split.device.total() > plain.device.total());
    CHECK(split.device.optimizer == plain.device.optimizer);
    CHECK(split.device.transient == plain.device.transient);
    if (kept_here.chosen.multiplexed) CHECK(kept_here.device.total() == doctest::Approx(split.device.total()));
    if (!kept_here.chosen.multiplexed) CHECK(kept_here.device.total() == doctest::Approx(plain.device.total()));
  }
  // The plain pipeline idles 3/8 of the work; over the fast network the
  // split pieces cost nothing more, so the step is 1 + 3/8 against
  // about 1 (the model's other times are the same for both).
  const auto plain_fast =
      mp::detail::sppo(mp::strategy::sppo, small, fast, s, 4, 4, n, inf, mp::detail::sppo_pipeline::plain);
  CHECK(plain_fast.step_seconds / filled.step_seconds > 1.2);
  CHECK(plain_fast.step_seconds / filled.step_seconds < 1.0 + 3.0 / n + 1e-9);
}

TEST_CASE("sppo: a schedule too large to simulate is timed as the plain pipeline with its hand-offs") {
  // PP 8 (one layer each) over 12288 subsequences: 2 N PP forwards and
  // backwards and 2 N (PP - 1) hand-offs, 368640 operations, beyond
  // sppo_max_simulated_ops. The closed form alone leaves out the first
  // forward's and the last backward's hand-offs through the stages.
  const int n = 12288;
  memo::sppo_schedule_options plain;
  plain.stages = 8;
  plain.forward_seconds.assign(n, 1.0);
  plain.backward_seconds.assign(n, 2.0);
  plain.p2p_seconds = 1.0;
  REQUIRE(memo::sppo_schedule_ops(plain) > mp::sppo_max_simulated_ops);
  mp::cluster c = node(8);
  c.profile.inter_node_bytes_per_second = 1e6;  // hand-offs that show
  const double s = 1 << 20;
  const auto r = mp::detail::sppo(mp::strategy::sppo, small, c, s, 1, 8, n);
  REQUIRE(r.fits());
  CHECK_FALSE(r.chosen.multiplexed);
  // Asked for the multiplexed pipeline alone, it says it cannot time it.
  CHECK_THROWS_WITH_AS(mp::detail::sppo(mp::strategy::sppo, small, c, s, 1, 8, n,
                                        std::numeric_limits<double>::infinity(),
                                        mp::detail::sppo_pipeline::multiplexed),
                       doctest::Contains("more than the 350000 the simulator is given"), memo::error);
  const double classifier = 3 * 2 * s * 64 * 100 / 1 / (1e12 * 0.5);
  const double work = r.time.compute - classifier + r.time.communication + r.time.recompute;
  const double closed = (8 - 1 + n) / double(n) * work;
  // The longest subsequence's rows cross each of the 7 stage boundaries
  // twice: more than nothing, less than the whole step.
  CHECK(r.step_seconds - classifier > closed * (1 + 1e-9));
  CHECK(r.step_seconds - classifier < 2 * closed);
}

TEST_CASE("sppo: split pieces inside one node pay the node's link, not the network's") {
  // 16 GPUs, 16 per node: SP 4 x PP 4 is one node, so the network's rate
  // cannot matter; over 4-GPU nodes every stage is a node of its own, and
  // the split pieces cross nodes.
  const double s = 65536, inf = std::numeric_limits<double>::infinity();
  auto step = [&](int per_node, double network) {
    mp::cluster c = node(16);
    c.gpus_per_node = per_node;
    c.profile.gpus_per_node = per_node;
    c.profile.intra_node_bytes_per_second = 1e11;
    c.profile.inter_node_bytes_per_second = network;
    return mp::detail::sppo(mp::strategy::sppo, small, c, s, 4, 4, 8, inf, mp::detail::sppo_pipeline::multiplexed);
  };
  CHECK(step(16, 1e6).step_seconds == doctest::Approx(step(16, 1e18).step_seconds).epsilon(1e-12));
  // The same network, stages on nodes of their own: the pieces' exchange
  // crosses it (the stages' own collectives stay inside a node either way).
  CHECK(step(4, 1e6).time.communication > 10 * step(16, 1e6).time.communication);
}

TEST_CASE("sppo: the split pieces' exchange is communication, a layer's fixed cost compute") {
  const double s = 65536, inf = std::numeric_limits<double>::infinity();
  // SP 1: no collective at all, so nothing is communication; the fixed
  // cost per layer and pass is part of compute.
  mp::cluster one = node(4);
  const auto alone =
      mp::detail::sppo(mp::strategy::sppo, small, one, s, 1, 4, 8, inf, mp::detail::sppo_pipeline::plain);
  CHECK(alone.time.communication == 0.0);
  // PP 2 over two 4-GPU nodes (SP 4): Left-SP {0} of stage 0 and Right-SP
  // {N-1} of stage 1 are split over both stages, and each stage takes part
  // in both, forward and backward: 2 x (e_0 + e_{N-1}), with e_j = layers
  // (4) x 4 collectives x (k - 1) / k x s_j / SP x h x 2 bytes over the
  // network, s_j from the FLOPs-balanced partition (a layer's 12 h^2
  // parameters per token against one causal pair: weights {384, 1}).
  mp::cluster two = node(8);
  two.profile.inter_node_bytes_per_second = 1e8;
  const auto plain =
      mp::detail::sppo(mp::strategy::sppo, small, two, s, 4, 2, 8, inf, mp::detail::sppo_pipeline::plain);
  const auto split =
      mp::detail::sppo(mp::strategy::sppo, small, two, s, 4, 2, 8, inf, mp::detail::sppo_pipeline::multiplexed);
  // Each piece also keeps what its stage's own collectives take, (k - 1) / k
  // of which the split adds back: over SP 4 on the node's link (1e11), an
  // all-gather of [s_j, h] receives 3/4 of it, four per layer.
  const double per_token = 2.0 * 0.5 * 4 * 4 * 64 * 2 * (1.0 / 4 / 1e8 + 0.75 / 1e11);  // both passes
  const memo::sequence_partition part = memo::flops_balanced_partition(65536, 8, {384, 1});
  REQUIRE(part.tokens(0) > part.tokens(7));
  // And the hand-over, each piece the first of its phase, (k - 1) / k = 1/2
  // of it through the owner's GPU over the network, both passes: the
  // owner's weights (4 layers x 49152 + the 100 x 64 embedding or
  // classifier, 2 bytes, over SP 4: 101504 bytes), and K/V at 4 layers x
  // 2 x 64 x 2 bytes / SP 4 = 256 bytes a token: of subsequence 0's tokens
  // (back to stage 0) and of the 7 subsequences before subsequence 7 (out
  // from stage 1).
  const double weights = (4 * 49152 + 100 * 64) * 2 / 4.0;
  REQUIRE(weights == 101504);
  const auto before_last = static_cast<double>(part.begin(7));
  const double handover = 2 * 0.5 * (2 * weights + 256 * (static_cast<double>(part.tokens(0)) + before_last)) / 1e8;
  CHECK(split.time.communication - plain.time.communication ==
        doctest::Approx(per_token * static_cast<double>(part.tokens(0) + part.tokens(7)) + handover));
  // Multiplexing fills bubbles: what is left idle is less than the plain
  // pipeline's, the exchange not counted in it.
  CHECK(split.time.bubble < plain.time.bubble);
}

TEST_CASE("sppo: what a split piece hands over, piece by piece (Table 3's PP 4, N 8)") {
  // Weights W = 1000 bytes, K/V 10 bytes a token, subsequence j's tokens
  // 100 + j starting at 1000 j: the owner's GPU moves (k - 1)/k of the
  // weights at the first piece of a phase, of the Left-SP pieces' own K/V,
  // and of the K/V before the Right-SP phase at its first piece.
  auto bytes = [](int j, int owner, int first, int k, int n = 8) {
    return mp::detail::split_piece_handover_bytes({.subsequence = j, .owner = owner, .first = first, .stages = k,
                                                   .subsequences = n, .tokens_before = 1000.0 * j,
                                                   .tokens = 100.0 + j, .kv_bytes = 10, .weight_bytes = 1000});
  };
  // Stage 0, Left-SP {0, 1, 2} over {0..3}.
  CHECK(bytes(0, 0, 0, 4) == doctest::Approx(0.75 * (1000 + 10 * 100)));
  CHECK(bytes(1, 0, 0, 4) == doctest::Approx(0.75 * 10 * 101));
  CHECK(bytes(2, 0, 0, 4) == doctest::Approx(0.75 * 10 * 102));
  // Stage 2, Left-SP {0} over {2, 3}; Right-SP {6, 7} over {0..2}.
  CHECK(bytes(0, 2, 2, 2) == doctest::Approx(0.5 * (1000 + 10 * 100)));
  CHECK(bytes(6, 2, 0, 3) == doctest::Approx(2.0 / 3 * (1000 + 10 * 6000)));
  CHECK(bytes(7, 2, 0, 3) == 0.0);
  // Stage 3, Right-SP {5, 6, 7} over {0..3}: only the first moves anything.
  CHECK(bytes(5, 3, 0, 4) == doctest::Approx(0.75 * (1000 + 10 * 5000)));
  CHECK(bytes(6, 3, 0, 4) == 0.0);
  // PP 4, N 4: subsequence 1 over {0..3} is Left-SP of stage 0 and the
  // first Right-SP piece of stage 3; the stage tells which.
  CHECK(bytes(1, 0, 0, 4, 4) == doctest::Approx(0.75 * 10 * 101));
  CHECK(bytes(1, 3, 0, 4, 4) == doctest::Approx(0.75 * (1000 + 10 * 1000)));
}

TEST_CASE("sppo: what a GPU holds for the split pieces of other stages, by hand") {
  // 1000 parameters a stage, SP 1: a helper over k stages holds 2000 / k
  // bytes of weights and 4000 / k of gradients; per piece token 10 bytes of
  // skeletal activations and 2 of dK/dV, over k; before a Right-SP phase
  // the K/V (2 bytes a token) of every earlier token and their dK/dV, over k.
  const auto stage_parameters = [](int) { return 1000.0; };
  // PP 2, N 2 of 100 tokens: stage 0 helps stage 1's Right-SP {1} over {0, 1}
  // (600 for the piece, 2 x 100 x 2 / 2 = 200 for the history); stage 1
  // helps stage 0's Left-SP {0} (600). Stage 0 holds the most.
  const auto two = mp::detail::split_helper_bytes(memo::equal_length_partition(200, 2), 2, 1, 10, 2, stage_parameters);
  CHECK(two.params == doctest::Approx(1000));
  CHECK(two.grads == doctest::Approx(2000));
  CHECK(two.activations == doctest::Approx(800));
  // PP 3, N 3 of 100 tokens. Stage 0: stage 1's Right-SP {2} over 2 stages
  // (1000 + 2000, 600 + 2 x 200 x 2 / 2) and stage 2's Right-SP {1, 2} over 3
  // (667 + 1333, 2 x 1200 / 3 + 2 x 100 x 2 / 3): 6933. Stage 1: 5733,
  // stage 2: 6400.
  const auto three = mp::detail::split_helper_bytes(memo::equal_length_partition(300, 3), 3, 1, 10, 2, stage_parameters);
  CHECK(three.params == doctest::Approx(1000 + 2000 / 3.0));
  CHECK(three.grads == doctest::Approx(2000 + 4000 / 3.0));
  CHECK(three.activations == doctest::Approx(1000 + 800 + 400 / 3.0));
  CHECK(three.total() == doctest::Approx(6933.333333));
  // Over SP 2 each GPU holds half of it.
  const auto halves = mp::detail::split_helper_bytes(memo::equal_length_partition(300, 3), 3, 2, 5, 1, stage_parameters);
  CHECK(halves.total() == doctest::Approx(6933.333333 / 2));
  // Stage by stage. Stage 1: stage 0's Left-SP {0, 1} over {0, 1, 2}
  // (667 + 1333, 2 x 1200 / 3) and stage 2's Right-SP {1, 2} over all
  // three (the same, plus 2 x 100 x 2 / 3): 5733. Stage 2: stage 0's
  // Left-SP (2000 + 800) and stage 1's Left-SP {0} over {1, 2} (1000 +
  // 2000 + 600): 6400.
  const auto by_stage =
      mp::detail::split_helper_bytes_by_stage(memo::equal_length_partition(300, 3), 3, 1, 10, 2, stage_parameters);
  REQUIRE(by_stage.size() == 3);
  CHECK(by_stage[0].total() == doctest::Approx(6933.333333));
  CHECK(by_stage[1].total() == doctest::Approx(2 * (2000 + 800) + 400 / 3.0));
  CHECK(by_stage[2].activations == doctest::Approx(800 + 600));
  CHECK(by_stage[2].total() == doctest::Approx(6400));
}

TEST_CASE("sppo: a multiplexed pipeline's memory is a stage's own plus what it helps with, where that is the most") {
  // With a 1000-token vocabulary the last stage's loss (6 B x 1000 / SP a
  // token) just exceeds a layer's working set, while stage 0 holds the
  // most for the other stages (the Right-SP phases' K/V history): the sum
  // is the most on stage 0, whose transient is the working set alone.
  // With 100 tokens the loss is below the working set on every stage, and
  // the working set does not depend on the vocabulary.
  const mp::model_shape vocab{"vocab", 8, 256, 4, 1000}, few{"few", 8, 256, 4, 100};
  mp::cluster fast = node(16);
  fast.profile.inter_node_bytes_per_second = 1e18;
  const double inf = std::numeric_limits<double>::infinity();
  auto project = [&](const mp::model_shape& m, mp::detail::sppo_pipeline pipeline) {
    return mp::detail::sppo(mp::strategy::sppo, m, fast, 65536, 4, 4, 32, inf, pipeline);
  };
  const auto plain = project(vocab, mp::detail::sppo_pipeline::plain);
  const auto split = project(vocab, mp::detail::sppo_pipeline::multiplexed);
  const auto working = project(few, mp::detail::sppo_pipeline::plain);
  REQUIRE(split.chosen.multiplexed);
  CHECK(plain.device.transient > working.device.transient);  // the loss, on the last stage
  CHECK(split.device.transient == doctest::Approx(working.device.transient));
  // Stage 0 holds the embedding as the last stage does: the same states,
  // plus the weights and gradients of the stages it helps.
  CHECK(split.device.optimizer == plain.device.optimizer);
  CHECK(split.device.params > plain.device.params);
  CHECK(split.device.grads > plain.device.grads);
  // Never less than the plain pipeline: the last stage also helps.
  CHECK(split.device.total() > plain.device.total());
}
