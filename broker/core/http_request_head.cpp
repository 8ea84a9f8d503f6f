// Request-head parsing for http_front (RFC 9112 section 3, as much as two GET endpoints
// need; anything else is a 400 with a reason, never an exception).
#include "core/http_request_head.h"

#include <algorithm>

namespace fracgpu::broker {
namespace {

bool is_token_char(char c) {  // RFC 9110 tchar, enough for a method
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

HeadVerdict bad(int status, std::string why) {
  HeadVerdict v;
  v.status = status;
  v.why = std::move(why);
  return v;
}

}  // namespace

std::size_t find_head_end(std::string_view buffer, std::size_t scanned) {
  // The terminator may straddle the old end: look back three bytes.
  std::size_t i = scanned > 3 ? scanned - 3 : 0;
  for (; i < buffer.size(); ++i) {
    if (buffer[i] != '\n') continue;
    if (i + 1 < buffer.size() && buffer[i + 1] == '\n') return i + 2;
    if (i + 2 < buffer.size() && buffer[i + 1] == '\r' && buffer[i + 2] == '\n') return i + 3;
  }
  return std::string_view::npos;
}

HeadVerdict parse_request_head(std::string_view head) {
  // A server should ignore at least one empty line before the request line (RFC 9112 2.2).
  while (!head.empty() && (head.front() == '\r' || head.front() == '\n')) head.remove_prefix(1);
  const std::size_t eol = head.find('\n');
  if (eol == std::string_view::npos) return bad(400, "no request line");
  std::string_view line = head.substr(0, eol);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);

  const std::size_t sp1 = line.find(' ');
  const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return bad(400, "the request line is not METHOD TARGET HTTP/1.x");
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (method.empty() || !std::all_of(method.begin(), method.end(), is_token_char))
    return bad(400, "the method is not a token");
  if (target.empty() || target.front() != '/') return bad(400, "the target is not a path");
  if (version.size() != 8 || version.substr(0, 7) != "HTTP/1.")
    return bad(505, "only HTTP/1.0 and HTTP/1.1 are served");
  if (version[7] != '0' && version[7] != '1')
    return bad(505, "only HTTP/1.0 and HTTP/1.1 are served");

  HeadVerdict v;
  v.ok = true;
  v.head.method = std::string(method);
  v.head.path = std::string(target.substr(0, target.find('?')));
  v.head.http10 = version[7] == '0';
  return v;
}

}  // namespace fracgpu::broker
