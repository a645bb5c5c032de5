#include "memo/core/input_file.hpp"

#include <doctest/doctest.h>

#ifndef _WIN32
#include <sys/stat.h>
#include <unistd.h>
#endif

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

TEST_CASE("input_file: a regular file passes, a directory, a FIFO, a device and a missing path are named") {
  const auto dir = std::filesystem::temp_directory_path() / "memo_input_file_test";
  std::filesystem::create_directories(dir);
  const auto file = dir / "plain.txt";
  std::ofstream(file) << "x = 1\n";
  CHECK(memo::inspect_input_file(file).ok());
  CHECK(memo::inspect_input_file(file).problem.empty());
  CHECK_NOTHROW(memo::require_regular_file(file, "profile"));

  CHECK(memo::inspect_input_file(dir).problem == "is a directory");
  CHECK(memo::inspect_input_file(dir).what == memo::input_file_status::kind::directory);
  CHECK(memo::inspect_input_file(dir / "missing").problem == "does not exist");
  CHECK(memo::inspect_input_file(dir / "missing").what == memo::input_file_status::kind::missing);
  const std::string missing = "trace '" + (dir / "missing").string() + "' does not exist";
  CHECK_THROWS_WITH(memo::require_regular_file(dir / "missing", "trace"), doctest::Contains(missing.c_str()));

#ifndef _WIN32
  // A FIFO with no writer: opening it would block; stat() does not.
  const auto fifo = dir / "pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(memo::inspect_input_file(fifo).problem == "is a FIFO (named pipe)");
  CHECK(memo::inspect_input_file(fifo).what == memo::input_file_status::kind::not_regular);
  const std::string named = "profile '" + fifo.string() + "' is a FIFO (named pipe), not a regular file";
  CHECK_THROWS_WITH(memo::require_regular_file(fifo, "profile"), doctest::Contains(named.c_str()));
  // A symbolic link is followed: to a file it passes, to the FIFO it does not.
  std::filesystem::create_symlink(file, dir / "to_file");
  std::filesystem::create_symlink(fifo, dir / "to_fifo");
  CHECK(memo::inspect_input_file(dir / "to_file").ok());
  CHECK(memo::inspect_input_file(dir / "to_fifo").problem == "is a FIFO (named pipe)");
  if (std::filesystem::exists("/dev/null")) CHECK(memo::inspect_input_file("/dev/null").problem == "is a character device");
#endif
  std::filesystem::remove_all(dir);
}
