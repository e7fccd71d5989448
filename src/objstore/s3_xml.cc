#include "src/objstore/s3_xml.h"

#include <cstdlib>

namespace shardpoint::internal_objstore {

std::string XmlDecode(std::string_view t) {
  std::string out;
  out.reserve(t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] != '&') {
      out.push_back(t[i]);
      continue;
    }
    const size_t semi = t.find(';', i);
    if (semi == std::string_view::npos) {
      out.push_back('&');
      continue;
    }
    const std::string_view e = t.substr(i + 1, semi - i - 1);
    if (e == "amp")
      out.push_back('&');
    else if (e == "lt")
      out.push_back('<');
    else if (e == "gt")
      out.push_back('>');
    else if (e == "quot")
      out.push_back('"');
    else if (e == "apos")
      out.push_back('\'');
    else if (e.size() > 1 && e[0] == '#') {
      const std::string digits(e.substr(e[1] == 'x' ? 2 : 1));
      const unsigned long c = std::strtoul(digits.c_str(), nullptr, e[1] == 'x' ? 16 : 10);
      // Keys are UTF-8; encode the code point.
      if (c < 0x80) {
        out.push_back(static_cast<char>(c));
      } else if (c < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (c >> 6)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
      } else {
        out.push_back(static_cast<char>(0xE0 | (c >> 12)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
      }
    } else {
      out.append(t.substr(i, semi - i + 1));
    }
    i = semi;
  }
  return out;
}

std::string XmlEscape(std::string_view t) {
  std::string out;
  for (char c : t) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::vector<std::string> XmlElements(std::string_view xml, std::string_view tag) {
  std::vector<std::string> out;
  const std::string open = "<" + std::string(tag) + ">";
  const std::string close = "</" + std::string(tag) + ">";
  size_t pos = 0;
  while ((pos = xml.find(open, pos)) != std::string_view::npos) {
    const size_t begin = pos + open.size();
    const size_t end = xml.find(close, begin);
    if (end == std::string_view::npos) break;
    out.emplace_back(xml.substr(begin, end - begin));
    pos = end + close.size();
  }
  return out;
}

std::string XmlElement(std::string_view xml, std::string_view tag) {
  std::vector<std::string> all = XmlElements(xml, tag);
  return all.empty() ? std::string() : XmlDecode(all.front());
}

}  // namespace shardpoint::internal_objstore
