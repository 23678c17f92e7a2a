// tests/support/main.cpp — the doctest main shared by every test executable.
//
// § Note [A filter that matches no test case]
// CTest runs each test case as `test_<layer> --test-case=<its name>`, the
// names listed by doctest_discover_tests at build time. A name the
// registration cannot carry (CTest cuts a list at ';', so a name with one
// arrives cut short) matches no test case, and doctest, having run nothing,
// exits 0: the entry shows Passed while none of its assertions ran. So a run
// given a --test-case filter that selects no test case fails here, naming the
// filter; test case names carry no ';' (',' is escaped by the registration).
// Read before: nothing. Read next: tests/support/skip.h.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string_view>

namespace {

int g_selected = -1;  // test cases that passed the filters in the last run (-1: no run)

struct SelectedCount : public doctest::IReporter {
  explicit SelectedCount(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    g_selected = static_cast<int>(stats.numTestCasesPassingFilters);
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
DOCTEST_REGISTER_LISTENER("lockstep_selected_count", 0, SelectedCount);

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int result = context.run();
  if (context.shouldExit() || result != 0) return result;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool filter = arg.starts_with("--test-case=") || arg.starts_with("-tc=");
    if (filter && g_selected == 0) {  // Note [A filter that matches no test case]
      std::fprintf(stderr,
                   "no test case matched %s: nothing was checked. A test case name with ';' is cut there "
                   "by CTest's registration; name it without one\n",
                   argv[i]);
      return 1;
    }
  }
  return result;
}
