// Helpers for layout tests: save and load the States of several ranks as
// threads, and own the memory behind a rank's local tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/state.h"

namespace shardpoint {

// Lets GoogleTest print boxes in failure messages: "[0:2, 0:4]".
inline void PrintTo(const Box& box, std::ostream* os) { *os << box.ToString(); }

}  // namespace shardpoint

namespace shardpoint::testing {

// Memory for one rank's local tensors; zero-initialized, never moved.
class Arena {
 public:
  // `bytes` zeroed bytes (at least 1, so every pointer is distinct and valid).
  void* Alloc(int64_t bytes);
  void* Alloc(int64_t elements, DType dtype) {
    return Alloc(elements * static_cast<int64_t>(DTypeSize(dtype)));
  }

 private:
  std::vector<std::unique_ptr<char[]>> blocks_;
};

// One rank: its State and the memory behind it.
struct TestRank {
  Arena arena;
  State state;
};

// The first failing status of `all`, or OK.
Status FirstError(const std::vector<Status>& all);

// Saves states[r] as rank r of states.size() thread ranks.
Status SaveRanks(const std::vector<State*>& states, const std::string& dir,
                 SaveOptions options = {});
// Loads into states[r] as rank r; results[r] is rank r's LoadResult.
Status LoadRanks(const std::vector<State*>& states, const std::string& dir,
                 LoadOptions options = {}, std::vector<LoadResult>* results = nullptr);

// Pointers to the states of `ranks`.
std::vector<State*> StatesOf(std::vector<TestRank>& ranks);

}  // namespace shardpoint::testing
