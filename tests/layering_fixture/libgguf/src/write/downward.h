// A writer header that includes format's and its own layer's: allowed.
#pragma once

#include "format/upward.h"
#include "write/serialize.h"
