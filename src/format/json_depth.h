// The nesting depth of a JSON text, measured before anyone parses it: the
// manifest and safetensors readers and the metadata check refuse texts nested
// deeper than their limit, so a hostile file cannot make a recursive parser
// overflow the stack.
#pragma once

#include <string_view>

namespace shardpoint::internal_format {

// The deepest nesting of objects and arrays outside strings (escapes inside
// strings understood); one pass, no allocation. Not a validator: unbalanced
// brackets just give a depth.
int JsonMaxDepth(std::string_view json);

}  // namespace shardpoint::internal_format
