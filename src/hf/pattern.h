// Name patterns with {placeholder}s that match decimal numbers:
// "model.layers.{layer}.mlp.experts.{expert}.up_proj.weight".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/status.h"

namespace shardpoint::internal_hf {

using Bindings = std::map<std::string, int64_t>;

class NamePattern {
 public:
  // InvalidArgument on an unclosed or empty {}, or a placeholder followed
  // directly by another placeholder or a digit (ambiguous).
  static Result<NamePattern> Parse(std::string_view text);

  // The placeholder values if `name` matches (numbers without leading zeros;
  // a placeholder used twice must match the same number).
  std::optional<Bindings> Match(std::string_view name) const;
  // The name with every placeholder replaced; InvalidArgument if one is unbound.
  Result<std::string> Format(const Bindings& b) const;
  // Placeholder names, in order of first appearance.
  std::vector<std::string> Vars() const;
  const std::string& text() const { return text_; }

 private:
  struct Token {
    bool var = false;
    std::string text;  // literal or placeholder name
  };
  std::string text_;
  std::vector<Token> tokens_;
};

}  // namespace shardpoint::internal_hf
