#include "tests/testing/ranks.h"

#include <algorithm>

namespace shardpoint::testing {

void* Arena::Alloc(int64_t bytes) {
  blocks_.emplace_back(new char[std::max<int64_t>(bytes, 1)]());
  return blocks_.back().get();
}

Status FirstError(const std::vector<Status>& all) {
  for (const Status& s : all) {
    if (!s.ok()) return s;
  }
  return OkStatus();
}

Status SaveRanks(const std::vector<State*>& states, const std::string& dir, SaveOptions options) {
  options.io_threads = 1;  // many ranks on few cores
  return FirstError(RunThreadRanks(static_cast<int>(states.size()), [&](Comm& comm) {
    return Save(*states[comm.rank()], dir, comm, options).status();
  }));
}

Status LoadRanks(const std::vector<State*>& states, const std::string& dir, LoadOptions options,
                 std::vector<LoadResult>* results) {
  options.io_threads = 1;
  std::vector<LoadResult> out(states.size());
  Status s = FirstError(RunThreadRanks(static_cast<int>(states.size()), [&](Comm& comm) {
    Result<LoadResult> r = Load(*states[comm.rank()], dir, comm, options);
    if (r.ok()) out[comm.rank()] = std::move(*r);
    return r.status();
  }));
  if (results != nullptr) *results = std::move(out);
  return s;
}

std::vector<State*> StatesOf(std::vector<TestRank>& ranks) {
  std::vector<State*> out;
  for (TestRank& r : ranks) out.push_back(&r.state);
  return out;
}

}  // namespace shardpoint::testing
