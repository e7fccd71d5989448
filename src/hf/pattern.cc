#include "src/hf/pattern.h"

#include <algorithm>
#include <cctype>

namespace shardpoint::internal_hf {

Result<NamePattern> NamePattern::Parse(std::string_view text) {
  NamePattern p;
  p.text_ = std::string(text);
  size_t i = 0;
  while (i < text.size()) {
    size_t open = text.find('{', i);
    if (open != i) {
      std::string lit(text.substr(i, open == std::string_view::npos ? open : open - i));
      if (lit.find('}') != std::string::npos) {
        return InvalidArgumentError("pattern '" + p.text_ + "': unmatched '}'");
      }
      if (!p.tokens_.empty() && p.tokens_.back().var &&
          std::isdigit(static_cast<unsigned char>(lit[0]))) {
        return InvalidArgumentError("pattern '" + p.text_ +
                                    "': a placeholder is followed by a digit");
      }
      p.tokens_.push_back({false, lit});
      if (open == std::string_view::npos) break;
    }
    size_t close = text.find('}', open);
    if (close == std::string_view::npos || close == open + 1) {
      return InvalidArgumentError("pattern '" + p.text_ + "': unclosed or empty {}");
    }
    if (!p.tokens_.empty() && p.tokens_.back().var) {
      return InvalidArgumentError("pattern '" + p.text_ + "': two adjacent placeholders");
    }
    p.tokens_.push_back({true, std::string(text.substr(open + 1, close - open - 1))});
    i = close + 1;
  }
  return p;
}

std::optional<Bindings> NamePattern::Match(std::string_view name) const {
  Bindings b;
  size_t pos = 0;
  for (const Token& t : tokens_) {
    if (!t.var) {
      if (name.substr(pos, t.text.size()) != t.text) return std::nullopt;
      pos += t.text.size();
      continue;
    }
    size_t end = pos;
    while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
    if (end == pos || end - pos > 12 || (name[pos] == '0' && end - pos > 1)) return std::nullopt;
    int64_t v = std::stoll(std::string(name.substr(pos, end - pos)));
    auto [it, fresh] = b.emplace(t.text, v);
    if (!fresh && it->second != v) return std::nullopt;
    pos = end;
  }
  if (pos != name.size()) return std::nullopt;
  return b;
}

Result<std::string> NamePattern::Format(const Bindings& b) const {
  std::string out;
  for (const Token& t : tokens_) {
    if (!t.var) {
      out += t.text;
      continue;
    }
    auto it = b.find(t.text);
    if (it == b.end()) {
      return InvalidArgumentError("pattern '" + text_ + "': placeholder {" + t.text + "} unbound");
    }
    out += std::to_string(it->second);
  }
  return out;
}

std::vector<std::string> NamePattern::Vars() const {
  std::vector<std::string> v;
  for (const Token& t : tokens_) {
    if (t.var && std::find(v.begin(), v.end(), t.text) == v.end()) v.push_back(t.text);
  }
  return v;
}

}  // namespace shardpoint::internal_hf
