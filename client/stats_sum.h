#pragma once
// One part of Stats added to another the way Stats' sum adds it (Merge), for
// the layers that fill a part and keep it across sessions (the resilient
// verifier's).
#include "client/client_stats.h"

namespace splitspec {

void add_part(TargetStats& into, const TargetStats& from);
void add_part(LinkStats& into, const LinkStats& from);

}  // namespace splitspec
