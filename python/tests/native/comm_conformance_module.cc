// _shardpoint_testing: a test-only pybind11 module (never in the package)
// that runs the Comm conformance suite (tests/comm/comm_conformance.h, the
// same test bodies as on the single, thread and MPI comms) on Comms made in
// Python: the torch.distributed and mpi4py adapters, or any Python subclass of
// shardpoint.Comm. Built beside _shardpoint from the same libshardpoint.a
// (python/CMakeLists.txt); it finds the Comm type _shardpoint registered
// through pybind11's shared registry, so import shardpoint first.
//
//   run_comm_conformance(comms: list[Comm], cases: str = "*")
//       -> list[tuple[str, bool, str]]
// runs the cases whose names match `cases` (a gtest pattern over case names:
// "AllGather*:Broadcast", or "*-LargePayloads" for all but one) with `comms`
// as the ranks this process hosts (one per process under mpirun or
// torch.distributed; several run on threads of their own) and returns
// (case name, passed, failure messages) per case. The GIL is released
// meanwhile: Python comms take it in each callback.
//   comm_conformance_cases() -> list[str]
// names every case, in order, without running any.
#include <gtest/gtest.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/comm/comm_conformance.h"

namespace py = pybind11;

namespace shardpoint::testing {
namespace {

// The ranks this process hosts in the current run.
std::vector<Comm*>* g_hosted = nullptr;

std::vector<Status> RunHosted(const RankBody& body) {
  std::vector<Comm*>& comms = *g_hosted;
  std::vector<Status> statuses(comms.size());
  if (comms.size() == 1) {
    statuses[0] = body(*comms[0]);
    return statuses;
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < comms.size(); ++i) {
    threads.emplace_back([&, i] { statuses[i] = body(*comms[i]); });
  }
  for (std::thread& t : threads) t.join();
  return statuses;
}

INSTANTIATE_TEST_SUITE_P(Python, CommConformance,
                         ::testing::Values(CommTransport{"Python", RunHosted}),
                         CommTransportName);

using CaseResult = std::tuple<std::string, bool, std::string>;

// "AllGather/Python" -> "CommConformance.AllGather"
std::string CaseName(const ::testing::TestInfo& info) {
  const std::string name = info.name();
  return "CommConformance." + name.substr(0, name.find('/'));
}

// Collects each case's outcome and failure messages (from any rank thread),
// and prints one line per case start and end in place of GoogleTest's
// printer, whose messages hold whole payloads (up to 64 MiB).
class Collector : public ::testing::EmptyTestEventListener {
 public:
  static constexpr size_t kMaxMessage = 2000;

  void OnTestStart(const ::testing::TestInfo& info) override {
    std::lock_guard<std::mutex> lock(mu_);
    failures_.clear();
    std::printf("[ RUN      ] %s.%s\n", info.test_suite_name(), info.name());
    std::fflush(stdout);
  }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::string message = r.message();
    if (message.size() > kMaxMessage) {
      message = message.substr(0, kMaxMessage) + "... (" + std::to_string(message.size()) +
                " characters)";
    }
    std::lock_guard<std::mutex> lock(mu_);
    failures_ += std::string(r.file_name() ? r.file_name() : "?") + ":" +
                 std::to_string(r.line_number()) + ": " + message + "\n";
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    std::lock_guard<std::mutex> lock(mu_);
    const bool passed = info.result()->Passed();
    results_.emplace_back(CaseName(info), passed, failures_);
    std::printf("[%s] %s.%s\n%s", passed ? "       OK " : "  FAILED  ", info.test_suite_name(),
                info.name(), failures_.c_str());
    std::fflush(stdout);
  }
  std::vector<CaseResult> results() {
    std::lock_guard<std::mutex> lock(mu_);
    return results_;
  }

 private:
  std::mutex mu_;
  std::string failures_;
  std::vector<CaseResult> results_;
};

// Case patterns to test-name patterns: "A*:B" -> "Python/CommConformance.A*/Python:
// Python/CommConformance.B/Python"; "*-C" runs all but C (gtest's syntax).
std::string GtestFilter(const std::string& cases) {
  auto names = [](const std::string& patterns) {
    std::string out;
    size_t start = 0;
    while (start <= patterns.size()) {
      size_t end = patterns.find(':', start);
      if (end == std::string::npos) end = patterns.size();
      if (!out.empty()) out += ':';
      out += "Python/CommConformance." + patterns.substr(start, end - start) + "/Python";
      start = end + 1;
    }
    return out;
  };
  const size_t minus = cases.find('-');
  if (minus == std::string::npos) return names(cases);
  return names(cases.substr(0, minus)) + "-" + names(cases.substr(minus + 1));
}

void InitOnce() {
  static bool initialized = false;
  if (initialized) return;
  int argc = 1;
  char name[] = "_shardpoint_testing";
  char* argv[] = {name, nullptr};
  ::testing::InitGoogleTest(&argc, argv);  // also registers the parameterized cases
  ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
  delete listeners.Release(listeners.default_result_printer());  // Collector prints
  initialized = true;
}

// Every case name, in order, without running any.
std::vector<std::string> CommConformanceCases() {
  InitOnce();
  std::vector<std::string> names;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(i);
    if (std::string(suite.name()) != "Python/CommConformance") continue;
    for (int j = 0; j < suite.total_test_count(); ++j) names.push_back(CaseName(*suite.GetTestInfo(j)));
  }
  return names;
}

std::vector<CaseResult> RunCommConformance(const py::list& comms, const std::string& cases) {
  std::vector<Comm*> hosted;
  for (py::handle h : comms) hosted.push_back(h.cast<Comm*>());
  if (hosted.empty()) throw py::value_error("run_comm_conformance: no comms");
  InitOnce();
  GTEST_FLAG_SET(filter, GtestFilter(cases));
  auto* collector = new Collector;  // owned by the listener list until released
  ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
  listeners.Append(collector);
  g_hosted = &hosted;
  {
    py::gil_scoped_release nogil;
    const int failed = RUN_ALL_TESTS();  // the outcome per case is in the results
    static_cast<void>(failed);
  }
  g_hosted = nullptr;
  listeners.Release(collector);
  std::vector<CaseResult> results = collector->results();
  delete collector;
  return results;
}

}  // namespace
}  // namespace shardpoint::testing

PYBIND11_MODULE(_shardpoint_testing, m) {
  m.doc() = "Test-only: the Comm conformance suite on Comms made in Python.";
  // shardpoint.Comm must be registered before a list of them can be cast.
  py::module_::import("shardpoint._shardpoint");
  m.def("comm_conformance_cases", &shardpoint::testing::CommConformanceCases);
  m.def("run_comm_conformance", &shardpoint::testing::RunCommConformance, py::arg("comms"),
        py::arg("cases") = "*");
}
