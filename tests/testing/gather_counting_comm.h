// A Comm that counts the bytes its rank receives as the root of a Gather (at
// a save: the cache agreement's flags and the commit messages): `gathered`
// every message, `from_others` those of the other ranks (its own crosses no
// link).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tests/testing/forwarding_comm.h"

namespace shardpoint::testing {

class GatherCountingComm : public ForwardingComm {
 public:
  using ForwardingComm::ForwardingComm;
  Status Gather(std::string_view mine, int root, std::vector<std::string>* all) override {
    Status s = inner().Gather(mine, root, all);
    if (s.ok() && root == rank()) {
      uint64_t call = 0;
      for (const std::string& m : *all) call += m.size();
      gathered += call;
      from_others += call - mine.size();
    }
    return s;
  }
  uint64_t gathered = 0, from_others = 0;
};

}  // namespace shardpoint::testing
