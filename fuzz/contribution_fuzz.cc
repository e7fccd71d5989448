// libFuzzer target for the save plan's rank-to-rank message: what each rank
// sends at the start of Save (its regions and objects, without memory),
// decoded by every rank. Whatever decodes must re-encode to something that
// decodes to the same thing, and planning a save from it (as two ranks
// holding it) must end in a plan or a typed error.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "src/plan/save_plan.h"

using shardpoint::internal_plan::Contribution;
using shardpoint::internal_plan::DecodeContribution;
using shardpoint::internal_plan::EncodeContribution;
using shardpoint::internal_plan::PlanSave;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  shardpoint::Result<Contribution> c = DecodeContribution(in, 1);
  if (!c.ok()) return 0;
  std::string again = EncodeContribution(*c);
  shardpoint::Result<Contribution> c2 = DecodeContribution(again, 1);
  if (!c2.ok() || EncodeContribution(*c2) != again) std::abort();
  (void)PlanSave({*c, *c}, /*list_replicas=*/true);
  return 0;
}
