// Writes a tiny GPT-2 checkpoint and a copy-task token file in llm.c's
// formats into a temporary directory, reads both back, cuts the tokens into
// training windows, and shows what a damaged file reports.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <string>
#include <system_error>
#include <vector>

#include "memo/core/command_line.hpp"
#include "memo/model/builtin_data.hpp"
#include "memo/model/checkpoint.hpp"
#include "memo/model/gpt2_config.hpp"
#include "memo/model/token_data.hpp"

namespace {

namespace fs = std::filesystem;

/// A fresh directory under the system's temporary one, removed with
/// everything in it when this goes out of scope.
class scratch_directory {
 public:
  scratch_directory() {
    const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    path_ = fs::temp_directory_path() / ("memo_model_io_" + std::to_string(stamp));
    fs::create_directories(path_);
  }
  scratch_directory(const scratch_directory&) = delete;
  scratch_directory& operator=(const scratch_directory&) = delete;
  ~scratch_directory() {
    std::error_code ignored;  // nothing to do about a directory that cannot be removed
    fs::remove_all(path_, ignored);
  }
  [[nodiscard]] const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

int example_main(int argc, char** argv) {
  memo::command_arguments(argc, argv).none();
  const scratch_directory scratch;
  const fs::path& dir = scratch.path();
  int status = 0;
  {
    // A model: maxT=64, V=16, Vp=32, L=2, NH=2, C=8.
    const memo::gpt2_config config{64, 16, 32, 2, 2, 8};
    const memo::gpt2_parameter_table table = memo::gpt2_parameter_layout(config);
    std::cout << "parameters: " << table.total << " (" << table.bytes(4) << " bytes)\n";
    for (const memo::gpt2_tensor_info& t : table.tensors) {
      std::cout << "  " << t.name << " offset " << t.offset << " count " << t.count << "\n";
    }

    // Fill the flat buffer through the typed views: layernorm gains 1, the rest small.
    std::vector<float> parameters(table.total, 0.0f);
    const auto p = memo::view_gpt2_parameters(config, std::span<float>(parameters));
    for (std::int64_t l = 0; l < config.num_layers; ++l) {
      for (std::int64_t c = 0; c < config.channels; ++c) p.ln1w(l, c) = p.ln2w(l, c) = 1.0f;
    }
    for (std::int64_t c = 0; c < config.channels; ++c) p.lnfw(c) = 1.0f;
    for (std::int64_t v = 0; v < config.padded_vocab_size; ++v) {
      for (std::int64_t c = 0; c < config.channels; ++c) p.wte(v, c) = 0.01f * static_cast<float>((v * 7 + c) % 5);
    }

    const fs::path checkpoint = dir / "tiny_gpt2.bin";
    memo::write_gpt2_checkpoint(checkpoint, config, parameters);
    const memo::gpt2_checkpoint loaded = memo::read_gpt2_checkpoint(checkpoint, /*context=*/64);
    std::cout << "checkpoint " << fs::file_size(checkpoint) << " bytes, read back "
              << (loaded.config == config && loaded.parameters == parameters ? "identical" : "DIFFERENT")
              << "\n";
    if (loaded.config != config || loaded.parameters != parameters) {
      std::cerr << "model_io_example: the checkpoint read back differs from what was written\n";
      status = 1;
    }

    // Built-in data: 8 copy-task sequences of 64 tokens over ids [0, 16).
    const memo::copy_task task{64, 16, /*seed=*/2024};
    const fs::path data = dir / "copy_train.bin";
    memo::write_token_file(data, memo::copy_task_tokens(task, 8));
    auto loader = memo::token_window_loader::from_file(data, task.context, memo::window_order::shuffled,
                                                       /*seed=*/1, config.vocab_size);
    const memo::position_range predictable = memo::copy_task_predictable_targets(task);
    std::cout << "token file: " << loader.windows_per_epoch() << " windows of " << loader.context()
              << "; targets [" << predictable.begin << ", " << predictable.end
              << ") repeat the token " << task.first_half() << " positions back\n";
    std::vector<std::int32_t> inputs(64), targets(64);
    const std::int64_t start = loader.next(inputs, targets);
    std::cout << "first window starts at token " << start << ": inputs";
    for (int t = 0; t < 8; ++t) std::cout << " " << inputs[static_cast<std::size_t>(t)];
    std::cout << " ..., targets";
    for (int t = 0; t < 8; ++t) std::cout << " " << targets[static_cast<std::size_t>(t)];
    std::cout << " ...\n";

    // A damaged file: cut the checkpoint short and read it again.
    fs::resize_file(checkpoint, fs::file_size(checkpoint) - 100);
    try {
      (void)memo::read_gpt2_checkpoint(checkpoint);
      std::cerr << "model_io_example: a truncated checkpoint was accepted\n";
      status = 1;
    } catch (const memo::error& e) {
      std::cout << "truncated checkpoint: " << e.message() << "\n";
    }
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  return memo::run_command("model_io_example", "usage: model_io_example (no arguments)\n",
                           [&] { return example_main(argc, argv); });
}
