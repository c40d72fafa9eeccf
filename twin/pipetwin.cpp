// The version the public header reports.
#include "twin/pipetwin.hpp"

#ifndef PIPETWIN_VERSION
#define PIPETWIN_VERSION "0.0.0"
#endif

namespace pipetwin::twin {

std::string_view library_version() { return PIPETWIN_VERSION; }

}  // namespace pipetwin::twin
