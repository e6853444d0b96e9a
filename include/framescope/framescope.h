// framescope/framescope.h: umbrella header of the C++ API.
#pragma once

#include "framescope/chrome_trace.h"
#include "framescope/clock.h"
#include "framescope/debug_info.h"
#include "framescope/record_function.h"
#include "framescope/record_profile.h"
#include "framescope/scoped_range.h"
#include "framescope/session.h"
#include "framescope/trace.h"
