// Reading the few S3 XML responses the client needs (errors, ListObjectsV2,
// CreateMultipartUpload) without an XML library: S3's responses are flat,
// generated documents; elements are found by name, entities decoded.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace shardpoint::internal_objstore {

// The raw (undecoded) contents of every <tag>...</tag> in `xml`, in order:
// containers (<Contents>) whose leaves are read with XmlElement.
std::vector<std::string> XmlElements(std::string_view xml, std::string_view tag);
// The first one's text, entities decoded; empty if none.
std::string XmlElement(std::string_view xml, std::string_view tag);
// &amp; &lt; &gt; &quot; &apos; and numeric references decoded.
std::string XmlDecode(std::string_view text);
// The five characters XML needs escaped, escaped.
std::string XmlEscape(std::string_view text);

}  // namespace shardpoint::internal_objstore
