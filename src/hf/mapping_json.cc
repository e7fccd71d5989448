// Parsing mapping files (JSON) and compiling their patterns.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "src/hf/mapping.h"
#include "src/io/resources.h"

namespace shardpoint {
namespace {

using Json = nlohmann::json;

Status IntOrName(const Json& j, std::string* out) {
  if (j.is_number_integer()) {
    *out = std::to_string(j.get<int64_t>());
  } else if (j.is_string() && !j.get_ref<const std::string&>().empty()) {
    *out = j.get<std::string>();
  } else {
    return InvalidArgumentError("expected an integer or a variable name, got " + j.dump());
  }
  return OkStatus();
}

Status ParseRule(const Json& j, HfRule* r) {
  if (!j.is_object()) return InvalidArgumentError("a rule must be a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const Json& v = it.value();
    if (k == "sp" && v.is_string()) {
      r->sp = v.get<std::string>();
    } else if (k == "hf" && v.is_string()) {
      r->hf = {v.get<std::string>()};
    } else if (k == "hf" && v.is_array()) {
      for (const Json& p : v) {
        if (!p.is_string()) return InvalidArgumentError("\"hf\" must hold strings");
        r->hf.push_back(p.get<std::string>());
      }
    } else if (k == "fuse" && v.is_string()) {
      r->fuse = v.get<std::string>();
    } else if (k == "dim" && v.is_number_integer()) {
      r->dim = v.get<int>();
    } else if (k == "sizes" && v.is_array()) {
      for (const Json& s : v) {
        r->sizes.emplace_back();
        SP_RETURN_IF_ERROR(IntOrName(s, &r->sizes.back()).WithContext("\"sizes\""));
      }
    } else if (k == "heads") {
      SP_RETURN_IF_ERROR(IntOrName(v, &r->heads).WithContext("\"heads\""));
    } else if (k == "groups") {
      SP_RETURN_IF_ERROR(IntOrName(v, &r->groups).WithContext("\"groups\""));
    } else if (k == "rows") {
      SP_RETURN_IF_ERROR(IntOrName(v, &r->rows).WithContext("\"rows\""));
    } else if (k == "stack" && v.is_string() && !v.get_ref<const std::string&>().empty()) {
      r->stack = {v.get<std::string>()};
    } else if (k == "stack" && v.is_array() && !v.empty()) {
      for (const Json& p : v) {
        if (!p.is_string() || p.get_ref<const std::string&>().empty()) {
          return InvalidArgumentError("\"stack\" must hold placeholder names");
        }
        r->stack.push_back(p.get<std::string>());
      }
    } else if (k == "split" && v.is_string()) {
      r->split = v.get<std::string>();
    } else if (k == "doc" || k == "comment") {
      continue;
    } else {
      return InvalidArgumentError("unknown field or wrong type: \"" + k + "\": " + v.dump());
    }
  }
  if (r->sp.empty() || r->hf.empty()) return InvalidArgumentError("\"sp\" and \"hf\" are required");
  return OkStatus();
}

// Where and why `text` is not JSON: "JSON syntax error at line L, column C:
// <what the parser expected>". Only called on text that failed to parse.
std::string SyntaxError(std::string_view text) {
  try {
    Json parsed = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/true,
                              /*ignore_comments=*/true);
    (void)parsed;
  } catch (const Json::parse_error& e) {
    // e.byte: 1-based index of the byte the parser stopped at.
    const size_t stop = std::min<size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    size_t line = 1, column = 1;
    for (size_t i = 0; i < stop; ++i) {
      if (text[i] == '\n') {
        ++line, column = 1;
      } else {
        ++column;
      }
    }
    std::string why = e.what();
    // "[json.exception.parse_error.101] parse error at line 3, column 25: <why>"
    const size_t colon = why.find(": ", why.find("parse error"));
    if (colon != std::string::npos) why = why.substr(colon + 2);
    return "JSON syntax error at line " + std::to_string(line) + ", column " +
           std::to_string(column) + ": " + why;
  } catch (const Json::exception& e) {
    return std::string("JSON error: ") + e.what();
  }
  return "not JSON";
}

std::string RuleName(size_t i, const HfRule& r) {
  return "rule " + std::to_string(i) + (r.sp.empty() ? "" : " ('" + r.sp + "')");
}

}  // namespace

Result<HfMapping> ParseHfMapping(std::string_view text, const std::string& source) {
  const std::string where = "mapping '" + source + "': ";
  Json root = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false,
                          /*ignore_comments=*/true);
  if (root.is_discarded()) return InvalidArgumentError(where + SyntaxError(text));
  if (!root.is_object()) return InvalidArgumentError(where + "not a JSON object");
  HfMapping m;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& k = it.key();
    const Json& v = it.value();
    if (k == "name" && v.is_string()) {
      m.name = v.get<std::string>();
    } else if (k == "keep_unmatched" && v.is_boolean()) {
      m.keep_unmatched = v.get<bool>();
    } else if (k == "skip" && v.is_array()) {
      for (const Json& x : v) {
        if (!x.is_string() || x.get_ref<const std::string&>().empty()) {
          return InvalidArgumentError(where + "\"skip\" must hold non-empty strings");
        }
        m.skip.push_back(x.get<std::string>());
      }
    } else if (k == "variables" && v.is_object()) {
      for (auto vi = v.begin(); vi != v.end(); ++vi) {
        if (!vi.value().is_number_integer()) {
          return InvalidArgumentError(where + "variable '" + vi.key() + "' is not an integer");
        }
        m.variables[vi.key()] = vi.value().get<int64_t>();
      }
    } else if (k == "rules" && v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i) {
        HfRule r;
        Status s = ParseRule(v[i], &r);
        if (!s.ok()) return InvalidArgumentError(where + RuleName(i, r) + ": " + s.message());
        m.rules.push_back(std::move(r));
      }
    } else if (k == "doc" || k == "description" || k == "comment") {
      continue;
    } else {
      return InvalidArgumentError(where + "unknown field or wrong type: \"" + k + "\"");
    }
  }
  Result<std::vector<internal_hf::CompiledRule>> compiled = internal_hf::CompileMapping(m);
  if (!compiled.ok()) return InvalidArgumentError(where + compiled.status().message());
  return m;
}

Result<HfMapping> ReadHfMapping(const std::string& path, const Resources& resources) {
  internal_io::CallResources res(resources);
  SP_ASSIGN_OR_RETURN(std::string text, res.storage()->ReadFileToString(path));
  return ParseHfMapping(text, path);
}

Result<HfMapping> ReadHfMapping(const std::string& path, Storage* storage) {
  Resources resources;
  resources.storage = storage;
  return ReadHfMapping(path, resources);
}

namespace internal_hf {

std::optional<HfFuse> ParseHfFuse(std::string_view s) {
  if (s == "concat") return HfFuse::kConcat;
  if (s == "gqa") return HfFuse::kGqa;
  return std::nullopt;
}

std::optional<HfSplit> ParseHfSplit(std::string_view s) {
  static constexpr std::pair<std::string_view, HfSplit> kNames[] = {
      {"replicated", HfSplit::kReplicated},
      {"column", HfSplit::kColumn},
      {"row", HfSplit::kRow},
      {"vocab", HfSplit::kVocab},
      {"swiglu", HfSplit::kSwiglu},
      {"gqa", HfSplit::kGqa},
      {"experts_swiglu", HfSplit::kExpertsSwiglu},
      {"experts_row", HfSplit::kExpertsRow},
      {"experts_column", HfSplit::kExpertsColumn},
  };
  for (const auto& [name, split] : kNames) {
    if (s == name) return split;
  }
  return std::nullopt;
}

Result<std::vector<CompiledRule>> CompileMapping(const HfMapping& mapping) {
  std::vector<CompiledRule> out;
  for (size_t i = 0; i < mapping.rules.size(); ++i) {
    const HfRule& r = mapping.rules[i];
    auto fail = [&](const std::string& msg) {
      return InvalidArgumentError(RuleName(i, r) + ": " + msg);
    };
    const std::optional<HfFuse> fuse = ParseHfFuse(r.fuse);
    if (!fuse) return fail("\"fuse\" must be concat or gqa");
    if (*fuse == HfFuse::kGqa && (r.hf.size() != 3 || r.heads.empty() || r.groups.empty())) {
      return fail("gqa needs hf [q, k, v], \"heads\" and \"groups\"");
    }
    const std::optional<HfSplit> split = ParseHfSplit(r.split);
    if (!split) return fail("unknown split hint '" + r.split + "'");
    if (r.dim < 0) return fail("\"dim\" must be >= 0");
    if (!r.sizes.empty() && r.sizes.size() != r.hf.size()) {
      return fail("\"sizes\" needs one entry per hf part");
    }
    if (!r.rows.empty() && (r.hf.size() != 1 || !r.stack.empty())) {
      return fail("\"rows\" needs a rename rule (one hf tensor, no stack)");
    }
    CompiledRule c{r, *fuse, *split, {}, {}};
    Result<NamePattern> sp = NamePattern::Parse(r.sp);
    if (!sp.ok()) return fail(sp.status().message());
    c.sp = *sp;
    std::vector<std::string> sp_vars = c.sp.Vars();
    std::string stacks;  // " plus {a}, {b}"
    for (size_t k = 0; k < r.stack.size(); ++k) {
      const std::string& st = r.stack[k];
      if (std::count(sp_vars.begin(), sp_vars.end(), st)) {
        return fail("the stack placeholder {" + st + "} must not appear in \"sp\"");
      }
      if (std::count(r.stack.begin(), r.stack.begin() + k, st)) {
        return fail("the stack placeholder {" + st + "} is listed twice");
      }
      stacks += (k == 0 ? " plus {" : ", {") + st + "}";
    }
    for (const std::string& h : r.hf) {
      Result<NamePattern> p = NamePattern::Parse(h);
      if (!p.ok()) return fail(p.status().message());
      std::vector<std::string> vars = p->Vars();
      std::vector<std::string> want = sp_vars;
      want.insert(want.end(), r.stack.begin(), r.stack.end());
      std::sort(vars.begin(), vars.end());
      std::sort(want.begin(), want.end());
      if (vars != want) {
        return fail("hf pattern '" + h + "' must use exactly the placeholders of \"sp\"" + stacks);
      }
      c.hf.push_back(*p);
    }
    out.push_back(std::move(c));
  }
  return out;
}

Result<Vars> ResolveVars(const HfMapping& mapping, const std::string& config_json,
                         const Vars& explicit_vars, const Vars& source_vars) {
  Vars v = mapping.variables;
  for (const auto& [k, x] : source_vars) v[k] = x;
  if (!config_json.empty()) {
    Json c = Json::parse(config_json, nullptr, /*allow_exceptions=*/false);
    if (c.is_discarded() || !c.is_object()) {
      return InvalidArgumentError("config.json is not a JSON object");
    }
    for (auto it = c.begin(); it != c.end(); ++it) {
      if (it.value().is_number_integer()) v[it.key()] = it.value().get<int64_t>();
    }
    if (v.count("num_attention_heads") && !c.contains("num_key_value_heads")) {
      v["num_key_value_heads"] = v["num_attention_heads"];
    }
  }
  for (const auto& [k, x] : explicit_vars) v[k] = x;
  return v;
}

}  // namespace internal_hf
}  // namespace shardpoint
