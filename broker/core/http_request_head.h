// The request head of the broker's HTTP face (http_front.h): where it ends in the bytes
// received so far, and what its request line asks for. Only what GET /metrics and GET
// /healthz need: the method, the path (the query is dropped) and the version; header
// fields are accepted and ignored, a body is never read (every answer closes the
// connection). Pure functions over a buffer; finding the end is incremental (each call
// scans only the bytes added since the last one, so a head sent a byte at a time costs
// O(head) in all, not O(head^2)).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace fracgpu::broker {

// Where the head ends: the offset just past the blank line ("\r\n\r\n", or "\n\n" from a
// lenient client), or npos. `scanned` is how many bytes an earlier call had already
// looked at (0 the first time).
std::size_t find_head_end(std::string_view buffer, std::size_t scanned);

struct RequestHead {
  std::string method;  // as sent ("GET", "HEAD", ...)
  std::string path;    // the target without its query ("/metrics")
  bool http10 = false;
};

struct HeadVerdict {
  bool ok = false;
  RequestHead head;  // when ok
  int status = 0;    // when not ok: the HTTP status to answer with (400, 505)
  std::string why;   // ... and the sentence
};

// Parses a complete head (the bytes up to find_head_end's offset).
HeadVerdict parse_request_head(std::string_view head);

}  // namespace fracgpu::broker
