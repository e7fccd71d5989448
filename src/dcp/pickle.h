// A restricted pickle reader: decodes the pickles that PyTorch's distributed
// checkpoint (DCP) writes into a tree of plain values, without executing or
// importing anything.
//
// Only the opcodes those pickles use (protocols 2 to 5, no text-protocol
// literals) are accepted. A class or function reference (GLOBAL,
// STACK_GLOBAL) must pass the caller's allow-list and is kept as a name;
// REDUCE, NEWOBJ and BUILD record the call they describe (callable, args,
// state) instead of making it. Errors: DataLoss for malformed input (naming
// the byte offset), FailedPrecondition for an opcode or class the reader does
// not load (naming it). Memory is bounded by the input size: every opcode
// makes at most one value.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/status.h"

namespace shardpoint::internal_dcp {

enum class PyKind : uint8_t {
  kNone,
  kBool,
  kInt,
  kFloat,
  kStr,
  kBytes,
  kTuple,
  kList,
  kDict,
  kGlobal,  // a class or function, named "module.name" in `text`
  kCall,    // REDUCE/NEWOBJ: `callable`(`args`), then BUILD `state`, SETITEMS `items`
  kPersId,  // BINPERSID: a persistent id (`args` is the id value)
};

inline constexpr uint32_t kNoValue = UINT32_MAX;

struct PyValue {
  PyKind kind = PyKind::kNone;
  int64_t i = 0;                 // kBool (0/1), kInt
  double f = 0;                  // kFloat
  std::string text;              // kStr, kBytes, kGlobal
  std::vector<uint32_t> items;   // kTuple, kList; kDict and kCall: key, value, key, value, ...
  uint32_t callable = kNoValue;  // kCall
  uint32_t args = kNoValue;      // kCall, kPersId
  uint32_t state = kNoValue;     // kCall, after BUILD
};

// A decoded pickle: values refer to each other by index into `values`
// (shared and even cyclic references are possible; walkers bound depth).
struct PickleTree {
  std::vector<PyValue> values;
  uint32_t root = kNoValue;
  const PyValue& at(uint32_t v) const { return values[v]; }
};

// True if the class or function `module`.`name` may appear.
using GlobalAllowed = std::function<bool(std::string_view module, std::string_view name)>;

// `what` names the input in errors (a file, or an item of one).
Result<PickleTree> ParsePickle(std::string_view bytes, const GlobalAllowed& allowed,
                               const std::string& what);

// Helpers for walking a tree; errors are DataLoss naming `what`.
// The value of key `key` (a kStr) in dict or call-items `dict`, or kNoValue.
uint32_t DictGet(const PickleTree& t, uint32_t dict, std::string_view key);
// "module.name" of a kGlobal, or the kind for other values (for messages).
std::string Describe(const PickleTree& t, uint32_t v);

}  // namespace shardpoint::internal_dcp
