#include "src/base/guard.h"

namespace shardpoint::internal_base {

Status StatusFromCurrentException(const std::string& step) {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return InternalError(step + ": out of memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    return InternalError(step + ": unexpected exception: " + e.what());
  } catch (...) {
    return InternalError(step + ": unexpected exception of unknown type");
  }
}

}  // namespace shardpoint::internal_base
