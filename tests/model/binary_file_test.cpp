#include "memo/model/binary_file.hpp"

#include "memo/core/atomic_file.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <fcntl.h>     // open (POSIX)
#include <sys/stat.h>  // mkfifo (POSIX)
#include <unistd.h>    // read, close (POSIX)

#include "io_test_support.hpp"

namespace {

using memo_test::contains;
using memo_test::error_of;

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> bytes(n);
  for (std::size_t i = 0; i < n; ++i) bytes[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
  return bytes;
}

std::vector<unsigned char> as_uchar(const std::vector<std::byte>& bytes) {
  std::vector<unsigned char> out(bytes.size());
  for (std::size_t i = 0; i < bytes.size(); ++i) out[i] = std::to_integer<unsigned char>(bytes[i]);
  return out;
}

}  // namespace

TEST_CASE("binary_file: headers encode as 256 little-endian int32") {
  memo::llmc_header h{};
  h[0] = 20240326;
  h[1] = -7;
  h[255] = 0x01020304;
  const auto bytes = memo::encode_llmc_header(h);
  std::vector<unsigned char> raw(bytes.size());
  for (std::size_t i = 0; i < bytes.size(); ++i) raw[i] = std::to_integer<unsigned char>(bytes[i]);
  CHECK(raw.size() == 1024);
  CHECK(memo_test::int32_at(raw, 0) == 20240326);
  CHECK(memo_test::int32_at(raw, 4) == -7);
  CHECK(raw[1020] == 0x04);
  CHECK(raw[1023] == 0x01);
  CHECK(memo::decode_llmc_header(bytes) == h);
}

TEST_CASE("binary_file: a committed write replaces the target and leaves no temporary") {
  memo_test::scratch_directory dir;
  const auto path = dir / "data.bin";
  memo_test::write_bytes(path, {1, 2, 3});
  const auto bytes = pattern(5000, 3);
  {
    memo::atomic_file_writer out(path);
    out.write(std::span<const std::byte>(bytes).first(1000));
    // Until the commit the old content is still in place.
    CHECK(memo_test::file_bytes(path) == std::vector<unsigned char>{1, 2, 3});
    out.write(std::span<const std::byte>(bytes).subspan(1000));
    CHECK(out.written_bytes() == 5000);
    out.commit();
  }
  CHECK(memo_test::file_bytes(path) == as_uchar(bytes));
  CHECK(dir.entries() == std::vector<std::string>{"data.bin"});
  {
    memo::atomic_file_writer out(path);
    out.commit();
    // A committed writer is finished: writing again is an error, not a write
    // to a closed file.
    CHECK(contains(error_of([&] { out.write(bytes); }), "write after the file was committed"));
    CHECK(contains(error_of([&] { out.commit(); }), "commit after the file was committed"));
  }
  CHECK(memo_test::file_bytes(path).empty());
  memo::atomic_file_writer again(path);
  again.write(bytes);
  again.commit();
  memo::binary_file_reader in(path);
  CHECK(in.size_bytes() == 5000);
  std::vector<std::byte> back(5000);
  in.read(back, "everything");
  CHECK(back == bytes);
}

TEST_CASE("binary_file: an abandoned write leaves the existing file and no temporary") {
  memo_test::scratch_directory dir;
  const auto path = dir / "good.bin";
  memo_test::write_bytes(path, {9, 8, 7});
  {
    memo::atomic_file_writer out(path);
    out.write(pattern(100, 1));
  }  // destroyed without commit, e.g. by an exception
  CHECK(memo_test::file_bytes(path) == std::vector<unsigned char>{9, 8, 7});
  CHECK(dir.entries() == std::vector<std::string>{"good.bin"});
}

TEST_CASE("binary_file: a write that fails part-way keeps the existing file") {
  memo_test::scratch_directory dir;
  const auto path = dir / "checkpoint.bin";
  const auto old_bytes = pattern(3000, 5);
  {
    memo::atomic_file_writer out(path);
    out.write(old_bytes);
    out.commit();
  }
  std::string message;
  {
    memo_test::file_size_cap cap(4096);
    REQUIRE(cap.ok());
    message = error_of([&] {
      memo::atomic_file_writer out(path);
      const auto big = pattern(1 << 16, 9);
      for (int i = 0; i < 4; ++i) out.write(big);
      out.commit();
    });
  }
  CHECK(contains(message, path.string()));
  CHECK(contains(message, "File too large"));
  CHECK(memo_test::file_bytes(path) == as_uchar(old_bytes));
  CHECK(dir.entries() == std::vector<std::string>{"checkpoint.bin"});
}

TEST_CASE("binary_file: writing to a full device is an error naming the device") {
  if (!std::filesystem::exists("/dev/full")) {
    MESSAGE("no /dev/full on this system");
    return;
  }
  const auto message = error_of([] {
    memo::atomic_file_writer out("/dev/full");
    out.write(pattern(1024, 2));
    out.commit();
  });
  CHECK(contains(message, "'/dev/full'"));
  CHECK(contains(message, "No space left on device"));
  // The device is written in place, never replaced by a rename.
  CHECK(std::filesystem::is_character_file("/dev/full"));
}

TEST_CASE("binary_file: a FIFO nobody reads is an error at once, one with a reader is written") {
  memo_test::scratch_directory dir;
  const auto fifo = dir / "pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // A blocking open would wait for a reader for ever: the test would hang.
  const auto message = error_of([&] { memo::atomic_file_writer out(fifo); });
  CHECK(contains(message, fifo.string()));
  CHECK(contains(message, "is a FIFO that no process is reading"));
  CHECK(std::filesystem::is_fifo(fifo));
  // With a reader (this process, non-blocking), the bytes arrive in place.
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(reader >= 0);
  const auto bytes = pattern(1000, 7);  // below the pipe's buffer: no reader thread needed
  {
    memo::atomic_file_writer out(fifo);
    out.write(bytes);
    out.commit();
  }
  std::vector<std::byte> got(2000);
  const ssize_t n = ::read(reader, got.data(), got.size());
  ::close(reader);
  REQUIRE(n == 1000);
  got.resize(1000);
  CHECK(got == bytes);
  CHECK(std::filesystem::is_fifo(fifo));
}

TEST_CASE("binary_file: reading names the file, the missing bytes and the offset") {
  memo_test::scratch_directory dir;
  const auto path = dir / "short.bin";
  memo_test::write_bytes(path, std::vector<unsigned char>(10, 1));
  memo::binary_file_reader in(path);
  std::vector<std::byte> first(4), rest(8);
  in.read(first, "a prefix");
  const auto message = error_of([&] { in.read(rest, "the payload"); });
  CHECK(contains(message, path.string()));
  CHECK(contains(message, "truncated while reading the payload: got 6 of 8 bytes at offset 4"));

  const auto header_message = error_of([&] {
    memo::binary_file_reader again(path);
    (void)again.read_header("token file");
  });
  CHECK(contains(header_message, "truncated token file: 10 bytes, the header alone needs 1024"));

  in.require_size(10, "ten bytes");
  CHECK(contains(error_of([&] { in.require_size(12, "six values"); }),
                 "truncated: 10 bytes, but its header (six values) needs 12"));
  CHECK(contains(error_of([&] { in.require_size(7, "seven bytes"); }),
                 "3 trailing bytes after what its header (seven bytes) describes"));

  const auto missing = error_of([&] { memo::binary_file_reader r(dir / "absent.bin"); });
  CHECK(contains(missing, (dir / "absent.bin").string()));
  CHECK(contains(missing, "cannot open"));
  const auto directory = error_of([&] { memo::binary_file_reader r(dir.path()); });
  CHECK(contains(directory, "not a regular file"));
  const auto no_directory = error_of([&] { memo::atomic_file_writer w(dir / "absent" / "x.bin"); });
  CHECK(contains(no_directory, (dir / "absent" / "x.bin").string()));
  CHECK(contains(no_directory, "No such file or directory"));
  const auto into_directory = error_of([&] { memo::atomic_file_writer w(dir.path()); });
  CHECK(contains(into_directory, "is a directory"));
}

TEST_CASE("binary_file: a symbolic link is written through and stays a link") {
  memo_test::scratch_directory dir;
  memo_test::write_bytes(dir / "target.bin", {1, 2, 3});
  std::filesystem::create_symlink("target.bin", dir / "link.bin");
  const auto bytes = pattern(100, 5);
  memo::atomic_file_writer out(dir / "link.bin");
  out.write(bytes);
  out.commit();
  CHECK(std::filesystem::is_symlink(dir / "link.bin"));
  CHECK(memo_test::file_bytes(dir / "target.bin") == as_uchar(bytes));
  auto names = dir.entries();
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"link.bin", "target.bin"});
}

TEST_CASE("binary_file: the replacement keeps the old file's permissions") {
  memo_test::scratch_directory dir;
  const auto path = dir / "private.bin";
  memo_test::write_bytes(path, {1});
  std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  memo::atomic_file_writer out(path);
  out.write(pattern(10, 1));
  out.commit();
  CHECK(std::filesystem::status(path).permissions() ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
  if (::geteuid() != 0) {  // root may write anything, so only a user sees the refusal
    std::filesystem::permissions(path, std::filesystem::perms::owner_read);
    CHECK(contains(error_of([&] { memo::atomic_file_writer w(path); }), "cannot replace it"));
    CHECK(memo_test::file_bytes(path).size() == 10);
  }
}

TEST_CASE("binary_file: the longest file name the system allows can be written") {
  memo_test::scratch_directory dir;
  const std::string name = std::string(250, 'a') + ".json";
  memo::atomic_file_writer out(dir / name);
  out.write(pattern(7, 2));
  out.commit();
  CHECK(dir.entries() == std::vector<std::string>{name});
}

TEST_CASE("binary_file: a name for an open descriptor appends to what it leads to") {
  memo_test::scratch_directory dir;
  const auto path = dir / "stream.bin";
  memo_test::write_bytes(path, {9, 8});
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND);
  REQUIRE(fd >= 0);
  struct ::stat before {}, after {};
  REQUIRE(::stat(path.c_str(), &before) == 0);
  {
    memo::atomic_file_writer out("/proc/self/fd/" + std::to_string(fd));
    out.write(pattern(3, 0));
    out.commit();
  }
  ::close(fd);
  auto expected = std::vector<unsigned char>{9, 8};
  for (const auto b : as_uchar(pattern(3, 0))) expected.push_back(b);
  CHECK(memo_test::file_bytes(path) == expected);
  REQUIRE(::stat(path.c_str(), &after) == 0);
  CHECK(after.st_ino == before.st_ino);  // written in place, not replaced
  CHECK(dir.entries() == std::vector<std::string>{"stream.bin"});
}

TEST_CASE("binary_file: names_same_file sees one file behind different spellings") {
  memo_test::scratch_directory dir;
  std::filesystem::create_directory(dir / "sub");
  // Names not yet created: the same once made absolute and normal.
  CHECK(memo::names_same_file(dir / "c.bin", dir / "sub" / ".." / "c.bin"));
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  const bool relative = memo::names_same_file("c.bin", "./c.bin") && memo::names_same_file("c.bin", dir / "c.bin") &&
                        memo::names_same_file("sub/../c.bin", "c.bin") && !memo::names_same_file("c.bin", "d.bin");
  std::filesystem::current_path(cwd);
  CHECK(relative);
  // Existing files: hard and symbolic links are the same file.
  memo_test::write_bytes(dir / "a.bin", {1});
  std::filesystem::create_hard_link(dir / "a.bin", dir / "hard.bin");
  std::filesystem::create_symlink(dir / "a.bin", dir / "soft.bin");
  CHECK(memo::names_same_file(dir / "hard.bin", dir / "a.bin"));
  CHECK(memo::names_same_file(dir / "soft.bin", dir / "a.bin"));
  CHECK_FALSE(memo::names_same_file(dir / "a.bin", dir / "b.bin"));
  // Devices take any number of outputs; empty names nothing.
  CHECK_FALSE(memo::names_same_file("/dev/null", "/dev/null"));
  CHECK_FALSE(memo::names_same_file("", ""));
}

TEST_CASE("binary_file: names_standard_output finds stdout behind its names, never /dev/null") {
  memo_test::scratch_directory dir;
  memo_test::write_bytes(dir / "a.bin", {1});
  CHECK_FALSE(memo::names_standard_output(dir / "a.bin"));
  CHECK_FALSE(memo::names_standard_output("/dev/null"));
  CHECK_FALSE(memo::names_standard_output(""));
  // Point stdout at a file for a moment: its names, and the file, are stdout.
  std::fflush(stdout);
  const int saved = ::dup(STDOUT_FILENO);
  REQUIRE(saved >= 0);
  const int fd = ::open((dir / "out.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  ::dup2(fd, STDOUT_FILENO);
  const bool through_proc = memo::names_standard_output("/proc/self/fd/1");
  const bool through_dev = memo::names_standard_output("/dev/stdout");
  const bool the_file = memo::names_standard_output(dir / "out.txt");
  const bool other = memo::names_standard_output(dir / "a.bin");
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  ::close(fd);
  CHECK(through_proc);
  CHECK(through_dev);
  CHECK(the_file);
  CHECK_FALSE(other);
}
