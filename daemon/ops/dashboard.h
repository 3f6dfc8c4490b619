// The live dashboard served at GET /: one self-contained HTML page (inline CSS and
// JavaScript, no CDN, no network beyond this agent) that polls /api/state every second and draws
// the members, accuracy and loss curves per node, the current SELMCAST plan as a graph with link
// rates, and traffic per node.
// Thread-safety: returns a constant.
#pragma once

#include <string>

namespace meshtrain::daemon {

const std::string& DashboardHtml();

}  // namespace meshtrain::daemon
