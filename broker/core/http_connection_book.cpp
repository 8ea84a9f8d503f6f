// Decisions of http_connection_book.h.
#include "core/http_connection_book.h"

namespace fracgpu::broker {

HttpConnectionBook::Admission HttpConnectionBook::admit(const std::string& peer) const {
  Admission a;
  a.admit = true;
  // The peer's own bound first: a peer over it displaces its own oldest connection, not
  // someone else's.
  const auto p = peers_.find(peer);
  if (p != peers_.end() && p->second.all.size() >= limits_.max_per_peer) {
    const bool head = !p->second.heads.empty();
    a.evict = head ? p->second.heads.begin()->second : p->second.all.begin()->second;
    a.why = "its address opened more than " + std::to_string(limits_.max_per_peer) +
            " connections (the limit per address) and this was its oldest" +
            (head ? " without a complete request" : "");
    return a;
  }
  if (conns_.size() >= limits_.max_connections && !all_.empty()) {
    // Only when no connection is still sending its head does one being answered go: a
    // bound that could only refuse would let connections that never take their answer
    // (each until its response deadline) lock every newcomer out.
    const bool head = !heads_.empty();
    a.evict = head ? heads_.begin()->second : all_.begin()->second;
    a.why = "the endpoint has its maximum of " + std::to_string(limits_.max_connections) +
            " connections and this was the oldest" + (head ? " without a complete request" : "");
  }
  if (conns_.size() >= limits_.max_connections && all_.empty()) {
    a.admit = false;  // max_connections 0: nothing is ever admitted
    a.why = "the endpoint admits no connections";
  }
  return a;
}

void HttpConnectionBook::add(Id id, const std::string& peer, HttpClock::time_point now) {
  Conn c;
  c.peer = peer;
  c.accepted = now;
  c.deadline = now + limits_.head_timeout;
  PeerEntry& p = peers_[peer];
  p.all.emplace(now, id);
  p.heads.emplace(now, id);
  all_.emplace(now, id);
  heads_.emplace(now, id);
  deadlines_.emplace(c.deadline, id);
  conns_.emplace(id, std::move(c));
}

void HttpConnectionBook::complete_head(Id id, HttpClock::time_point now) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second.phase != Phase::kHead) return;
  Conn& c = it->second;
  heads_.erase({c.accepted, id});
  peers_[c.peer].heads.erase({c.accepted, id});
  deadlines_.erase({c.deadline, id});
  c.phase = Phase::kResponse;
  c.deadline = now + limits_.response_timeout;
  deadlines_.emplace(c.deadline, id);
}

void HttpConnectionBook::remove(Id id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  const Conn& c = it->second;
  deadlines_.erase({c.deadline, id});
  heads_.erase({c.accepted, id});
  all_.erase({c.accepted, id});
  if (auto p = peers_.find(c.peer); p != peers_.end()) {
    p->second.heads.erase({c.accepted, id});
    p->second.all.erase({c.accepted, id});
    if (p->second.all.empty()) peers_.erase(p);
  }
  conns_.erase(it);
}

std::vector<std::pair<HttpConnectionBook::Id, HttpConnectionBook::Phase>>
HttpConnectionBook::expired(HttpClock::time_point now) const {
  std::vector<std::pair<Id, Phase>> out;
  for (const auto& [deadline, id] : deadlines_) {
    if (deadline > now) break;
    out.emplace_back(id, conns_.at(id).phase);
  }
  return out;
}

std::optional<HttpClock::time_point> HttpConnectionBook::next_deadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.begin()->first;
}

std::size_t HttpConnectionBook::of_peer(const std::string& peer) const {
  const auto p = peers_.find(peer);
  return p == peers_.end() ? 0 : p->second.all.size();
}

std::optional<HttpConnectionBook::Phase> HttpConnectionBook::phase(Id id) const {
  const auto it = conns_.find(id);
  if (it == conns_.end()) return std::nullopt;
  return it->second.phase;
}

const std::string* HttpConnectionBook::peer_of(Id id) const {
  const auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : &it->second.peer;
}

}  // namespace fracgpu::broker
