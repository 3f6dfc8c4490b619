#include "node/endpoint.h"

namespace meshtrain::node {

std::vector<Output> RouteNetwork(std::vector<Output> outputs, Endpoint& endpoint) {
  std::vector<Output> rest;
  for (auto& o : outputs) {
    if (auto* d = std::get_if<SendDatagram>(&o)) {
      endpoint.SendDatagram(d->to, d->msg);
    } else if (auto* c = std::get_if<Connect>(&o)) {
      endpoint.Connect(c->conn, c->to);
    } else if (auto* f = std::get_if<SendFrame>(&o)) {
      endpoint.SendFrame(f->conn, f->msg);
    } else if (auto* cl = std::get_if<Close>(&o)) {
      endpoint.Close(cl->conn, cl->abort);
    } else if (auto* p = std::get_if<ProbeLink>(&o)) {
      endpoint.ProbeLink(*p);
    } else {
      rest.push_back(std::move(o));
    }
  }
  return rest;
}

}  // namespace meshtrain::node
