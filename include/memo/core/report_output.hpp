// memo/core/report_output.hpp
//
// A command's report must reach its reader: stdout closed, redirected to a
// full disk or to a broken pipe loses it, and that is an error like a
// failed write of any other output. `finish_report` flushes both of the
// C++ and C streams, checks them, and turns a lost report into exit status
// 1 with a message on stderr naming the tool (a closed pipe included:
// `report_broken_pipes` turns its SIGPIPE into a failed write). Every
// command line and bench main returns through it.
#pragma once

#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>

namespace memo {

/// Makes a write to a pipe whose reader is gone fail (EPIPE, which
/// finish_report then reports) instead of ending the process silently with
/// SIGPIPE. A program's main calls it first (run_command does).
inline void report_broken_pipes() noexcept {
#ifdef SIGPIPE
  std::signal(SIGPIPE, SIG_IGN);
#endif
}

/// `status`, or 1 when what was printed to stdout did not all get there
/// (then says so on stderr as "<tool>: error: ...").
inline int finish_report(std::string_view tool, int status) {
  std::cout.flush();
  const bool lost = !std::cout || std::fflush(stdout) != 0 || std::ferror(stdout) != 0;
  if (!lost) return status;
  const std::string message = std::string(tool) + ": error: writing the report to standard output failed\n";
  std::fputs(message.c_str(), stderr);
  return 1;
}

}  // namespace memo
