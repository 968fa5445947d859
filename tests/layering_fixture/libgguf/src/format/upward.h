// A format header that includes one of the writer's: tests/layering.cmake must refuse it.
#pragma once

#include "gguf/base/error.h"
#include "write/serialize.h"
