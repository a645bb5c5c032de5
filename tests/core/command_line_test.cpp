#include "memo/core/command_line.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

/// argv for `args` (the program's name first).
struct argv_of {
  std::vector<std::string> words;
  std::vector<char*> pointers;
  explicit argv_of(std::vector<std::string> args) : words(std::move(args)) {
    words.insert(words.begin(), "prog");
    for (auto& w : words) pointers.push_back(w.data());
  }
  [[nodiscard]] int argc() const { return static_cast<int>(pointers.size()); }
  char** argv() { return pointers.data(); }
};

/// The usage error `read` throws on `args`, or "(none)".
template <class Read>
std::string usage_error_of(std::vector<std::string> args, Read read) {
  argv_of a(std::move(args));
  memo::command_arguments arguments(a.argc(), a.argv());
  try {
    read(arguments);
  } catch (const memo::usage_error& e) {
    return e.message();
  }
  return "(none)";
}

/// What `run_command` returns for `body` and what it wrote to stderr.
template <class Body>
std::pair<int, std::string> run_captured(Body body) {
  std::fflush(stderr);
  std::FILE* capture = std::tmpfile();
  REQUIRE(capture != nullptr);
  const int saved = dup(fileno(stderr));
  REQUIRE(dup2(fileno(capture), fileno(stderr)) >= 0);
  const int status = memo::run_command("tool", "usage: tool [--n N]\n", body);
  std::fflush(stderr);
  REQUIRE(dup2(saved, fileno(stderr)) >= 0);
  close(saved);
  std::rewind(capture);
  std::string text;
  for (int c = std::fgetc(capture); c != EOF; c = std::fgetc(capture)) text += static_cast<char>(c);
  std::fclose(capture);
  return {status, text};
}

}  // namespace

TEST_CASE("command_arguments: options and their values, in order") {
  argv_of a({"--json", "--n", "12", "--x", "0.5", "file"});
  memo::command_arguments args(a.argc(), a.argv());
  CHECK(args.next() == "--json");
  CHECK(args.next() == "--n");
  CHECK(args.integer<int>(1, 100) == 12);
  CHECK(args.next() == "--x");
  CHECK(args.number(0.0, 1.0) == 0.5);
  CHECK(args.next() == "file");
  CHECK(args.done());
  CHECK_THROWS_AS(args.next(), memo::error);
}

TEST_CASE("command_arguments: a bad value names the option, the value and the bound") {
  auto integer = [](memo::command_arguments& a) {
    (void)a.next();
    (void)a.integer<std::int32_t>(1, 2147483647);
  };
  CHECK(usage_error_of({"--layers", "4294967297"}, integer) == "--layers '4294967297' is not an integer in [1, 2147483647]");
  CHECK(usage_error_of({"--layers", "0"}, integer) == "--layers '0' is not an integer in [1, 2147483647]");
  CHECK(usage_error_of({"--layers", "3x"}, integer) == "--layers '3x' is not an integer in [1, 2147483647]");
  CHECK(usage_error_of({"--layers"}, integer) == "--layers needs a value");
  // What a user typed is quoted safely: control and non-ASCII bytes escaped.
  CHECK(usage_error_of({"--layers", "1\n\x01\xff"}, integer) ==
        "--layers '1\\x0a\\x01\\xff' is not an integer in [1, 2147483647]");
  auto number = [](memo::command_arguments& a) {
    (void)a.next();
    (void)a.number(0.0, 1.0);
  };
  CHECK(usage_error_of({"--x", "1.5"}, number) == "--x '1.5' is not a number in [0, 1]");
  CHECK(usage_error_of({"--x", "nan"}, number).find("--x") == 0);
  CHECK(usage_error_of({"--x", "1e999"}, number).find("--x") == 0);
  CHECK(usage_error_of({"--x", "0.25"}, number) == "(none)");
  auto unknown = [](memo::command_arguments& a) {
    (void)a.next();
    a.unknown();
  };
  CHECK(usage_error_of({"--bogus"}, unknown) == "unknown argument '--bogus'");
  CHECK(usage_error_of({"--json", "--quick"}, [](memo::command_arguments& a) { (void)a.only("--json"); }) ==
        "unknown argument '--quick'");
  CHECK(usage_error_of({"extra"}, [](memo::command_arguments& a) { a.none(); }) == "unknown argument 'extra'");
  CHECK(usage_error_of({}, [](memo::command_arguments& a) { a.none(); }) == "(none)");
  argv_of json({"--json", "--json"});
  CHECK(memo::command_arguments(json.argc(), json.argv()).only("--json"));
  argv_of empty({});
  CHECK_FALSE(memo::command_arguments(empty.argc(), empty.argv()).only("--json"));
}

TEST_CASE("run_command: one exit status per outcome, and the reason on stderr") {
  CHECK(run_captured([] { return 0; }) == std::pair<int, std::string>{0, ""});
  CHECK(run_captured([] { return 3; }).first == 3);
  const auto usage = run_captured([]() -> int { throw memo::usage_error("--n '0' is not an integer in [1, 9]"); });
  CHECK(usage.first == 2);
  CHECK(usage.second == "tool: --n '0' is not an integer in [1, 9]\nusage: tool [--n N]\n");
  const auto failed = run_captured([]() -> int { throw memo::error("the file is gone"); });
  CHECK(failed.first == 1);
  CHECK(failed.second == "tool: error: the file is gone\n");  // the message, not where memo raised it
  const auto other = run_captured([]() -> int { throw std::runtime_error("out of threads"); });
  CHECK(other == std::pair<int, std::string>{1, "tool: error: out of threads\n"});
  // --help where the program does not read it: the usage on stdout, status 0.
  argv_of help({"--help"});
  const auto asked = run_captured([&] {
    memo::command_arguments(help.argc(), help.argv()).none();
    return 1;
  });
  CHECK(asked == std::pair<int, std::string>{0, ""});
  const auto odd = run_captured([]() -> int { throw 42; });
  CHECK(odd == std::pair<int, std::string>{1, "tool: error: an exception that is not a std::exception\n"});
}

TEST_CASE("shape_options: integer fields in any order, applied over a base chosen afterwards") {
  struct shape {
    int layers = 6, tokens = 2048;
  };
  auto parse = [](std::vector<std::string> words, bool& quick) {
    argv_of a(std::move(words));
    memo::command_arguments args(a.argc(), a.argv());
    memo::shape_options<shape> sizes({{"--layers", &shape::layers}, {"--tokens", &shape::tokens}}, 1, 100000);
    while (!args.done()) {
      const std::string_view arg = args.next();
      if (arg == "--quick") {
        quick = true;
      } else if (!sizes.read(args, arg)) {
        args.unknown();
      }
    }
    return sizes.applied(quick ? shape{4, 128} : shape{});
  };
  for (const auto& words : {std::vector<std::string>{"--layers", "9", "--quick"},
                            std::vector<std::string>{"--quick", "--layers", "9"}}) {
    bool quick = false;
    const shape s = parse(words, quick);
    CHECK(quick);
    CHECK(s.layers == 9);
    CHECK(s.tokens == 128);  // quick's, not the default's
  }
  bool quick = false;
  const shape twice = parse({"--tokens", "5", "--tokens", "7"}, quick);
  CHECK(twice.tokens == 7);
  CHECK(twice.layers == 6);
  CHECK(usage_error_of({"--tokens", "100001"}, [](memo::command_arguments& a) {
          memo::shape_options<shape> sizes({{"--tokens", &shape::tokens}}, 1, 100000);
          (void)sizes.read(a, a.next());
        }) == "--tokens '100001' is not an integer in [1, 100000]");
}

TEST_CASE("run_command: a report written into a pipe nobody reads is an error, not a silent SIGPIPE") {
  int ends[2];
  REQUIRE(pipe(ends) == 0);
  close(ends[0]);  // the reader is gone
  std::fflush(stdout);
  const int saved = dup(fileno(stdout));
  REQUIRE(dup2(ends[1], fileno(stdout)) >= 0);
  close(ends[1]);
  const auto outcome = run_captured([] {
    std::printf("a report\n");
    return 0;
  });
  std::clearerr(stdout);
  std::cout.clear();  // the failed flush marked both streams
  REQUIRE(dup2(saved, fileno(stdout)) >= 0);
  close(saved);
  CHECK(outcome == std::pair<int, std::string>{1, "tool: error: writing the report to standard output failed\n"});
}
