// PLACEHOLDER: written by the file-format work.
#include "model/schedule.hpp"
