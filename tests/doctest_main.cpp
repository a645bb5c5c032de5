// The doctest runner shared by every memo test executable.
//
// ctest runs each test case on its own (`--test-case=<name>`). A name that
// the filter no longer matches (a renamed case, or a character that the
// registration splits on) would run nothing and pass, so a run whose
// filters select no test case at all is a failure here.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

namespace {

unsigned test_cases_selected = 0;

// Records how many test cases passed the filters; reports nothing.
struct selection_counter : doctest::IReporter {
  explicit selection_counter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    test_cases_selected = stats.numTestCasesPassingFilters;
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

DOCTEST_REGISTER_LISTENER("memo_selection_counter", 1, selection_counter);

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int status = context.run();
  if (context.shouldExit()) return status;  // --help, --list-test-cases, ...
  if (status == 0 && test_cases_selected == 0) {
    std::fprintf(stderr, "no test case matches the filters given: nothing ran\n");
    return 1;
  }
  return status;
}
